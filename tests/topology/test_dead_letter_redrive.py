"""A dead letter re-driven through the TestDriver: the re-drive record resumes at the step that
failed, with what that step was given, so the steps before it (a count) do not run again; a
record that fails again is a new dead letter naming the one re-driven (``fw.redrive.of``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from framework import Pipeline, Topic
from framework.engine.runner import TaskRunner
from framework.errors import RecordTooLargeError
from framework.kafka.inspect import ReadRecord
from framework.ops.deadletters import Redrive, letter_of, plan_redrive, redrive_of
from framework.records import Record
from framework.serde import JsonSerde, StringSerde
from framework.state.memory import MemoryBackend
from framework.testing import TestDriver

BROKEN = {"on": True}  # the "bug": while on, an amount of 13 raises in 'check'


@dataclass
class Order:
    user: str
    amount: int


def _check(order: Order) -> Order:
    if BROKEN["on"] and order.amount == 13:
        raise ValueError("unlucky amount 13")
    return order


def _pipeline(rekey: bool) -> Pipeline:
    """Orders parsed into a dataclass, counted per user (before the failing step), checked,
    written out; ``rekey``: through a repartition topic by user first."""
    p = Pipeline("rd", partitions=2, types=[Order])
    orders = p.source(Topic("rd-orders", key_serde=StringSerde(), value_serde=JsonSerde()), name="orders") \
        .map(lambda d: Order(**d), name="parse")
    if rekey:
        orders = orders.key_by(lambda o: o.user, name="by-user")
    counted = orders.map(lambda o: 1, name="one").sum(name="counts")
    counted.to(Topic("rd-counts"), name="to-counts")
    orders.map(_check, name="check").map(lambda o: {"user": o.user, "amount": o.amount}, name="plain") \
        .to(Topic("rd-checked"), name="to-checked")
    return p


@pytest.fixture(autouse=True)
def _broken() -> Any:
    BROKEN["on"] = True
    yield
    BROKEN["on"] = True


def _read(r: Record, topic: str) -> ReadRecord:
    return ReadRecord(topic, r.partition(), r.offset(), r.timestamp()[1], r.key(), r.value(), list(r.headers() or []))


def _redrive(driver: TestDriver, item: Redrive) -> None:
    driver.append(item.topic, None, timestamp=item.timestamp, headers=list(item.headers), partition=item.partition)
    driver.run()


@pytest.mark.parametrize("rekey", [False, True], ids=["source", "repartition"])
def test_a_redriven_dead_letter_resumes_at_its_step_and_counts_once(rekey: bool) -> None:
    p = _pipeline(rekey)
    driver = TestDriver(p, partitions=2)
    driver.pipe("rd-orders", {"user": "ann", "amount": 5}, key="ann", timestamp=1)
    driver.pipe("rd-orders", {"user": "ann", "amount": 13}, key="ann", timestamp=2)
    [dead] = driver.dead_letters()
    letter = letter_of(_read(dead, p.dead_letter.name))
    assert letter is not None and letter.step == "check"
    assert driver.values("rd-counts") == [1, 2]
    assert driver.values("rd-checked") == [{"user": "ann", "amount": 5}]

    BROKEN["on"] = False  # the fix
    item = redrive_of(p, letter)
    assert isinstance(item, Redrive) and item.step == "check"
    assert item.topic == ("rd-by-user-repartition" if rekey else "rd-orders")
    _redrive(driver, item)
    assert driver.values("rd-checked") == [{"user": "ann", "amount": 5}, {"user": "ann", "amount": 13}]
    assert driver.values("rd-counts") == [1, 2]  # the count before 'check' did not run again
    assert driver.state("counts", "ann") == 2
    assert len(driver.dead_letters()) == 1


def test_a_redriven_record_that_fails_again_is_a_new_dead_letter_naming_the_first() -> None:
    p = _pipeline(True)
    driver = TestDriver(p, partitions=2)
    driver.pipe("rd-orders", {"user": "bob", "amount": 13}, key="bob", timestamp=7)
    [dead] = driver.dead_letters()
    letter = letter_of(_read(dead, p.dead_letter.name))
    assert letter is not None
    item = redrive_of(p, letter)
    assert isinstance(item, Redrive)
    _redrive(driver, item)  # still broken
    _, again = driver.dead_letters()
    headers = dict(again.headers() or [])
    assert headers["fw.redrive.of"] == letter.where.encode()
    assert headers["fw.step"] == b"check" and headers["fw.value.encoding"] == b"json"
    assert json.loads(again.value() or b"") == {"user": "bob", "amount": 13}
    assert driver.values("rd-checked") == [] and driver.values("rd-counts") == [1]
    again_letter = letter_of(_read(again, p.dead_letter.name))
    assert again_letter is not None and isinstance(redrive_of(p, again_letter), Redrive)  # it can go again


def test_an_undecodable_record_is_redriven_as_it_was_read() -> None:
    p = _pipeline(False)
    driver = TestDriver(p, partitions=2)
    driver.pipe_raw("rd-orders", b'{"user": "cyd", "amount": 3', key=b"cyd", timestamp=3,
                    headers=[("trace", b"t-1")])
    [dead] = driver.dead_letters()
    letter = letter_of(_read(dead, p.dead_letter.name))
    assert letter is not None and letter.step == "orders"
    item = redrive_of(p, letter)
    assert isinstance(item, Redrive) and item.step == "orders"
    _redrive(driver, item)  # still malformed: it fails in the same step, with its bytes and headers
    again = driver.dead_letters()[1]
    assert (again.key(), again.value()) == (b"cyd", b'{"user": "cyd", "amount": 3')
    assert dict(again.headers() or [])["trace"] == b"t-1"


def test_another_service_reading_the_topic_skips_a_redrive_record() -> None:
    p = _pipeline(False)
    driver = TestDriver(p, partitions=2)
    driver.pipe("rd-orders", {"user": "ann", "amount": 13}, key="ann", timestamp=1)
    letter = letter_of(_read(driver.dead_letters()[0], p.dead_letter.name))
    assert letter is not None
    item = redrive_of(p, letter)
    assert isinstance(item, Redrive)
    other = Pipeline("other", partitions=2)
    other.source(Topic("rd-orders", key_serde=StringSerde(), value_serde=JsonSerde()), name="orders") \
        .to(Topic("other-out"), name="out")
    reader = TestDriver(other, partitions=2)
    _redrive(reader, item)
    assert reader.values("other-out") == [] and reader.dead_letters() == []


def test_what_cannot_be_redriven_says_why() -> None:
    p = _pipeline(False)
    driver = TestDriver(p, partitions=2)
    driver.pipe("rd-orders", {"user": "ann", "amount": 13}, key="ann", timestamp=1)
    letter = letter_of(_read(driver.dead_letters()[0], p.dead_letter.name))
    assert letter is not None
    changed = Pipeline("rd", partitions=2, types=[Order])
    changed.source(Topic("rd-orders"), name="orders").to(Topic("rd-checked"), name="to-checked")
    assert redrive_of(changed, letter) == "the pipeline has no step 'check' now"
    plan = plan_redrive(p, [letter], [letter.where])
    assert (plan.items, plan.done) == ([], [letter.where])


class _Limited:
    """An output that refuses records larger than ``limit`` bytes, as the producer does."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.sent: list[tuple[str, bytes | None, bytes | None, list[tuple[str, bytes]]]] = []

    def produce(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int,
                headers: Any = None, partition: int | None = None) -> None:
        size = len(key or b"") + len(value or b"") + sum(len(n) + len(v) for n, v in headers or ())
        if size > self.limit:
            raise RecordTooLargeError(f"{size} bytes is more than message.max.bytes {self.limit}")
        self.sent.append((topic, key, value, list(headers or ())))

    def produce_changelog(self, topic: str, partition: int, key: bytes, value: bytes | None, headers: Any) -> None:
        pass


