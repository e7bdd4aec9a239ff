"""The per-checkpoint write cache over one store partition.

Writes stay in memory as Python objects until the checkpoint's transaction commits; reads
see their own writes. At a checkpoint the cache hands its changes out as bytes (once, for
both the changelog and the RocksDB WriteBatch), and is cleared only when the commit
succeeded (``commit``) or the transaction was aborted (``discard``).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

from framework.state.base import StorePartition

_DELETED = object()
_dumps = pickle.dumps
_loads = pickle.loads


def encode_value(obj: Any) -> bytes:
    """State values are pickled (protocol 5): internal to the service and its replay."""
    return _dumps(obj, 5)


decode_value = _loads


class CachedPartition:
    """One store partition as the operators see it: objects in, objects out."""

    __slots__ = ("backend", "_cache", "_pending")

    def __init__(self, backend: StorePartition) -> None:
        self.backend = backend
        self._cache: dict[bytes, Any] = {}
        self._pending: dict[bytes, bytes | None] | None = None

    def get(self, key: bytes, default: Any = None) -> Any:
        v = self._cache.get(key, _DELETED)
        if v is _DELETED:
            if key in self._cache:
                return default
            raw = self.backend.get(key)
            return default if raw is None else _loads(raw)
        return v

    def put(self, key: bytes, value: Any) -> None:
        self._cache[key] = value

    def delete(self, key: bytes) -> None:
        self._cache[key] = _DELETED

    def iter_range(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, Any]]:
        """Merged view of cache and backend over ``[start, end)``, ascending; the cache wins."""
        cached = sorted(k for k in self._cache if k >= start and (end is None or k < end))
        ci = 0
        for k, raw in self.backend.iter_range(start, end):
            while ci < len(cached) and cached[ci] < k:
                ck = cached[ci]
                ci += 1
                v = self._cache.get(ck, _DELETED)
                if v is not _DELETED:
                    yield ck, v
            if ci < len(cached) and cached[ci] == k:
                ci += 1
                v = self._cache.get(k, _DELETED)
                if v is not _DELETED:
                    yield k, v
                continue
            yield k, _loads(raw)
        for ck in cached[ci:]:
            v = self._cache.get(ck, _DELETED)
            if v is not _DELETED:
                yield ck, v

    @property
    def dirty(self) -> bool:
        return bool(self._cache)

    def changes(self) -> dict[bytes, bytes | None]:
        """The cache as bytes (``None`` = delete); computed once per checkpoint."""
        if self._pending is None:
            self._pending = {
                k: (None if v is _DELETED else _dumps(v, 5)) for k, v in self._cache.items()
            }
        return self._pending

    def commit(self, changelog_offset: int | None) -> None:
        """After the transaction committed: one WriteBatch of data + changelog offset."""
        if self._cache or changelog_offset is not None:
            self.backend.write_batch(self.changes(), changelog_offset)
        self._cache = {}
        self._pending = None

    def discard(self) -> None:
        """After an abort: forget every uncommitted write."""
        self._cache = {}
        self._pending = None

    def size(self) -> int:
        """Committed keys plus cached new keys (approximate)."""
        return self.backend.approximate_size() + sum(1 for v in self._cache.values() if v is not _DELETED)
