"""Watermarks through the TestDriver (P7, P8, P9, P11, P12, P13).

A probe process function reports, for every record it sees, the watermark of its step and
its task. Outputs keyed by the task number keep each task's emission order in the output
topic, so the committed sequence of watermarks per task can be checked.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter, defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework import (
    NO_WATERMARK,
    CoProcessFunction,
    IntSerde,
    JsonSerde,
    Pipeline,
    ProcessFunction,
    TestDriver,
    Topic,
    TumblingWindows,
    WatermarkStrategy,
)

MIN = 60_000


class WatermarkProbe(ProcessFunction):
    """Emits ``{id, ts, wm}`` keyed by the task: each task's records stay in emission order."""

    def process(self, key: Any, value: Any, ctx: Any) -> None:
        ctx.emit({"id": value["id"], "ts": ctx.timestamp, "wm": ctx.watermark}, key=ctx.partition)


class Forward(CoProcessFunction):
    def process1(self, key: Any, value: Any, ctx: Any) -> None:
        ctx.emit(value)

    def process2(self, key: Any, value: Any, ctx: Any) -> None:
        ctx.emit(value)


def bounded(bound_ms: int, idle_timeout_ms: int | None = None) -> WatermarkStrategy:
    return WatermarkStrategy.bounded_out_of_orderness(bound_ms, timestamp="ts", idle_timeout_ms=idle_timeout_ms)


def by_task(d: TestDriver, topic: str) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in d.output(topic, key_serde=JsonSerde()):
        out[r.key].append(r.value)
    return dict(out)


def probe_topic(name: str) -> Topic:
    return Topic(name, key_serde=JsonSerde())


def non_decreasing(xs: list[int]) -> bool:
    return all(a <= b for a, b in itertools.pairwise(xs))


# --- P7: never decreasing ------------------------------------------------------------------------


def probed_pipeline(bound_ms: int) -> Pipeline:
    p = Pipeline("wm")
    s = p.source(Topic("in"), watermarks=bounded(bound_ms))
    s.process(WatermarkProbe(), name="at-source").to(probe_topic("source-wm"))
    rekeyed = s.key_by(lambda v: v["k"], name="rekey")
    rekeyed.process(WatermarkProbe(), name="after-rekey").to(probe_topic("rekey-wm"))
    rekeyed.window(TumblingWindows(100)).count(name="win").to(Topic("counts", key_serde=JsonSerde()))
    return p


@settings(deadline=None, max_examples=30)
@given(rows=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2000), st.integers(0, 3)), min_size=1,
                     max_size=60),
       bound=st.integers(0, 300), partitions=st.sampled_from([1, 2, 4]))
def test_watermarks_never_decrease_per_partition_and_per_task_even_across_crashes(
        rows: list[tuple[int, int, int]], bound: int, partitions: int) -> None:
    """Arbitrary disorder (late records included), checkpoints and crashes: every task's
    committed sequence of watermarks, at the source and behind the repartition, is monotone,
    and so is every live watermark between two crashes."""
    d = TestDriver(probed_pipeline(bound), partitions=partitions, auto_checkpoint=False)
    live: dict[tuple[str, int], int] = {}
    for i, (k, ts, action) in enumerate(rows):
        d.pipe("in", {"id": i, "k": k, "ts": ts}, key=str(k), partition=i % partitions)
        if action == 1:
            d.checkpoint()
        elif action == 2:
            d.crash()
            live = {}  # the tasks went back to the last checkpoint, with their clocks
        for step in ("at-source", "after-rekey"):
            for p in range(partitions):
                w = d.watermark(step, partition=p)
                assert w >= live.get((step, p), NO_WATERMARK)
                live[(step, p)] = w
    d.checkpoint()
    d.run()
    d.checkpoint()
    for topic in ("source-wm", "rekey-wm"):
        for task, seq in by_task(d, topic).items():
            assert non_decreasing([e["wm"] for e in seq]), (topic, task, seq)


# --- P8: the minimum over the inputs -------------------------------------------------------------


