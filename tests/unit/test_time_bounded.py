"""The runner's work is bounded by time, not by the batch: once a checkpoint is due it holds
what is left of a batch, commits a held partition at its first held record, and processes
the held records first, in order, on the next call."""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

import pytest

import framework.engine.runner as runner_module
from framework import Pipeline, StringSerde, Topic
from framework.engine.record import Record
from framework.engine.runner import TaskRunner
from framework.serde import JsonSerde
from framework.state.memory import MemoryBackend


class Clock:
    """The runner's monotonic clock, moved by the step itself, and its alarm (``_Alarm``): due
    once the clock passes the deadline set last."""

    def __init__(self) -> None:
        self.now = 0.0
        self.until = float("inf")
        self.due = [False]

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.due[0] = self.now >= self.until

    def set(self, until: float) -> None:
        self.until = until
        self.due[0] = self.now >= until

    def close(self) -> None:
        pass


class Sent:
    def __init__(self) -> None:
        self.records: list[tuple[str, bytes | None, bytes | None]] = []

    def produce(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int, headers: Any = None,
                partition: int | None = None) -> None:
        self.records.append((topic, key, value))

    def produce_changelog(self, topic: str, partition: int, key: bytes, value: bytes | None, headers: Any) -> None:
        pass


class Commit:
    def __init__(self) -> None:
        self.positions: dict[tuple[str, int], int] = {}

    def commit(self, positions: Mapping[tuple[str, int], int]) -> Mapping[tuple[str, int], int]:
        self.positions = dict(positions)
        return {}


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(runner_module, "time", types.SimpleNamespace(monotonic=fake.monotonic))
    return fake


def slow_runner(clock: Clock, seconds_per_record: float) -> tuple[TaskRunner, Sent]:
    p = Pipeline("slow", partitions=2)

    def check(v: dict[str, Any]) -> dict[str, Any]:
        clock.advance(seconds_per_record)  # the step's work: what the clock shows after it
        return {**v, "checked": True}

    p.source(Topic("in", key_serde=StringSerde(), value_serde=JsonSerde())).map(check, name="check").to(
        Topic("out", key_serde=StringSerde(), value_serde=JsonSerde()))
    sent = Sent()
    runner = TaskRunner(p, MemoryBackend(), sent, partitions=2)
    runner._alarm = clock  # type: ignore[assignment]  # the deadline by this clock, not by the thread
    runner.start(0)
    runner.start(1)
    return runner, sent


def records(partition: int, offsets: range) -> list[Record]:
    return [Record("in", partition, o, b"k", b'{"n": %d}' % o, 1000 + o) for o in offsets]


def outputs(sent: Sent) -> list[int]:
    import json
    return [json.loads(v)["n"] for _t, _k, v in sent.records if v is not None]


def test_a_due_checkpoint_cuts_the_batch_and_holds_the_rest_in_order(clock: Clock) -> None:
    runner, sent = slow_runner(clock, 0.04)
    batch = records(0, range(10))
    assert runner.process(batch, until=0.1) == 3  # 0.04, 0.08, then 0.12 is past the deadline
    assert outputs(sent) == [0, 1, 2]
    assert runner.held_records == 7

    commit = Commit()
    runner.checkpoint({("in", 0): 10}, commit)  # the consumer is past all ten
    assert commit.positions == {("in", 0): 3}  # committed at the first held record

    assert runner.process(records(0, range(10, 12)), until=float("inf")) == 9
    assert outputs(sent) == list(range(12))  # the held ones first, then the new ones, in order
    assert runner.held_records == 0
    runner.checkpoint({("in", 0): 12}, commit)
    assert commit.positions == {("in", 0): 12}


class Uncomparable(Record):
    """A record as confluent-kafka's Message is to ``==``: comparing one decodes its headers,
    and a header name that is not UTF-8 leaves an error pending for later."""

    def __eq__(self, other: object) -> bool:
        raise AssertionError("a record was compared with ==")

    __hash__ = Record.__hash__


def test_the_cut_finds_its_place_without_comparing_records(clock: Clock) -> None:
    runner, sent = slow_runner(clock, 0.04)
    batch = [Uncomparable(r.topic(), r.partition(), r.offset(), r.key(), r.value(), r.timestamp()[1])
             for r in records(0, range(10))]
    assert runner.process(batch, until=0.1) == 3
    assert outputs(sent) == [0, 1, 2]
    assert [m.offset() for m in runner.held[("in", 0)]] == list(range(3, 10))


