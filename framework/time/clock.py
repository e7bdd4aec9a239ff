"""A task's event-time clock: per-input watermarks merged into per-step watermarks.

Inputs are the task's partitions of its input topics (one partition number per task):

- a *source* partition has a watermark generator (``WatermarkStrategy``) and, optionally,
  an idle timeout after which it leaves the minimum until data arrives again;
- a *fed* partition (a repartition topic, or a source ``from_upstream``) carries watermark
  control records from every upstream task; its watermark is the minimum over the
  upstream tasks that are not idle.

A ``Clock`` is the watermark of one set of inputs: every step reachable from exactly
those inputs shares it. Its watermark is the minimum over its non-idle inputs and never
decreases; when it advances, the steps that listen are called in topological order, so a
window that fires into a downstream window delivers its results before that window's
watermark moves (a result is never late because of its own firing).

Checkpointed, the clock is keyed by names from the pipeline only: each input by its topic,
each clock's watermark by the steps that use it. A pipeline that gains or loses a source or
a step restores every remaining input and step onto the same name (docs/state-format.md).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Any

from framework.time.watermarks import NO_WATERMARK, WatermarkGenerator

WATERMARK_HEADER = "fw.watermark"
Listener = Callable[[int], None]


class Input:
    """One input partition of a task and its watermark."""

    __slots__ = (
        "clocks",
        "fed",
        "generator",
        "idle",
        "idle_timeout_ms",
        "last_active_ms",
        "seen",
        "topic",
        "ups",
        "ups_idle",
        "ups_n",
        "watermark",
    )

    def __init__(self, topic: str, generator: WatermarkGenerator | None, fed: bool,
                 idle_timeout_ms: int | None) -> None:
        self.topic = topic
        self.watermark = NO_WATERMARK
        self.idle = False
        self.seen = False
        self.last_active_ms = 0
        self.idle_timeout_ms = idle_timeout_ms
        self.generator = generator
        self.fed = fed
        self.ups: dict[int, int] = {}  # upstream task -> its last watermark
        self.ups_idle: set[int] = set()
        self.ups_n = 0  # upstream task count, learnt from the control records
        self.clocks: list[Clock] = []

    def snapshot(self) -> dict[str, Any]:
        gen = None if self.generator is None else self.generator.snapshot()
        return {"wm": self.watermark, "gen": gen, "ups": dict(self.ups), "idle": sorted(self.ups_idle),
                "n": self.ups_n, "off": self.idle}

    def restore(self, state: dict[str, Any]) -> None:
        self.watermark = state["wm"]
        if self.generator is not None and state["gen"] is not None:
            self.generator.restore(state["gen"])
        self.ups, self.ups_idle, self.ups_n = dict(state["ups"]), set(state["idle"]), state["n"]
        self.idle = state.get("off", False)  # a replay must see the idleness the first run saw


class Clock:
    """The watermark of the steps fed by one set of inputs."""

    __slots__ = ("inputs", "listeners", "steps", "watermark")

    def __init__(self, inputs: list[Input]) -> None:
        self.inputs = inputs
        self.watermark = NO_WATERMARK
        self.listeners: list[tuple[int, Listener]] = []  # (topological position, callback)
        self.steps: set[str] = set()  # the steps that run on it: its names in a checkpoint

    @property
    def idle(self) -> bool:
        return all(i.idle for i in self.inputs)

    def candidate(self) -> int:
        active = [i.watermark for i in self.inputs if not i.idle]
        return min(active) if active else self.watermark


class TaskClock:
    """Every input and clock of one task, with the wall clock the task runs on."""

    def __init__(self, now_ms: Callable[[], int]) -> None:
        self.now_ms = now_ms
        self.inputs: dict[str, Input] = {}
        self.clocks: dict[frozenset[str], Clock] = {}

    # -- wiring (at compile time) ----------------------------------------------------------

    def input(self, topic: str, generator: WatermarkGenerator | None = None, fed: bool = False,
              idle_timeout_ms: int | None = None) -> Input:
        inp = self.inputs.get(topic)
        if inp is None:
            inp = self.inputs[topic] = Input(topic, generator, fed, idle_timeout_ms)
            inp.last_active_ms = self.now_ms()
        elif generator is not None or fed:  # first met as a clock's member, now as a decoder
            inp.generator, inp.fed, inp.idle_timeout_ms = generator, fed, idle_timeout_ms
        return inp

    def clock(self, topics: Iterable[str], step: str | None = None) -> Clock:
        """The clock of ``topics``; ``step`` runs on it (and names it in checkpoints)."""
        key = frozenset(topics)
        c = self.clocks.get(key)
        if c is None:
            c = self.clocks[key] = Clock([self.input(t) for t in sorted(key)])
            for inp in c.inputs:
                inp.clocks.append(c)
        if step is not None:
            c.steps.add(step)
        return c

    # -- progress --------------------------------------------------------------------------

    def advanced(self, inp: Input) -> None:
        """``inp``'s watermark rose or it went idle: move the clocks that contain it."""
        calls: list[tuple[int, Listener, int]] = []
        for c in inp.clocks:
            w = c.candidate()
            if w > c.watermark:
                c.watermark = w
                calls.extend((pos, fn, w) for pos, fn in c.listeners)
        if calls:
            calls.sort(key=lambda c: c[0])
            for _, fn, w in calls:
                fn(w)

    def force(self, topic: str, watermark: int) -> None:
        """Raise a generated input's watermark to ``watermark`` (the TestDriver's
        ``advance_watermark``): as if its generator had seen that much event time."""
        inp = self.inputs[topic]
        if inp.fed or watermark <= inp.watermark:
            return
        inp.watermark = watermark
        if inp.generator is not None:
            inp.generator.watermark = max(inp.generator.watermark, watermark)
        self.advanced(inp)

    def on_control(self, inp: Input, header: bytes) -> None:
        """A watermark control record ``b"<upstream>/<count>:<watermark|idle>"`` on a fed input."""
        who, _, what = header.decode().partition(":")
        u_s, _, n_s = who.partition("/")
        u, n = int(u_s), int(n_s)
        inp.ups_n = max(inp.ups_n, n)
        if what == "idle":
            inp.ups_idle.add(u)
        else:
            inp.ups_idle.discard(u)
            w = int(what)
            if w > inp.ups.get(u, NO_WATERMARK):
                inp.ups[u] = w
        members = [inp.ups.get(i, NO_WATERMARK) for i in range(inp.ups_n) if i not in inp.ups_idle]
        if not members:
            if not inp.idle:
                inp.idle = True
                self.advanced(inp)
            return
        inp.idle = False
        w = min(members)
        if w > inp.watermark:
            inp.watermark = w
            self.advanced(inp)

    def tick(self) -> None:
        """Wall-clock housekeeping: a source partition silent for its idle timeout goes idle."""
        now = self.now_ms()
        for inp in self.inputs.values():
            if inp.idle_timeout_ms is None or inp.fed:
                continue
            if inp.seen:
                inp.seen = False
                inp.last_active_ms = now
            elif not inp.idle and now - inp.last_active_ms >= inp.idle_timeout_ms:
                inp.idle = True
                self.advanced(inp)

    # -- checkpoint ------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """``{"inputs": {topic: input state}, "steps": {step: watermark}}``."""
        return {"inputs": {t: i.snapshot() for t, i in self.inputs.items()},
                "steps": {s: c.watermark for c in self.clocks.values() for s in sorted(c.steps)}}

    def restore(self, state: dict[str, Any] | None) -> None:
        """Inputs and steps that are in ``state`` continue; new ones start fresh. A clock whose
        steps had different watermarks (their inputs changed) keeps the highest: watermarks
        never go back."""
        if not state:
            return
        for topic, s in state["inputs"].items():
            if topic in self.inputs:
                self.inputs[topic].restore(s)
        saved = state["steps"]
        for c in self.clocks.values():
            known = [saved[s] for s in c.steps if s in saved]
            if known:
                c.watermark = max(c.watermark, *known)