def two_input_pipeline(kind: str) -> Pipeline:
    p = Pipeline("two")
    a = p.source(Topic("a"), watermarks=bounded(0))
    b = p.source(Topic("b"), watermarks=bounded(0))
    if kind == "union":
        both = a.union(b, name="both")
    elif kind == "connect":
        both = a.connect(b).process(Forward(), name="both")
    elif kind == "interval_join":
        both = a.interval_join(b, -10, 10, lambda x, y: {"ts": max(x["ts"], y["ts"])}, name="both")
    else:
        both = a.window_join(b, TumblingWindows(100), lambda x, y: {"ts": max(x["ts"], y["ts"])}, name="both")
    both.window(TumblingWindows(100)).count(name="win").to(Topic("out"))
    return p


@pytest.mark.parametrize("kind", ["union", "connect", "interval_join", "window_join"])
def test_a_two_input_step_runs_on_the_minimum_of_its_inputs(kind: str) -> None:
    d = TestDriver(two_input_pipeline(kind))
    d.advance_watermark(1000, topic="a")
    assert d.watermark("both") == d.watermark("win") == NO_WATERMARK  # one input alone moves nothing
    d.pipe("a", {"ts": 5000}, key="x")
    assert d.watermark("both") == NO_WATERMARK
    d.advance_watermark(300, topic="b")
    assert d.watermark("both") == d.watermark("win") == 300
    d.advance_watermark(200, topic="b")  # a stale lower watermark changes nothing
    d.pipe("b", {"ts": 100}, key="x")
    assert d.watermark("both") == 300
    d.advance_watermark(700, topic="b")
    assert d.watermark("both") == 700
    d.advance_watermark(9000, topic="b")
    assert d.watermark("both") == 4999  # now a's is the minimum
    d.advance_watermark(20_000)
    assert d.watermark("both") == 20_000


def test_a_union_fires_windows_only_when_both_sources_passed_them() -> None:
    d = TestDriver(two_input_pipeline("union"))
    for ts in [10, 20, 150, 260]:
        d.pipe("a", {"ts": ts}, key="x")
    assert d.output("out") == []  # a is at 259, b has no watermark yet
    d.pipe("b", {"ts": 120}, key="x")
    assert [r.value for r in d.output("out")] == [{"start": 0, "end": 100, "value": 2}]
    d.pipe("b", {"ts": 400}, key="x")
    assert [r.value["value"] for r in d.output("out")] == [2, 2]  # [100, 200): 150 and 120


# --- idleness ------------------------------------------------------------------------------------


def _idle_union() -> Pipeline:
    """Two sources with a 1 s idle timeout, unioned into 1 s tumbling counts (step ``win``)."""
    p = Pipeline("idle")
    a = p.source(Topic("a"), watermarks=bounded(0, idle_timeout_ms=1000))
    b = p.source(Topic("b"), watermarks=bounded(0, idle_timeout_ms=1000))
    a.union(b, name="both").window(TumblingWindows(1000)).count(name="win").to(Topic("out"))
    return p


def test_an_idle_source_leaves_the_minimum_and_rejoins_when_data_arrives() -> None:
    d = TestDriver(_idle_union())
    d.pipe("a", {"ts": 10_000}, key="x")
    d.advance_wall_clock(999)
    assert d.watermark("win") == NO_WATERMARK and d.output("out") == []  # b: silent, not yet idle
    d.pipe("a", {"ts": 10_500}, key="x")
    d.advance_wall_clock(1)  # b has been silent for 1000 ms; a had data in the meantime
    assert d.watermark("win") == 10_499 and d.output("out") == []
    d.pipe("a", {"ts": 11_000}, key="x")
    assert [r.value for r in d.output("out")] == [{"start": 10_000, "end": 11_000, "value": 2}]
    d.pipe("b", {"ts": 12_000}, key="x")  # b rejoins at 11_999
    d.pipe("a", {"ts": 30_000}, key="x")
    assert d.watermark("win") == 11_999
    d.pipe("b", {"ts": 13_000}, key="x")
    assert d.watermark("win") == 12_999
    d.pipe("b", {"ts": 5_000}, key="x")  # behind the clock: late, and the clock stays
    assert d.watermark("win") == 12_999
    assert d.metrics()["late_records.win"] == 1


