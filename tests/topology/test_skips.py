"""The skip list through the TestDriver (``framework.engine.skips``): under on_error=fail a
record a step raises on stops processing until the operator names it in the skip list; then,
processed again from the last checkpoint, it is a dead letter saying it was skipped, and every
other record of the interval, before and after it, counts exactly once. The Kafka runtime runs
the same code (tests/integration/test_group_skip.py)."""

from __future__ import annotations

from typing import Any

import pytest

from framework import Pipeline, Topic
from framework.errors import ProcessingError
from framework.serde import JsonSerde, StringSerde
from framework.testing import TestDriver

SOURCE = "sk-orders"
REPARTITION = "sk-by-user-repartition"


def _screen(order: dict[str, Any]) -> dict[str, Any]:
    if order["amount"] == 7:
        raise ValueError("seven is screened out")
    return order


def _check(order: dict[str, Any]) -> dict[str, Any]:
    if order["amount"] < 0:
        raise ValueError(f"negative amount {order['amount']}")
    return order


def _pipeline() -> Pipeline:
    """Orders screened (7 raises, before the repartition), re-keyed by user, checked (a negative
    amount raises, behind the repartition topic), summed per user."""
    p = Pipeline("sk", partitions=1)
    p.source(Topic(SOURCE, key_serde=StringSerde(), value_serde=JsonSerde()), name="orders") \
        .map(_screen, name="screen").key_by(lambda o: o["user"], name="by-user") \
        .map(_check, name="check").sum(lambda o: o["amount"], name="totals").to(Topic("sk-totals"))
    return p


GOOD_BEFORE = [("ann", 5), ("bob", 20), ("ann", 1)]
GOOD_AFTER = [("bob", 2), ("ann", 100)]


def _feed(d: TestDriver, poison: int) -> None:
    """A committed record, then one interval: good records, the poison one, good records."""
    d.append(SOURCE, b'{"user": "cyd", "amount": 3}', key=b"o")
    d.run()
    d.checkpoint()
    for user, amount in [*GOOD_BEFORE, ("dan", poison), *GOOD_AFTER]:
        d.append(SOURCE, f'{{"user": "{user}", "amount": {amount}}}'.encode(), key=b"o")


def _drain(d: TestDriver) -> None:
    """Process and checkpoint until everything went through: a round's repartition records
    are processed in the next one, once committed (raises what a step raises under on_error=fail)."""
    for _ in range(3):
        d.run()
        d.checkpoint()


def _totals(d: TestDriver) -> list[tuple[str, int]]:
    return [(r.key, r.value) for r in d.output("sk-totals")]


EXPECTED = [("cyd", 3), ("ann", 5), ("bob", 20), ("ann", 6), ("bob", 22), ("ann", 106)]


@pytest.mark.parametrize(("poison", "step", "named"), [
    (7, "screen", "source"), (-1, "check", "source"), (-1, "check", "repartition")],
    ids=["before-the-repartition", "behind-it-by-its-input-record", "behind-it-by-the-repartition-record"])
def test_a_skipped_record_is_a_dead_letter_and_every_other_record_counts_once(poison: int, step: str,
                                                                              named: str) -> None:
    d = TestDriver(_pipeline(), on_error="fail", auto_checkpoint=False)
    _feed(d, poison)
    with pytest.raises(ProcessingError) as failed:
        _drain(d)
    assert failed.value.step == step and failed.value.coordinates is not None
    where = failed.value.coordinates
    assert (where.origin or str(where)) == f"{SOURCE}[0]@4"
    assert str(failed.value).endswith(  # the error says how to go on: its input record's coordinates
        f" Fix: fix the step's function or the input (with on_error=dead_letter the record goes to the dead-letter "
        f"topic); or to go on past this one record, stop the service and run fw group skip sk {SOURCE}:0:4")
    with pytest.raises(ProcessingError):  # the member stops; started again, it meets the record again
        d.crash()
        _drain(d)

    if named == "source":
        d.skip(SOURCE, 0, 4, reason="dan's order was entered twice")
    else:
        assert where.topic == REPARTITION
        d.skip(where.topic, where.partition, where.offset, reason="dan's order was entered twice")
    d.crash()
    _drain(d)

    assert _totals(d) == EXPECTED
    [letter] = d.output("sk-dead-letter")
    headers = dict(letter.headers)
    produced = f'{{"user": "dan", "amount": {poison}}}'.encode()  # its bytes, or as the step got it
    assert letter.value == (produced if step == "screen" else {"user": "dan", "amount": poison})
    assert headers["fw.step"] == step.encode()
    assert headers["fw.skipped"] == (f"{SOURCE}[0]@4" if named == "source" else str(where)).encode()
    assert headers["fw.skip.reason"] == b"dan's order was entered twice"
    assert headers["fw.error.message"].decode().startswith(f"{where.described()} in step '{step}': ValueError: ")
    assert d.metrics()["dead_letters"] == 1


