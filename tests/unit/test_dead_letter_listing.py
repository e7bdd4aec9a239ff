"""``fw dead-letters``: grouping, filters and the re-drive plan's decisions, without a broker."""

from __future__ import annotations

import pytest

from framework import Pipeline, Topic
from framework.errors import ConfigError
from framework.kafka.inspect import ReadRecord
from framework.ops.deadletters import (
    Letter,
    check_step,
    group_letters,
    letter_of,
    plan_redrive,
    since_ms,
)
from framework.serde.values import ValueCodec

DLQ = "svc-dead-letter"


def _letter(offset: int, ts: int, step: str, message: str, *, kind: str = "ValueError", source: str = "orders",
            given: bytes | None = None, again: str | None = None) -> Letter:
    headers: list[tuple[str, bytes | None]] = [("trace", b"t")]
    if again is not None:
        headers.append(("fw.redrive.of", again.encode()))
    headers += [("fw.source.topic", source.encode()), ("fw.source.partition", b"0"),
                ("fw.source.offset", str(offset).encode()), ("fw.step", step.encode()),
                ("fw.error.type", kind.encode()),
                ("fw.error.message", f"{source}[0]@{offset} in step {step!r}: {kind}: {message} Fix: x".encode()),
                ("fw.value.encoding", b"original")]
    if given is not None:
        headers.append(("fw.step.input", given))
    letter = letter_of(ReadRecord(DLQ, 0, offset, ts, b"k", b"{}", headers))
    assert letter is not None
    return letter


def _pipeline() -> Pipeline:
    p = Pipeline("svc")
    p.source(Topic("orders"), name="orders").map(lambda v: v, name="check").count(name="counts") \
        .to(Topic("out"), name="to-out")
    return p


def test_letters_group_by_step_and_error_with_counts_times_and_an_example() -> None:
    letters = [_letter(0, 100, "check", "negative amount"), _letter(1, 300, "check", "negative amount"),
               _letter(2, 200, "check", "too large"), _letter(3, 50, "orders", "cannot decode", kind="DecodeError"),
               _letter(4, 400, "check", "negative amount", again=f"{DLQ}[0]@0")]
    groups = group_letters(letters, redriven=[f"{DLQ}[0]@0"])
    assert [(g.step, g.kind, g.error, g.count, g.first, g.last, g.example, g.again, g.redriven)
            for g in groups] == [
        ("check", "ValueError", "ValueError: negative amount", 3, 100, 400, f"{DLQ}[0]@0", 1, 1),
        ("check", "ValueError", "ValueError: too large", 1, 200, 200, f"{DLQ}[0]@2", 0, 0),
        ("orders", "DecodeError", "DecodeError: cannot decode", 1, 50, 50, f"{DLQ}[0]@3", 0, 0),
    ]
    assert groups[0].as_dict()["first"] == "1970-01-01T00:00:00.100Z"


def test_since_and_step_filter_the_groups() -> None:
    letters = [_letter(0, 100, "check", "a"), _letter(1, 300, "check", "a"), _letter(2, 300, "orders", "b")]
    assert [(g.step, g.count) for g in group_letters(letters, since=200)] == [("check", 1), ("orders", 1)]
    assert [(g.step, g.count) for g in group_letters(letters, step="orders")] == [("orders", 1)]


def test_since_takes_iso_8601_or_milliseconds_and_refuses_anything_else() -> None:
    assert since_ms("1000") == 1000
    assert since_ms("1970-01-01T00:00:01Z") == 1000
    assert since_ms(None) is None
    with pytest.raises(ConfigError, match="--since 'yesterday' is not a time"):
        since_ms("yesterday")


def test_an_unknown_step_is_refused_naming_the_steps() -> None:
    with pytest.raises(ConfigError, match="service svc has no step 'chek'; its steps: orders, check"):
        check_step(_pipeline(), "chek")
    check_step(_pipeline(), None)


def test_the_plan_redrives_each_dead_letter_the_ledger_does_not_hold_once() -> None:
    given = ValueCodec().encode(["k", {"amount": 1}, 5])
    letters = [_letter(0, 100, "check", "a", given=given), _letter(1, 200, "check", "a", given=given),
               _letter(2, 300, "orders", "cannot decode"), _letter(3, 400, "check", "no input")]
    plan = plan_redrive(_pipeline(), letters, [f"{DLQ}[0]@1"])
    assert [(r.of, r.step, r.topic, r.partition, r.timestamp) for r in plan.items] == [
        (f"{DLQ}[0]@0", "check", "orders", 0, 100), (f"{DLQ}[0]@2", "orders", "orders", 0, 300)]
    assert plan.done == [f"{DLQ}[0]@1"]
    assert plan.refused == [(f"{DLQ}[0]@3", ("step 'check' (Map) did not record its input (only map, filter, "
                             "flat_map, peek, key_by and aggregate steps whose function raised do, when the value "
                             "encoding can write it)"))]
    headers = dict(plan.items[0].headers)
    assert headers["fw.redrive.input"] == given and headers["fw.redrive.of"] == f"{DLQ}[0]@0".encode()
    assert headers["trace"] == b"t" and "fw.source.topic" not in headers  # the record's own headers only
    again = plan_redrive(_pipeline(), letters, [r.of for r in plan.items] + plan.done)
    assert again.items == [] and len(again.done) == 3


def test_the_plan_keeps_only_the_step_and_time_asked_for() -> None:
    given = ValueCodec().encode(["k", 1, 5])
    letters = [_letter(0, 100, "check", "a", given=given), _letter(1, 200, "orders", "b")]
    assert [r.of for r in plan_redrive(_pipeline(), letters, [], step="orders").items] == [f"{DLQ}[0]@1"]
    assert [r.of for r in plan_redrive(_pipeline(), letters, [], since=150).items] == [f"{DLQ}[0]@1"]


def test_a_timer_or_a_vanished_topic_cannot_be_redriven() -> None:
    timer = letter_of(ReadRecord(DLQ, 0, 9, 5, b"k", None, [
        ("fw.step", b"counts"), ("fw.timer.timestamp", b"5"), ("fw.error.type", b"ValueError"),
        ("fw.error.message", b"<no source record> in step 'counts': x")]))
    assert timer is not None
    moved = _letter(1, 1, "check", "a", source="old-orders", given=b"\x01\x90")
    plan = plan_redrive(_pipeline(), [timer, moved], [])
    assert [why for _, why in plan.refused] == [
        "a timer's failure: what it fired for is in the step's state, not in the dead letter",
        "step 'check' no longer reads topic 'old-orders'"]
