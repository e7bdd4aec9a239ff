"""What a task's operators can reach: its stores, its output, and the record in hand.

``TaskContext`` has what the operators' protocol of it asks (``framework.operators.context``).
The record types (``Headers``, ``InputRecord``, ``Output``, ``record_headers``) are
``framework.records``', imported from here too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from framework.errors import RecordCoordinates, RecordError, SerializationError
from framework.headers import ORIGIN
from framework.pipeline.definition import async_input
from framework.records import Headers, InputRecord, Output, record_headers  # noqa: F401 - re-exported
from framework.serde.values import ValueCodec
from framework.state.cache import CachedPartition
from framework.time.clock import Clock, TaskClock
from framework.time.timers import TimerService


class TaskContext:
    """Per task: partition number, service name, stores by step name, output, current record,
    the value codec, and its time: the task clock, watermark and processing-time listeners,
    counters."""

    __slots__ = (
        "async_operators",
        "calls",
        "carried",
        "checkpoint_listeners",
        "close_listeners",
        "codec",
        "counters",
        "current",
        "global_listeners",
        "globals",
        "order",
        "output",
        "partition",
        "pipeline",
        "processing_listeners",
        "service",
        "start_listeners",
        "stores",
        "task",
        "time",
        "timers_in_memory",
    )

    def __init__(self, pipeline: Any, partition: int, output: Output,
                 stores: dict[str, CachedPartition], time: TaskClock, task: Any, codec: ValueCodec,
                 globals: Any = None, calls: Any = None) -> None:
        self.pipeline = pipeline
        self.codec = codec
        self.service: str = pipeline.name
        self.partition = partition
        self.output = output
        self.stores = stores
        self.current: InputRecord | None = None
        self.time = time
        self.task = task
        self.counters: dict[str, int] = {}
        self.processing_listeners: list[tuple[int, Callable[[int], None]]] = []
        self.order = {name: i for i, name in enumerate(pipeline.steps)}  # topological position
        self.carried = frozenset(pipeline.repartition_topics())  # whose records carry their origin
        self.globals = globals  # the process's GlobalTables (framework.engine.globals), or None
        self.global_listeners: list[tuple[Any, Callable[[int], None]]] = []
        self.timers_in_memory: dict[tuple[str, str], TimerService] = {}  # (step, domain): not in its store
        self.calls = calls  # where async steps' calls run (framework.engine.calls), or None
        self.async_operators: list[Any] = []
        self.checkpoint_listeners: list[Callable[[], None]] = []
        self.start_listeners: list[Callable[[], None]] = []
        self.close_listeners: list[Callable[[], None]] = []

    def store(self, name: str) -> CachedPartition:
        return self.stores[name]

    def sender(self, topic: str) -> tuple[Callable[..., None], str]:
        """How a step sends its records to ``topic``: the output's call, and the topic name it
        passes. An output may route a topic (``route(topic)``: the call and name to use, or
        None): a replay task's outputs go straight to its producer, under their renamed
        topics, with no call of its own in between."""
        route = getattr(self.output, "route", None)
        routed = route(topic) if route is not None else None
        return routed if routed is not None else (self.output.produce, topic)

    def now_ms(self) -> int:
        return self.time.now_ms()

    def clock_for(self, step: str) -> Clock:
        """The clock (watermark) of ``step``: the minimum over the inputs that reach it."""
        return self.time.clock(self.pipeline.clock_inputs(step), step)

    def on_watermark(self, step: str, fn: Callable[[int], None]) -> None:
        """Call ``fn(watermark)`` whenever ``step``'s watermark advances."""
        self.clock_for(step).listeners.append((self.order[step], fn))

    def input_clock(self, step: str, parent: str) -> Clock:
        """The clock of the inputs reaching ``step``'s parent ``parent`` alone, saved in
        checkpoints as ``<step>/<parent>`` (a name no step can have)."""
        return self.time.clock(self.pipeline.clock_inputs(parent), f"{step}/{parent}")

    def on_input_watermark(self, step: str, parent: str, fn: Callable[[int], None]) -> None:
        """Call ``fn(watermark)`` whenever the watermark of ``input_clock(step, parent)``
        advances."""
        self.input_clock(step, parent).listeners.append((self.order[step], fn))

    def global_table(self, name: str) -> Any:
        return self.globals.tables[name]

    def on_global_watermark(self, table: str, step: str, fn: Callable[[int], None]) -> None:
        gt = self.globals.tables[table]
        gt.listeners.append(fn)
        self.global_listeners.append((gt, fn))

    def close(self) -> None:
        """The task stops: the process's global tables no longer call it, its async steps'
        calls are cancelled."""
        for gt, fn in self.global_listeners:
            gt.listeners.remove(fn)
        self.global_listeners.clear()
        for stop in self.close_listeners:
            stop()
        self.close_listeners.clear()

    # -- async steps (framework.operators.async_io) ------------------------------------------

    def on_checkpoint(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` at each checkpoint, before the stores' changes go to the changelogs."""
        self.checkpoint_listeners.append(fn)

    def on_start(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` once the task is built and its clock restored."""
        self.start_listeners.append(fn)

    def on_close(self, fn: Callable[[], None]) -> None:
        self.close_listeners.append(fn)

    def output_watermark(self, step: str) -> int:
        """The watermark that has left async step ``step`` (its clock input ``async:<step>``)."""
        return self.time.input(async_input(step)).watermark

    def advance_output(self, step: str, watermark: int) -> None:
        """Async step ``step`` lets ``watermark`` through to the steps after it."""
        inp = self.time.input(async_input(step))
        if watermark > inp.watermark:
            inp.watermark = watermark
            self.time.advanced(inp)

    def output_idle(self, step: str, idle: bool) -> None:
        """Async step ``step``'s output is idle (its inputs are, and nothing is in flight) or not."""
        inp = self.time.input(async_input(step))
        if inp.idle != idle:
            inp.idle = idle
            self.time.advanced(inp)

    def record_failed(self, msg: InputRecord, error: RecordError) -> None:
        """A record failed outside the record loop (an async call's result): as any record's
        failure (``Task.record_failed``). ``current`` is ``msg``."""
        self.task.record_failed(msg, error)

    def on_processing_time(self, step: str, fn: Callable[[int], None]) -> None:
        """Call ``fn(now_ms)`` on every wall-clock tick of the task."""
        self.processing_listeners.append((self.order[step], fn))
        self.processing_listeners.sort(key=lambda e: e[0])

    def memory_timers(self, step: str, domain: str, timers: TimerService) -> None:
        self.timers_in_memory[(step, domain)] = timers

    def count(self, metric: str, n: int = 1) -> None:
        self.counters[metric] = self.counters.get(metric, 0) + n

    def late_output(self, step: Any) -> Callable[[Any, Any, int], None]:
        """Where ``step``'s late records go: counted, and produced to its late topic if any."""
        metric, topic = f"late_records.{step.name}", getattr(step, "late", None)
        if topic is None:
            def drop(k: Any, v: Any, ts: int) -> None:
                self.count(metric)

            return drop
        ks, vs = topic.key_serde.bind(topic.name, True).serialize, topic.value_serde.bind(topic.name, False).serialize
        name = topic.name
        produce, written = self.sender(name)

        def send(k: Any, v: Any, ts: int) -> None:
            self.count(metric)
            try:
                kb, vb = None if k is None else ks(k), None if v is None else vs(v)
            except Exception as exc:
                raise SerializationError(f"cannot encode the late record for {name!r}: {type(exc).__name__}: {exc}",
                                         None, step.name, fix=f"give the late topic serdes that fit the step's "
                                         f"input: late=Topic({name!r}, key_serde=..., value_serde=...)") from exc
            try:
                produce(written, kb, vb, ts)
            except RecordError as exc:  # the producer refused it: this record's error
                raise exc.in_step(step.name)

        return send

    def timer_failed(self, step: str, ts: int, key: bytes, exc: BaseException) -> None:
        """User code raised while a timer fired: dead-letter it (or stop, with on_error=fail)."""
        self.task.timer_failed(step, ts, key, exc)

    def origin(self) -> bytes | None:
        """The input record the record in hand was made from, as ``topic[partition]@offset``:
        its own coordinates when it was read from a source topic, the origin it carries when
        read from a repartition topic (None when a timer fired, or the record carries none)."""
        msg = self.current
        if msg is None:
            return None
        topic = msg.topic()
        if topic in self.carried:
            return _carried_origin(msg)
        return f"{topic}[{msg.partition()}]@{msg.offset()}".encode()

    def coordinates(self) -> RecordCoordinates | None:
        msg = self.current
        if msg is None:
            return None
        origin = _carried_origin(msg) if msg.topic() in self.carried else None
        return RecordCoordinates(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.timestamp()[1],
                                 None if origin is None else origin.decode("utf-8", "replace"))


def _carried_origin(msg: InputRecord) -> bytes | None:
    """The ``fw.origin`` header of a repartition record (None when it carries none)."""
    for name, value in record_headers(msg) or ():
        if name == ORIGIN:
            return value
    return None