def rescaled(snapshots: list[dict[str, Any]], tasks: int, internal: Collection[str]) -> dict[str, Any]:
    """The clock every task of a service rescaled to ``tasks`` partitions starts with, from the
    ``snapshot``s of all its old tasks: each input and each step at the minimum over the old
    tasks that have it. A key's state moves to a task whose clock is no later than the one it
    left, so an open window or a pending timer has not passed there, and no record that was in
    time becomes late (one that was late may be in time: the minimum is the price of not
    knowing which task a record would have met).

    An input fed by the service's own repartition topics (``internal``) is fed by the new
    tasks: ``tasks`` upstream tasks, each at the input's minimum until its control records
    raise it. An input fed by another service keeps that service's upstream tasks, each at its
    minimum over the old tasks."""
    inputs: dict[str, dict[str, Any]] = {}
    for topic in sorted({t for s in snapshots for t in s["inputs"]}):
        olds = [s["inputs"][topic] for s in snapshots if topic in s["inputs"]]
        inputs[topic] = _rescaled_input(olds, tasks if topic in internal else None)
    steps: dict[str, int] = {}
    for s in snapshots:
        for step, w in s["steps"].items():
            steps[step] = min(steps.get(step, w), w)
    return {"inputs": inputs, "steps": steps}


def _rescaled_input(olds: list[dict[str, Any]], upstream_tasks: int | None) -> dict[str, Any]:
    active = [o for o in olds if not o.get("off", False)] or olds  # an idle input's watermark holds nothing back
    wm = min(o["wm"] for o in active)
    gens = [o["gen"] for o in active if o["gen"] is not None]
    if upstream_tasks is not None:
        return {"wm": wm, "gen": min(gens) if gens else None, "ups": {u: wm for u in range(upstream_tasks)},
                "idle": [], "n": upstream_tasks, "off": False}
    ups: dict[int, int] = {}
    for o in olds:
        for u, w in o["ups"].items():
            ups[int(u)] = min(ups.get(int(u), w), w)
    idle = set.intersection(*(set(o["idle"]) for o in olds))
    return {"wm": wm, "gen": min(gens) if gens else None, "ups": ups, "idle": sorted(idle),
            "n": max(o["n"] for o in olds), "off": all(o.get("off", False) for o in olds)}


def control_header(upstream: int, count: int, watermark: int | None) -> bytes:
    """The header value of a watermark control record (``None``: the upstream task is idle)."""
    return f"{upstream}/{count}:{'idle' if watermark is None else watermark}".encode()
