"""The skip list's entries as its topic holds them, how a task finds one, and the record
``fw group skip`` is given (``framework.engine.skips``, ``framework.ops.skips``)."""

from __future__ import annotations

import pytest

from framework.engine.skips import Skip, SkipList, skips_of
from framework.errors import ConfigError, RecordCoordinates
from framework.ops.skips import parse_record


def test_the_topic_s_records_leave_the_last_entry_of_each_record_and_none_of_a_tombstone() -> None:
    added = Skip("orders[0]@42", "entered twice", "2026-12-07T03:00:00Z")
    records = [added.encoded(), Skip("orders[1]@7").encoded(), (b"orders[1]@7", None),
               Skip("orders[0]@42", "a better reason").encoded(), (None, b"ignored"), (b"orders[2]@1", b"\xffnot json")]
    assert skips_of(records) == {
        "orders[0]@42": Skip("orders[0]@42", "a better reason", ""),
        "orders[2]@1": Skip("orders[2]@1", "\ufffdnot json"),
    }
    assert skips_of([added.encoded()]) == {"orders[0]@42": added}


def test_an_entry_names_a_record_by_its_coordinates_or_its_origin() -> None:
    skips = SkipList([Skip("orders[0]@42", "why")])
    assert skips.find(RecordCoordinates("orders", 0, 42)) == Skip("orders[0]@42", "why")
    assert skips.find(RecordCoordinates("s-by-user-repartition", 1, 7, origin="orders[0]@42")) is not None
    assert skips.find(RecordCoordinates("orders", 0, 43)) is None
    assert skips.find(RecordCoordinates("orders", 1, 42)) is None


def test_the_list_is_read_once_at_the_first_failure() -> None:
    reads: list[int] = []

    def load() -> list[Skip]:
        reads.append(1)
        return [Skip("orders[0]@1")]

    skips = SkipList(load=load)
    assert reads == []  # not before a record fails
    assert skips.find(RecordCoordinates("orders", 0, 2)) is None
    assert skips.find(RecordCoordinates("orders", 0, 1)) is not None
    assert reads == [1]


def test_a_list_that_cannot_be_read_names_nothing_and_says_why(caplog: pytest.LogCaptureFixture) -> None:
    def load() -> list[Skip]:
        raise ConnectionError("all brokers down")

    with caplog.at_level("WARNING"):
        assert SkipList(load=load).find(RecordCoordinates("orders", 0, 1)) is None
    assert [r.getMessage() for r in caplog.records] == [
        "the skip list could not be read (ConnectionError: all brokers down), so orders[0]@1 is not skipped"]


@pytest.mark.parametrize(("text", "record"), [
    ("orders:0:42", ("orders", 0, 42)), ("orders[0]@42", ("orders", 0, 42)),
    ("s-by-user-repartition[1]@7", ("s-by-user-repartition", 1, 7))])
def test_a_record_is_given_as_topic_partition_offset_or_as_the_error_names_it(
        text: str, record: tuple[str, int, int]) -> None:
    assert parse_record(text) == record


@pytest.mark.parametrize("text", ["orders", "orders:0", "orders:0:x", "orders:0:1,orders:1:2", "orders[0]@-1",
                                  "earliest", ""])
def test_anything_else_is_one_line_saying_how_to_give_it(text: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_record(text)
    assert str(err.value) == (f"{text!r} is not one record: give it as topic:partition:offset (orders:0:42), the "
                              "record the error that stopped the service names as topic[partition]@offset")
