"""The part of the replay contract the data decides (``framework.replay.order``): which steps
are checked, and the check itself through the in-process replay (``run_locally``): a key
whose records reach an order-sensitive step from several upstream partitions refuses the
replay, before any writer is made, with one line naming the step, the keys and the flag."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pytest

from framework import TumblingWindows, WatermarkStrategy
from framework.engine.partitioner import partition_for
from framework.engine.record import Record
from framework.errors import PipelineError
from framework.pipeline import Pipeline, Topic
from framework.replay.order import mixed_keys, order_checks, printable, refusal
from framework.replay.plan import ReplayPlan, stage_topics
from framework.replay.stage import run_locally
from framework.serde import AvroSerde, StringSerde, load_schema
from services.even_odd.pipeline import build_pipeline as even_odd


def test_order_sensitive_steps_after_a_repartition_or_over_several_sources_are_checked() -> None:
    p = Pipeline("c")
    src = p.source(Topic("in"), name="in")
    other = p.source(Topic("in2"), name="in2")
    src.count(name="per-key")                                                      # one partition feeds each key
    src.key_by(lambda v: v["g"], name="by-g").count(name="rolling")
    src.key_by(lambda v: v["g"], name="by-g2").window(TumblingWindows(1_000)).count(name="windowed")
    src.union(other, name="both").count(name="over-two")
    checks = {c.step: (c.what, c.stage, c.topics) for c in order_checks(p)}
    assert checks == {"rolling": ("a rolling aggregate", 1, [p.repartition_topic("by-g")]),
                      "over-two": ("a rolling aggregate", 0, ["in", "in2"])}


def test_a_join_with_a_tables_latest_value_is_checked_and_one_by_event_time_is_not() -> None:
    """A join by event time waits for watermarks, so the two topics' interleaving does not
    change it; one with the latest value takes whatever the table held when the record came.
    Two tables' join is the same whatever the order of their updates."""
    wm = WatermarkStrategy.bounded_out_of_orderness(0)
    p = Pipeline("j")
    latest = p.table(Topic("customers"), name="customers")
    p.source(Topic("orders"), name="orders").join(latest, lambda o, c: o, name="now")
    timed = p.table(Topic("accounts"), watermarks=wm, name="accounts")
    p.source(Topic("payments"), watermarks=wm, name="payments").join(timed, lambda o, c: o, name="as-of")
    both = timed.join(latest, lambda a, c: a, name="both")  # the joined table's versions do not depend on order
    p.source(Topic("refunds"), name="refunds").join(both, lambda r, b: r, name="via-both")
    checks = {c.step: (c.what, c.topics) for c in order_checks(p)}
    assert checks == {"now": ("a join with a table's latest value", ["customers", "orders"]),
                      "via-both": ("a join with a table's latest value", ["accounts", "customers", "refunds"])}
    both.to_stream().to(Topic("changes"))  # its corrections do
    found = {c.step: c for c in order_checks(p)}
    assert found["both"].what == "a table"
    # and keying its inputs cannot help: the refusal says what can
    assert "Fix: join streams with the joined table instead of reading its changes (to_stream)" in str(
        refusal(found["both"], [(b"ann", ["accounts[0]", "customers[1]"])]))
    assert "Fix: key the input by the step's key" in str(refusal(found["now"], [(b"ann", ["orders[0]", "orders[1]"])]))


def test_keys_are_shown_as_text_when_they_are_text() -> None:
    assert printable(b'"ann"') == '"ann"'
    assert printable(b"ann") == "ann"
    assert printable(b"\x00\x01") == r"b'\x00\x01'"
    assert printable(b"\xff") == r"b'\xff'"


def test_a_key_from_one_partition_of_each_of_two_topics_is_mixed() -> None:
    arrivals = [(0, b"k", "a", 0), (0, b"k", "b", 0), (1, b"j", "a", 1), (1, b"j", "a", 1), (1, None, "b", 1)]
    assert mixed_keys(arrivals, {}) == [(b"k", ["a[0]", "b[0]"])]


def _numbers(placed: list[tuple[str, int, int]], partitions: int
             ) -> tuple[Pipeline, ReplayPlan, dict[tuple[str, int], list[Record]]]:
    """even_odd over ``(key, n, partition)`` records (partition -1: the key's own)."""
    p = even_odd("-o")
    serde, keys = AvroSerde(load_schema("demo.Number")).bind("numbers-o", False), StringSerde().bind("numbers-o", True)
    sources: dict[tuple[str, int], list[Record]] = {}
    for i, (k, n, part) in enumerate(placed):
        kb = keys.serialize(k)
        part = partition_for(kb, partitions) if part < 0 else part
        mine = sources.setdefault(("numbers-o", part), [])
        mine.append(Record("numbers-o", part, len(mine), kb, serde.serialize({"n": n}), 1_000 + i))
    plan = ReplayPlan(target="", service=p.name, run_id="u", bootstrap_servers="", partitions=partitions,
                      ranges={"numbers-o": {q: [0, len(sources.get(("numbers-o", q), []))] for q in range(partitions)}},
                      stages=stage_topics(p), output="topic",
                      order_checks=[asdict(c) for c in order_checks(p)])
    return p, plan, sources