def test_a_dead_letter_too_large_to_send_goes_without_the_step_input_too() -> None:
    p = Pipeline("big", partitions=1)
    p.source(Topic("big-in", key_serde=StringSerde(), value_serde=JsonSerde()), name="in") \
        .map(lambda v: 1 / 0, name="fails").to(Topic("big-out"), name="out")
    out = _Limited(10_000)  # the input alone is larger: the fallback must drop it too
    runner = TaskRunner(p, MemoryBackend(), out, partitions=1)
    runner.start(0)
    runner.process([Record("big-in", 0, 0, b"k", json.dumps("x" * 12_000).encode(), 5)])
    [(topic, key, value, headers)] = out.sent
    named = dict(headers)
    assert (topic, key, value) == ("big-dead-letter", None, None)
    assert "fw.step.input" not in named and named["fw.step"] == b"fails"
    assert b"and fw.step.input (12" in named["fw.omitted"]


def test_an_input_the_value_encoding_cannot_write_is_not_kept_and_the_dead_letter_says_why_it_stays() -> None:
    p = Pipeline("unreg", partitions=1)  # Order is not among its types
    p.source(Topic("unreg-in", key_serde=StringSerde(), value_serde=JsonSerde()), name="in") \
        .map(lambda d: Order(**d), name="parse").map(_check, name="check").to(Topic("unreg-out"), name="out")
    driver = TestDriver(p, partitions=1)
    driver.pipe("unreg-in", {"user": "ann", "amount": 13}, key="ann", timestamp=1)
    [dead] = driver.dead_letters()
    assert "fw.step.input" not in dict(dead.headers() or [])
    letter = letter_of(_read(dead, p.dead_letter.name))
    assert letter is not None
    assert redrive_of(p, letter) == (
        "step 'check' (Map) did not record its input (only map, filter, flat_map, peek, key_by and aggregate steps "
        "whose function raised do, when the value encoding can write it)")
