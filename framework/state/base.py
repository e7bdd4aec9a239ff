"""State store protocols.

A *store* belongs to one pipeline step; it has one *partition* per task (the task's
partition number). Everything below the typed state views works on bytes::

    typed views (ValueState, MapState, ListState)     framework/state/views.py
      └─ CachedPartition: per-checkpoint write cache   framework/state/cache.py
           └─ StoreBackend partition: RocksDB or memory
                                                       framework/state/rocksdb/, memory.py

Invariants every backend keeps:

- ``write_batch(changes, changelog_offset)`` is atomic: the data changes and the changelog
  offset they reflect become durable together or not at all. Nothing else writes.
- ``changelog_offset()`` is the offset of the next changelog record to apply on restore
  (the offset *after* the last one reflected), or ``None`` for a fresh partition.
- ``changelog_id()`` is the incarnation of the changelog the data reflects (Kafka's topic
  id: a topic deleted and created again has a new one), written with ``STATE_FORMAT`` as
  ``state_format()``; ``None`` for a partition that never said (fresh, or older).
- ``iter_range`` yields ``(key, value)`` in ascending bytewise key order.

Keys starting with byte 0x00 are the store's own metadata (``META_PREFIX``), kept in the
data and the changelog like any entry but not counted as state: every state key starts
with a length byte of at least 1 (``framework.state.keys``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Protocol

META_PREFIX = b"\x00"
META_END = b"\x01"
STEP_META_KEY = META_PREFIX + b"step"  # what kind of step the store's state belongs to
STATE_FORMAT = 1  # of the data a partition holds: keys, values and meta (docs/state-format.md)


class StorePartition(Protocol):
    """The durable bytes of one store for one task."""

    def get(self, key: bytes) -> bytes | None: ...

    def iter_range(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """Pairs with ``start <= key < end`` (``end=None``: to the last key), ascending."""
        ...

    def write_batch(self, changes: Mapping[bytes, bytes | None], changelog_offset: int | None,
                    changelog_id: str | None = None) -> None:
        """Apply ``changes`` (``None`` deletes) and record ``changelog_offset`` (and, when
        given, ``changelog_id`` with ``STATE_FORMAT``), atomically."""
        ...

    def changelog_offset(self) -> int | None: ...

    def changelog_id(self) -> str | None: ...

    def state_format(self) -> int | None: ...

    def approximate_size(self) -> int:
        """Number of keys (estimate is fine); for metrics and bounded-state tests."""
        ...

    def close(self) -> None: ...


class StoreBackend(Protocol):
    """Opens store partitions; one backend per process."""

    def open(self, service: str, store: str, partition: int) -> StorePartition: ...

    def drop(self, service: str, store: str, partition: int) -> None:
        """Delete a partition's data (it will be rebuilt from the changelog)."""
        ...


def partition_path(root: Path, service: str, store: str, partition: int) -> Path:
    """``state_dir/<service>/<store>/<partition>``: where a partition's files live."""
    return root / service / store / str(partition)
