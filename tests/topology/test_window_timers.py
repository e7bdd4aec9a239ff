"""A window step without allowed lateness keeps its timers in memory only: every window in
its store has not fired, so each window's timer (at its end − 1) follows from the window and
is registered again when a task starts. Nothing of them goes to the store or the changelog,
and a restored task fires every window once, as one that kept running does. Timers that an
earlier version stored beside the windows are taken over and deleted from the store."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from framework import (
    Pipeline,
    SessionWindows,
    TestDriver,
    Topic,
    TumblingWindows,
    WatermarkStrategy,
)
from framework.pipeline.steps import WindowStep
from framework.state.keys import state_prefix
from tests.present import present

SEC = 1000
TIMERS = state_prefix("__timers.event")


def pipeline(windows: Any, lateness_ms: int = 0) -> Pipeline:
    p = Pipeline("timers")
    s = p.source(Topic("in"), watermarks=WatermarkStrategy.bounded_out_of_orderness(0, timestamp="ts"))
    s.window(windows, allowed_lateness_ms=lateness_ms).count(name="w").to(Topic("out"))
    return p


def windows_of(d: TestDriver) -> list[tuple[Any, int, int, Any, int]]:
    return sorted((r.key, r.value["start"], r.value["end"], r.value["value"], r.timestamp) for r in d.output("out"))


def stored_timers(d: TestDriver) -> list[bytes]:
    return [k for p in range(d.partitions) for k in d.dump(p)["w"] if k.startswith(TIMERS)]


def timer_key(d: TestDriver, ts: int, key: str) -> bytes:
    """A timer entry as the store held it: ``__timers.event``, ts + 2^63, key bytes, namespace 0."""
    step = d.pipeline.steps["w"]
    assert isinstance(step, WindowStep)
    kb = step.key_serde.serialize(key)
    return TIMERS + struct.pack(">Q", ts + 2**63) + kb + b"\x00"


# (windows, records (key, ts) before a checkpoint, the timers then pending, the last record (it
# fires the first windows), and the results once the watermark passes them all)
CASES = {
    "tumbling": (TumblingWindows(10 * SEC), [("a", 1 * SEC), ("b", 2 * SEC), ("a", 3 * SEC)],
                 [(10 * SEC - 1, "a"), (10 * SEC - 1, "b")], ("a", 12 * SEC),
                 [("a", 0, 10 * SEC, 2, 10 * SEC - 1), ("a", 10 * SEC, 20 * SEC, 1, 20 * SEC - 1),
                  ("b", 0, 10 * SEC, 1, 10 * SEC - 1)]),
    "sessions": (SessionWindows(5 * SEC), [("a", 1 * SEC), ("b", 2 * SEC), ("a", 4 * SEC)],
                 [(7 * SEC - 1, "b"), (9 * SEC - 1, "a")], ("a", 20 * SEC),
                 [("a", 1 * SEC, 9 * SEC, 2, 9 * SEC - 1), ("a", 20 * SEC, 25 * SEC, 1, 25 * SEC - 1),
                  ("b", 2 * SEC, 7 * SEC, 1, 7 * SEC - 1)]),
}


def finish(d: TestDriver, last: tuple[str, int]) -> None:
    d.pipe("in", {"ts": last[1]}, key=last[0])
    d.checkpoint()
    d.advance_watermark(10**12)
    d.checkpoint()


@pytest.mark.parametrize("case", CASES)
def test_without_lateness_no_timer_is_stored_and_a_restored_task_fires_each_window_once(case: str) -> None:
    windows, records, pending, last, results = CASES[case]
    d = TestDriver(pipeline(windows), partitions=2, auto_checkpoint=False)
    for key, ts in records:
        d.pipe("in", {"ts": ts}, key=key)
    d.checkpoint()
    d.crash(lose_local_state=True)  # the stores come back from the changelogs alone
    # (a session's timer, before, may be at an earlier end of it: it re-arms when it finds it extended)
    assert stored_timers(d) == [] and d.timers("w") == pending
    finish(d, last)
    assert windows_of(d) == results
    assert d.timers("w") == [] and d.state_sizes()["w"] == 0
    # the changelogs never held a timer
    assert not any(present(m.key()).startswith(TIMERS) for p in d.topics.log("timers-w-changelog") for m in p)


@pytest.mark.parametrize("case", CASES)
def test_timers_an_earlier_version_stored_are_taken_over_and_deleted(case: str) -> None:
    windows, records, pending, last, results = CASES[case]
    d = TestDriver(pipeline(windows), auto_checkpoint=False)
    for key, ts in records:
        d.pipe("in", {"ts": ts}, key=key)
    # the store as the earlier version wrote it: a timer beside each window; for sessions also
    # one at a's first end (lazy: it re-arms at the session's end when it fires)
    older = [(ts, key) for ts, key in pending] + ([(6 * SEC - 1, "a")] if case == "sessions" else [])
    for ts, key in older:
        d.tasks[0].stores["w"].put(timer_key(d, ts, key), 1)
    d.checkpoint()
    d.restart()
    assert d.timers("w") == sorted(older)
    d.checkpoint()  # they leave the store and the changelog
    assert stored_timers(d) == []
    latest = {m.key(): m.value() for m in d.topics.log("timers-w-changelog")[0]}
    assert all(latest[timer_key(d, ts, key)] is None for ts, key in older)
    finish(d, last)
    assert windows_of(d) == results


def test_with_allowed_lateness_the_timers_stay_in_the_store() -> None:
    """A window that fired stays until its cleanup time: the store's timers say which fired."""
    d = TestDriver(pipeline(TumblingWindows(10 * SEC), lateness_ms=5 * SEC), auto_checkpoint=False)
    d.pipe("in", {"ts": 1 * SEC}, key="a")
    d.checkpoint()
    assert sorted(stored_timers(d)) == sorted([timer_key(d, 10 * SEC - 1, "a"),
                                               timer_key(d, 15 * SEC - 1, "a")[:-1] + b"\x01"])