def test_a_parity_fed_from_two_partitions_is_refused_before_any_writer_is_made() -> None:
    p, plan, sources = _numbers([("a", 2, 0), ("b", 4, 1), ("c", 3, 0), ("d", 5, 1), ("e", 7, 0)], partitions=2)
    writers: list[tuple[int, int]] = []

    def writer_for(stage: int, pid: int) -> Any:
        writers.append((stage, pid))
        return None

    with pytest.raises(PipelineError) as refused:
        run_locally(p, plan, sources, writer_for=writer_for)
    assert str(refused.value) == (
        "step 'sums' (a rolling aggregate) receives records of one key from several upstream partitions "
        "(key \"even\" from numbers-o[0], numbers-o[1]; key \"odd\" from numbers-o[0], numbers-o[1]): live processing "
        "interleaves them by timing, so a replay cannot reproduce its intermediate outputs. Fix: key the input by "
        "the step's key before it is written, or pass --allow-nondeterministic to replay it anyway "
        "(what it reproduces: docs/replay.md)")
    assert writers == []


def test_the_same_numbers_keyed_upstream_are_replayed_and_without_the_checks_the_mixed_ones_too() -> None:
    placed = [("a", 2, 0), ("b", 4, 0), ("c", 3, 1), ("d", 5, 1), ("e", 7, 1)]  # evens in 0, odds in 1
    p, plan, sources = _numbers(placed, partitions=2)
    out = run_locally(p, plan, sources)["out"]
    sums: dict[bytes | None, list[bytes | None]] = {}
    for r in out:
        if r.topic == "even-odd-sums-o":
            sums.setdefault(r.key, []).append(r.value)
    assert sums == {b"even": [b"2", b"6"], b"odd": [b"3", b"8", b"15"]}  # each parity's records in their order
    p, plan, sources = _numbers([("a", 2, 0), ("b", 4, 1)], partitions=2)
    plan.order_checks = []  # --allow-nondeterministic
    assert len([r for r in run_locally(p, plan, sources)["out"] if r.topic == "even-odd-sums-o"]) == 2


def test_the_check_alone_runs_the_stages_before_the_checked_step_and_writes_nothing() -> None:
    """``check_only`` (the driver's check of a small range): the same refusal, no writer made,
    and when every key comes from one upstream partition, nothing but stage 0 run (no outputs
    of the checked step's stage: the replay proper makes those)."""
    p, plan, sources = _numbers([("a", 2, 0), ("b", 4, 1), ("c", 3, 0)], partitions=2)
    writers: list[tuple[int, int]] = []

    def writer_for(stage: int, pid: int) -> Any:
        writers.append((stage, pid))
        return None

    with pytest.raises(PipelineError, match="key \"even\" from numbers-o\\[0\\], numbers-o\\[1\\]"):
        run_locally(p, plan, sources, writer_for=writer_for, check_only=True)
    assert writers == []
    p, plan, sources = _numbers([("a", 2, 0), ("b", 4, 0), ("c", 3, 1)], partitions=2)  # evens in 0, odds in 1
    checked = run_locally(p, plan, sources, writer_for=writer_for, check_only=True)
    assert writers == [] and checked["out"] == []
    assert len(checked["stats"]) == 2 < len(run_locally(p, plan, sources)["stats"])  # stage 0's two tasks alone


def test_the_check_alone_says_no_dead_letter_the_replay_proper_says_it_once(caplog: pytest.LogCaptureFixture) -> None:
    """A poison record goes through the check's pass and the replay's: its ``dead letter:``
    line comes from the replay's alone."""
    p, plan, sources = _numbers([("a", 2, 0), ("b", 4, 0), ("c", 3, 1)], partitions=2)
    bad = sources[("numbers-o", 0)][1]
    sources[("numbers-o", 0)][1] = Record(bad.topic(), bad.partition(), bad.offset(), bad.key(), b"not a number",
                                          bad.timestamp()[1], bad.headers())
    with caplog.at_level("ERROR", logger="framework.task"):
        run_locally(p, plan, sources, check_only=True)
        assert [r for r in caplog.records if r.getMessage().startswith("dead letter:")] == []
        run_locally(p, plan, sources, writer_for=lambda stage, pid: None)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("dead letter:")]
    assert len(lines) == 1 and "numbers-o[0]@1" in lines[0], lines