def test_the_skip_is_one_warning_naming_the_record(caplog: pytest.LogCaptureFixture) -> None:
    d = TestDriver(_pipeline(), on_error="fail", auto_checkpoint=False)
    _feed(d, 7)
    d.skip(SOURCE, 0, 4)
    with caplog.at_level("WARNING"):
        _drain(d)
    [line] = [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")]
    assert line.levelname == "WARNING"
    assert line.getMessage() == (
        f"skipped {SOURCE}[0]@4 in step 'screen' (the skip list of service sk names {SOURCE}[0]@4): ValueError: seven "
        "is screened out; it goes to the dead-letter topic sk-dead-letter and the service goes on")
    assert dict(d.dead_letters()[0].headers() or ())["fw.skip.reason"] == b""


def test_a_skip_of_a_record_that_succeeds_does_nothing() -> None:
    d = TestDriver(_pipeline(), on_error="fail", auto_checkpoint=False)
    d.skip(SOURCE, 0, 2)  # bob's 20: it does not fail
    _feed(d, 4)
    _drain(d)
    assert _totals(d) == [*EXPECTED[:4], ("dan", 4), *EXPECTED[4:]]
    assert d.output("sk-dead-letter") == []


def test_only_the_named_record_is_skipped() -> None:
    """Two poison records: the skip of the first does not let the second by."""
    d = TestDriver(_pipeline(), on_error="fail", auto_checkpoint=False)
    _feed(d, 7)
    d.append(SOURCE, b'{"user": "eve", "amount": 7}', key=b"o")
    d.skip(SOURCE, 0, 4)
    with pytest.raises(ProcessingError) as failed:
        _drain(d)
    assert str(failed.value.coordinates) == f"{SOURCE}[0]@7"
    with pytest.raises(ProcessingError):
        d.crash()
        _drain(d)
    assert d.output("sk-dead-letter") == []  # nothing of the interval committed


def test_under_on_error_dead_letter_a_skip_changes_nothing() -> None:
    d = TestDriver(_pipeline(), auto_checkpoint=False)
    d.skip(SOURCE, 0, 4, reason="not needed")
    _feed(d, 7)
    _drain(d)
    [letter] = d.output("sk-dead-letter")
    assert "fw.skipped" not in dict(letter.headers)
    assert _totals(d) == EXPECTED


def test_a_failed_async_call_on_a_skipped_record_is_a_dead_letter_too() -> None:
    """The result of an async step's call fails outside the record loop: the same decision."""
    async def price(order: dict[str, Any]) -> dict[str, Any]:
        if order["n"] == 2:
            raise ConnectionError("no price for 2")
        return {**order, "price": order["n"] * 10}

    p = Pipeline("ska")
    p.source(Topic("ska-in", key_serde=StringSerde(), value_serde=JsonSerde())).map_async(price, name="price") \
        .to(Topic("ska-out", key_serde=StringSerde(), value_serde=JsonSerde()))
    d = TestDriver(p, on_error="fail")
    d.pipe("ska-in", {"n": 1})
    with pytest.raises(ProcessingError, match=r"ska-in\[0\]@1 in step 'price': the call failed") as failed:
        d.pipe("ska-in", {"n": 2})
    assert str(failed.value).count("fw group skip ska ska-in:0:1") == 1
    d.skip("ska-in", 0, 1, reason="priced by hand")
    d.crash()
    d.pipe("ska-in", {"n": 3})
    assert d.values("ska-out") == [{"n": 1, "price": 10}, {"n": 3, "price": 30}]
    [letter] = d.output("ska-dead-letter")
    assert dict(letter.headers)["fw.skip.reason"] == b"priced by hand"


def test_a_redrive_record_that_fails_again_is_skipped_by_its_own_coordinates() -> None:
    """A re-drive record (fw dead-letters redrive) that fails again: the same decision, by its coordinates."""
    from framework.engine.redrive import redrive_headers

    d = TestDriver(_pipeline(), on_error="fail", auto_checkpoint=False)
    headers = redrive_headers("sk", "orders", "sk-dead-letter[0]@0", step_input=None, key=b"o",
                              value=b'{"user": "dan", "amount": 7}', encoding="original")
    d.append(SOURCE, None, headers=headers)
    with pytest.raises(ProcessingError, match=rf"{SOURCE}\[0\]@0 in step 'screen'"):
        _drain(d)
    d.skip(SOURCE, 0, 0)
    d.crash()
    _drain(d)
    [letter] = d.output("sk-dead-letter")
    assert dict(letter.headers)["fw.redrive.of"] == b"sk-dead-letter[0]@0"
    assert dict(letter.headers)["fw.skipped"] == f"{SOURCE}[0]@0".encode()
