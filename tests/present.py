"""``present(x)``: a value a test knows is there, where its type allows None (a record's key or
value: None for a record without a key, or a tombstone; a key a store may lack)."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def present(value: T | None) -> T:
    assert value is not None, "a value the test expected is missing"
    return value