def test_a_partition_silent_for_the_idle_timeout_is_idle_after_one_advance_of_the_wall_clock() -> None:
    """Records piped before ``advance_wall_clock(timeout)`` arrived at the old wall time: after
    the advance their partitions have been silent for the whole timeout."""
    d = TestDriver(_idle_union())
    d.pipe("a", {"ts": 10_000}, key="x")
    d.pipe("b", {"ts": 5_000}, key="x")
    assert d.watermark("win") == 4_999
    d.advance_wall_clock(1000)  # both idle: the clock keeps its watermark
    assert d.watermark("win") == 4_999
    d.pipe("a", {"ts": 20_000}, key="x")  # a is back, b still idle: a alone sets the clock
    assert d.watermark("win") == 19_999
    assert [r.value["start"] for r in d.output("out")] == [5_000, 10_000]


def test_idleness_is_checkpointed_so_a_crash_replays_the_same_firings() -> None:
    """A run with a crash gives the outputs of the run without it (DESIGN 5): the replayed
    records of the active source fire the same windows, because the restored clock still
    knows that the other source was idle at the checkpoint."""
    def run(crash: bool) -> list[Any]:
        p = Pipeline("idle")
        a = p.source(Topic("a"), watermarks=bounded(0, idle_timeout_ms=1000))
        b = p.source(Topic("b"), watermarks=bounded(0, idle_timeout_ms=1000))
        a.union(b, name="both").window(TumblingWindows(1000)).count(name="win").to(Topic("out"))
        d = TestDriver(p, auto_checkpoint=False)
        d.pipe("b", {"ts": 500}, key="x")
        d.pipe("a", {"ts": 1_000}, key="x")
        d.advance_wall_clock(1000)  # both idle
        d.checkpoint()
        for ts in [2_000, 3_000, 4_000]:
            d.pipe("a", {"ts": ts}, key="x")  # a active again, b still idle: windows fire
        if crash:
            d.crash()
        d.checkpoint()
        return [r.value for r in d.output("out")]

    assert run(crash=False) == [{"start": t, "end": t + 1000, "value": 1} for t in (0, 1000, 2000, 3000)]
    assert run(crash=True) == run(crash=False)


def test_an_idle_upstream_task_leaves_the_minimum_behind_a_repartition() -> None:
    p = Pipeline("idle")
    s = p.source(Topic("in"), watermarks=bounded(0, idle_timeout_ms=1000))
    s.key_by(lambda v: v["k"], name="rekey").window(TumblingWindows(1000)).count(name="win").to(
        Topic("out", key_serde=JsonSerde()))
    d = TestDriver(p, partitions=2)
    for ts in [100, 200, 1500]:
        d.pipe("in", {"k": 1, "ts": ts}, partition=0)
    assert d.output("out") == []  # task 1 has not said anything yet
    d.advance_wall_clock(500)
    d.pipe("in", {"k": 1, "ts": 1900}, partition=0)
    d.advance_wall_clock(500)  # partition 1 silent for 1000 ms: idle; partition 0 was active
    assert [(r.key, r.value) for r in d.output("out")] == [(1, {"start": 0, "end": 1000, "value": 2})]
    assert d.watermark("win", partition=0) == d.watermark("win", partition=1) == 1899
    d.pipe("in", {"k": 1, "ts": 1800}, partition=1)  # rejoins at 1799, behind: the minimum stays
    assert d.watermark("win", partition=0) == 1899
    d.pipe("in", {"k": 1, "ts": 5000}, partition=0)
    assert d.watermark("win", partition=0) == 1899  # held back by partition 1 again
    d.pipe("in", {"k": 1, "ts": 4000}, partition=1)
    assert d.watermark("win", partition=0) == d.watermark("win", partition=1) == 3999
    assert [r.value["value"] for r in d.output("out")] == [2, 3]  # [1000, 2000): 1500, 1900, 1800
    assert d.metrics().get("late_records.win", 0) == 0


