"""The framework's value encoding (state, changelogs, repartition topics): every built-in
value type round-trips exactly, user types only when registered, and decoding never runs
code chosen by the bytes."""

from __future__ import annotations

import enum
import math
import os
import pickle
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework import CustomType, Pipeline, PipelineError
from framework.serde.values import ValueCodec, ValueSerde

CODEC = ValueCodec()


def round_trip(value: Any, codec: ValueCodec = CODEC) -> Any:
    return codec.decode(codec.encode(value))


@pytest.mark.parametrize("value", [
    None, True, False, 0, 1, -1, 2**63 - 1, -(2**63), 2**64 - 1, 2**64, -(2**63) - 1, 10**40,
    0.0, -0.0, 1.5, float("inf"), "", "héllo ✓", b"", b"\x00\xff", (), (1,), (1, "a", None), [], [1, [2, (3,)]],
    {}, {"a": 1, 2: "b", (1, 2): [3], None: 0}, set(), {1, 2, 3}, frozenset({"x", "y"}), {frozenset({1})},
    datetime(2026, 11, 23, 12, 30, 45, 123456), datetime(2026, 1, 1, tzinfo=UTC),
    datetime(2026, 1, 1, 8, tzinfo=timezone(timedelta(hours=-5))), date(2026, 2, 28), Decimal("12.340"),
    Decimal("-1E+5"), [(1, 2), {"k": {(3, 4), (5, 6)}}, [datetime(2020, 1, 1)]],
])
def test_built_in_values_round_trip_exactly(value: Any) -> None:
    back = round_trip(value)
    assert back == value
    assert type(back) is type(value)
    if isinstance(value, (list, tuple)):
        assert [type(x) for x in back] == [type(x) for x in value]


def test_bools_stay_bools_and_ints_stay_ints() -> None:
    assert [type(x) for x in round_trip([True, 1, 1.0])] == [bool, int, float]


def test_a_nan_round_trips() -> None:
    back = round_trip(float("nan"))
    assert isinstance(back, float) and math.isnan(back)


scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary()
           | st.datetimes() | st.dates() | st.decimals(allow_nan=False, allow_infinity=False))
hashables = st.recursive(scalars, lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
                         max_leaves=6)
values = st.recursive(
    scalars,
    lambda inner: (st.lists(inner, max_size=4) | st.tuples(inner, inner) | st.sets(hashables, max_size=4)
                   | st.dictionaries(hashables, inner, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(values)
def test_any_nesting_of_built_in_values_round_trips(value: Any) -> None:
    assert round_trip(value) == value


def test_the_same_set_gives_the_same_bytes() -> None:
    a = {f"k{i}" for i in range(50)}
    b = set()
    for k in sorted(a, reverse=True):  # the same members, inserted in another order
        b.add(k)
    assert CODEC.encode(a) == CODEC.encode(b)


def test_the_bytes_start_with_the_version() -> None:
    assert CODEC.encode({"n": 1})[0] == 1
    assert CODEC.encode(5) == b"\x01\x05"  # version 1, then MessagePack's positive fixint 5


# --- user types -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    x: int
    y: int


class Pair(NamedTuple):
    left: Any
    right: Any


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Money:
    def __init__(self, cents: int) -> None:
        self.cents = cents

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Money) and other.cents == self.cents


def test_registered_types_round_trip_nested_in_built_in_ones() -> None:
    codec = ValueCodec([Point, Pair, Colour, CustomType(Money, name="shop.Money", encode=lambda m: m.cents,
                                                        decode=Money)])
    value = {"p": Point(1, 2), "pair": Pair(Point(3, 4), [Colour.RED]), "cost": Money(250), "t": (Colour.BLUE,)}
    assert round_trip(value, codec) == value


def test_an_unregistered_type_is_refused_on_encoding_naming_it() -> None:
    with pytest.raises(TypeError, match="test_value_encoding.Point"):
        CODEC.encode({"p": Point(1, 2)})
    with pytest.raises(TypeError, match="collections.Counter"):
        from collections import Counter

        CODEC.encode(Counter("aab"))


def test_a_registered_name_the_reader_does_not_know_is_refused() -> None:
    data = ValueCodec([CustomType(Point, name="geo.Point")]).encode(Point(1, 2))
    with pytest.raises(ValueError, match="unknown registered type 'geo.Point'.*Pipeline\\(types="):
        CODEC.decode(data)


def test_a_class_that_needs_functions_is_refused_when_the_pipeline_is_defined() -> None:
    with pytest.raises(PipelineError, match="CustomType\\(Money, encode="):
        Pipeline("svc", types=[Money])
    with pytest.raises(PipelineError, match="both encode= and decode="):
        Pipeline("svc", types=[CustomType(Money, encode=lambda m: m.cents)])


def test_two_types_with_one_name_are_refused() -> None:
    with pytest.raises(PipelineError, match="named 'x'"):
        ValueCodec([CustomType(Point, name="x"), CustomType(Pair, name="x")])


# --- hostile bytes ------------------------------------------------------------------------------


class _Shell:
    """Unpickled, runs a shell command that creates a file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("protocol", [2, 5])
def test_a_pickle_crafted_to_run_a_command_runs_nothing(tmp_path: Path, protocol: int) -> None:
    marker = tmp_path / "pwned"
    crafted = pickle.dumps(_Shell(marker), protocol)
    for data in (crafted, b"\x01" + crafted):  # also behind our own version byte
        with pytest.raises(ValueError):
            CODEC.decode(data)
        with pytest.raises(ValueError):
            ValueSerde().deserialize(data)
    assert not marker.exists()


@pytest.mark.parametrize("data", [b"", b"\x02\x05", b"\x01", b"\x01\xc1", b"\x01\x05\x05", b"\x01\xd4\x09\x00",
                                  b"\x01\xc7\x03\x01abc", b"\x01\x93\xd4\x08\x00\xa1x\x01"])
def test_malformed_bytes_are_a_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        CODEC.decode(data)