def test_new_records_of_a_partition_still_holding_wait_behind_its_held_ones(clock: Clock) -> None:
    runner, sent = slow_runner(clock, 1.0)
    runner.process(records(0, range(4)), until=0.5)
    assert outputs(sent) == [0]
    # the deadline passed again during the first held record: p0's new records join the held ones,
    # p1's are held after them too (nothing more is processed after a deadline)
    runner.process(records(0, range(4, 6)) + records(1, range(2)), until=1.5)
    assert outputs(sent) == [0, 1]
    assert {tp: [m.offset() for m in msgs] for tp, msgs in runner.held.items()} == {
        ("in", 0): [2, 3, 4, 5], ("in", 1): [0, 1]}
    runner.process([], until=float("inf"))
    assert outputs(sent) == [0, 1, 2, 3, 4, 5, 0, 1]


def test_the_records_of_a_partition_without_a_task_are_fetched_again_from_their_first(clock: Clock) -> None:
    runner, _sent = slow_runner(clock, 0.0)
    runner.stop(1)
    again: list[int] = []
    runner.process(records(1, range(5)), lambda m: again.append(m.offset()))
    assert again == [0]  # one seek to the first: the later ones come with it


def test_an_abort_or_a_revoke_forgets_the_held_records(clock: Clock) -> None:
    runner, _sent = slow_runner(clock, 1.0)
    runner.process(records(0, range(3)) + records(1, range(3)), until=0.5)
    assert runner.held_records == 5
    runner.stop(1)  # revoked: its next owner reads them from the committed position
    assert set(runner.held) == {("in", 0)}
    runner.abort()  # the engine rewinds every input to the committed positions
    assert runner.held_records == 0


def test_without_a_deadline_a_batch_runs_whole(clock: Clock) -> None:
    runner, sent = slow_runner(clock, 10.0)
    assert runner.process(records(0, range(5))) == 5
    assert outputs(sent) == [0, 1, 2, 3, 4] and not runner.held


def test_the_watchdog_names_the_step_the_record_and_the_time(caplog: pytest.LogCaptureFixture) -> None:
    """A record in a step past the threshold: one WARNING with the step (from a sample of the
    loop's stack), the record's coordinates and the time; past the transaction timeout the line
    that ends the member; what /health names as holding the loop."""
    import threading

    from framework.runtime.slow import SlowRecords

    started, release = threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def lookup(v: dict[str, Any]) -> dict[str, Any]:
        started.set()
        release.wait(30)  # held until the watchdog has looked
        return v

    p = Pipeline("slow")
    p.source(Topic("in", key_serde=StringSerde(), value_serde=JsonSerde())).map(lookup, name="lookup").to(
        Topic("out", key_serde=StringSerde(), value_serde=JsonSerde()))
    runner = TaskRunner(p, MemoryBackend(), Sent(), partitions=1)
    runner.start(0)
    began = [0.0]  # the open transaction began with the record
    slow = SlowRecords(p, runner, warn_after_s=5.0, transaction_timeout_s=60.0, transaction_began=lambda: began[0])

    def watch() -> None:
        started.wait(30)
        since = began[0] = 1000.0
        slow.check(since)  # the first look that finds the record in hand
        slow.check(since + 4.0)  # below the threshold: nothing yet
        seen["quiet"] = slow.warnings
        seen["holding"] = slow.holding(since + 4.0)
        slow.check(since + 6.0)
        slow.check(since + 7.0)  # the same record: warned once
        seen["warnings"] = slow.warnings
        slow.check(since + 61.0)
        seen["overdue"] = slow.overdue
        release.set()

    watcher = threading.Thread(target=watch)
    watcher.start()
    with caplog.at_level("WARNING", logger="framework.runtime"):
        runner.process([Record("in", 0, 42, b"k", b'{"n": 1}', 1000)])
    watcher.join(30)
    assert seen["quiet"] == 0
    assert seen["holding"] == "record in[0]@42 in step 'lookup' for 4.0 s"
    assert seen["warnings"] == 1
    [line] = [r.getMessage() for r in caplog.records if "has been in step" in r.getMessage()]
    assert "record in[0]@42 has been in step 'lookup' for 6.0 s" in line
    assert "test_time_bounded.py" in line and "in lookup" in line  # where in the step's code
    assert "processing.slow_record_warning_ms (5000)" in line
    assert seen["overdue"] is not None and "step 'lookup'" in seen["overdue"]
    assert "kafka.transaction_timeout_ms (60000)" in seen["overdue"]


def test_the_alarm_is_due_once_its_deadline_passes() -> None:
    import time

    from framework.engine.runner import _Alarm

    alarm = _Alarm()
    try:
        alarm.set(time.monotonic() + 0.05)
        assert not alarm.due[0]
        deadline = time.monotonic() + 10
        while not alarm.due[0]:  # the alarm's own thread makes it due
            assert time.monotonic() < deadline, "the alarm never fired"
            time.sleep(0.01)
        alarm.set(time.monotonic() + 3600)  # a new deadline: not due
        assert not alarm.due[0]
        alarm.set(time.monotonic() - 1)  # one that has passed: due at once
        assert alarm.due[0]
    finally:
        alarm.close()