# --- P11: the bound ------------------------------------------------------------------------------


@settings(deadline=None, max_examples=40)
@given(rows=st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 3)), min_size=1, max_size=80),
       bound=st.integers(0, 500), partitions=st.sampled_from([1, 2, 3]))
def test_a_record_is_late_exactly_when_delayed_by_more_than_the_bound(
        rows: list[tuple[int, int]], bound: int, partitions: int) -> None:
    """Per partition, delay = the largest timestamp before the record minus its own; the
    watermark never exceeds max - B - 1, and a record is behind it iff its delay is > B."""
    p = Pipeline("bound")
    s = p.source(Topic("in"), watermarks=bounded(bound))
    s.process(WatermarkProbe(), name="probe").to(probe_topic("seen"))
    s.window(TumblingWindows(1)).count(name="win").to(Topic("out"))  # 1 ms windows: late iff ts <= wm
    d = TestDriver(p, partitions=partitions)
    highest: dict[int, int] = {}
    expected_late = 0
    for i, (ts, part) in enumerate(rows):
        part %= partitions
        late = part in highest and highest[part] - ts > bound
        expected_late += late
        d.pipe("in", {"id": i, "ts": ts}, key="k", partition=part)
        highest[part] = max(highest.get(part, ts), ts)
        assert d.watermark("probe", partition=part) == highest[part] - bound - 1
    seen = {e["id"]: e for seq in by_task(d, "seen").values() for e in seq}
    for i, (ts, part) in enumerate(rows):
        assert seen[i]["ts"] == ts
    assert sum(e["ts"] <= e["wm"] for e in seen.values()) == expected_late
    assert d.metrics().get("late_records.win", 0) == expected_late


# --- P12, P13: propagation across a repartition --------------------------------------------------


def test_a_slow_upstream_task_holds_the_downstream_watermark_and_nothing_becomes_late() -> None:
    """Partition 0 runs far ahead of partition 1. Downstream of the repartition, every task's
    watermark is the minimum of the two upstream ones, the fast side's records wait in the
    window state (buffering, not loss), no record is late, and every window is right."""
    p = Pipeline("drift")
    s = p.source(Topic("in"), watermarks=bounded(50))
    rekeyed = s.key_by(lambda v: v["k"], name="rekey")
    rekeyed.process(WatermarkProbe(), name="probe").to(probe_topic("seen"))
    rekeyed.window(TumblingWindows(1000)).count(name="win").to(Topic("out", key_serde=IntSerde()))
    d = TestDriver(p, partitions=2)
    rng = random.Random(7)
    fast = sorted(rng.randrange(0, 60_000) for _ in range(300))
    slow = sorted(rng.randrange(0, 60_000) for _ in range(300))
    records = [(0, ts, rng.randrange(6)) for ts in fast[:250]] + [(1, ts, rng.randrange(6)) for ts in slow]
    records += [(0, ts, rng.randrange(6)) for ts in fast[250:]]
    for i, (part, ts, k) in enumerate(records):
        d.pipe("in", {"id": i, "k": k, "ts": ts}, partition=part)
        upstream = min(d.watermark("rekey", partition=0), d.watermark("rekey", partition=1))
        for task in (0, 1):
            assert d.watermark("win", partition=task) == d.watermark("probe", partition=task) == upstream
        if i == 249:  # the fast side is 250 records ahead, the slow one silent
            assert d.output("out") == []
            assert d.state_sizes()["win"] > 0
    d.advance_watermark(10**9)
    seen = [e for seq in by_task(d, "seen").values() for e in seq]
    assert len(seen) == len(records) and all(e["ts"] > e["wm"] for e in seen)
    assert d.metrics().get("late_records.win", 0) == 0
    expected = Counter((k, ts // 1000 * 1000) for _, ts, k in records)
    assert Counter({(r.key, r.value["start"]): r.value["value"] for r in d.output("out")}) == expected
