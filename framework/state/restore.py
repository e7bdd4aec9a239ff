"""Rebuilding a store partition from its changelog: shared by the Kafka runtime and the TestDriver."""

from __future__ import annotations

from collections.abc import Iterable

from framework.state.base import StorePartition


def apply_changelog(partition: StorePartition, records: Iterable[tuple[int, bytes, bytes | None]]) -> int:
    """Apply ``(offset, key, value)`` changelog records as one WriteBatch with the next offset.

    Later records for a key win. Returns the number of records applied.
    """
    changes: dict[bytes, bytes | None] = {}
    last = -1
    n = 0
    for offset, key, value in records:
        changes[key] = value
        last = offset
        n += 1
    if n:
        partition.write_batch(changes, last + 1)
    return n
