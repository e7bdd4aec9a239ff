"""The per-checkpoint write cache over one store partition.

Writes stay in memory as Python objects until the checkpoint's transaction commits; reads
see their own writes. At a checkpoint the cache hands its changes out as bytes (once, for
both the changelog and the RocksDB WriteBatch), and is cleared only when the commit
succeeded (``commit``) or the transaction was aborted (``discard``). A write made after the
changes were handed out is kept for the next checkpoint, never dropped by the commit.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from framework.errors import StateError
from framework.serde.values import DEFAULT_CODEC, ValueCodec
from framework.state.base import META_END, META_PREFIX, StorePartition

_DELETED = object()
_MISSING = object()
_ABSENT_MAX = 200_000  # keys remembered as absent from the backend, per store partition
_CLEAN_MAX = 16_384  # committed values kept as objects for later reads, per store partition

encode_value = DEFAULT_CODEC.encode
"""A state value as bytes, in the framework's value encoding (docs/state-format.md)."""
decode_value = DEFAULT_CODEC.decode


class CachedPartition:
    """One store partition as the operators see it: objects in, objects out.

    ``changes()`` takes the checkpoint's snapshot of the cache: the same bytes go to the
    changelog and, at ``commit``, to the WriteBatch. A write made after the snapshot was taken
    is not part of it (it was not in the changelog): it stays cached for the next checkpoint.
    """

    __slots__ = ("_absent", "_cache", "_clean", "_encode", "_loads", "_pending", "_snapshot", "backend", "name")

    def __init__(self, backend: StorePartition, codec: ValueCodec = DEFAULT_CODEC, name: str = "state") -> None:
        self.backend = backend
        self.name = name  # the store's (its step's) name, for errors
        self._encode = codec.encode
        self._loads = codec.decode
        self._cache: dict[bytes, Any] = {}  # writes not yet in a snapshot
        self._snapshot: dict[bytes, Any] | None = None  # the writes handed out by changes()
        self._pending: dict[bytes, bytes | None] | None = None  # _snapshot as bytes
        # Keys the backend was found not to hold. Only ``commit`` writes to the backend while
        # the cache is in use (and updates this set): a window or session opened and closed
        # within one interval, or a timer set and fired, reads RocksDB once, not at every get
        # and again at its delete.
        self._absent: set[bytes] = set()
        # Values the backend holds, as the objects that were committed or read: the next
        # interval's first read of a key (a session list, a window's accumulator) then needs
        # no RocksDB read and no decoding. Bounded; cleared on overflow and on discard.
        self._clean: dict[bytes, Any] = {}

    def get(self, key: bytes, default: Any = None) -> Any:
        v = self._cache.get(key, _MISSING)
        if v is _MISSING:
            snapshot = self._snapshot
            if snapshot is not None:
                v = snapshot.get(key, _MISSING)
            if v is _MISSING:
                v = self._clean.get(key, _MISSING)
                if v is not _MISSING:
                    return v
                if key in self._absent:
                    return default
                raw = self.backend.get(key)
                if raw is None:
                    self._note_absent(key)
                    return default
                v = self._loads(raw)
                clean = self._clean
                if len(clean) >= _CLEAN_MAX:
                    clean.clear()
                clean[key] = v
                return v
        return default if v is _DELETED else v

    def _note_absent(self, key: bytes) -> None:
        absent = self._absent
        if len(absent) >= _ABSENT_MAX:  # many distinct misses (or deletes): bound the memory
            absent.clear()
        absent.add(key)

    def put_new(self, key: bytes, value: Any) -> None:
        """``put`` for a caller that knows ``key`` has no value in the store (a timer its
        service does not hold): its later ``delete`` in the same interval then needs no
        backend read to know that no tombstone is due."""
        cache = self._cache
        if key not in cache:
            snapshot = self._snapshot
            if snapshot is None or key not in snapshot:  # nothing above the backend: it holds none
                self._note_absent(key)
        cache[key] = value

    def put(self, key: bytes, value: Any) -> None:
        self._cache[key] = value

    def delete(self, key: bytes) -> None:
        cache = self._cache
        if key in cache and cache[key] is not _DELETED:
            # Written in this interval: if it exists nowhere else (a timer or window that
            # lived and died between two checkpoints), forget it instead of writing a tombstone
            # to the changelog and the WriteBatch.
            snapshot = self._snapshot
            if (snapshot is None or key not in snapshot) and key not in self._clean and (
                    key in self._absent or self.backend.get(key) is None):
                del cache[key]
                return
        cache[key] = _DELETED

    def _overlay(self) -> dict[bytes, Any]:
        snapshot = self._snapshot
        return {**snapshot, **self._cache} if snapshot else self._cache

    def iter_range(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, Any]]:
        """Merged view of cache and backend over ``[start, end)``, ascending; the cache wins."""
        overlay = self._overlay()
        cached = sorted(k for k in overlay if k >= start and (end is None or k < end))
        ci = 0
        for k, raw in self.backend.iter_range(start, end):
            while ci < len(cached) and cached[ci] < k:
                ck = cached[ci]
                ci += 1
                v = self.get(ck, _DELETED)  # the latest write, even one made while iterating
                if v is not _DELETED:
                    yield ck, v
            if ci < len(cached) and cached[ci] == k:
                ci += 1
                v = self.get(k, _DELETED)
                if v is not _DELETED:
                    yield k, v
                continue
            yield k, self._loads(raw)
        for ck in cached[ci:]:
            v = self.get(ck, _DELETED)
            if v is not _DELETED:
                yield ck, v

    @property
    def dirty(self) -> bool:
        return bool(self._cache) or bool(self._snapshot)

    def changes(self) -> dict[bytes, bytes | None]:
        """The cache as bytes (``None`` = delete); computed once per checkpoint: later calls
        return the same changes until ``commit`` or ``discard``."""
        if self._pending is None:
            self._snapshot, self._cache = self._cache, {}
            encode = self._encode
            try:
                self._pending = {k: (None if v is _DELETED else encode(v)) for k, v in self._snapshot.items()}
            except TypeError:
                self._cache, self._snapshot = {**self._snapshot, **self._cache}, None
                raise self._unencodable() from None
        return self._pending

    def _unencodable(self) -> StateError:
        """The first value of the write cache that cannot be encoded, as an error saying how to fix it."""
        for k, v in self._cache.items():
            if v is _DELETED:
                continue
            try:
                self._encode(v)
            except TypeError as exc:
                return StateError(
                    f"step {self.name!r} keeps a value its state cannot store (key {k!r}): {exc}. Fix: keep "
                    "built-in values in state (None, bool, int, float, str, bytes, tuple, list, dict, set, "
                    "datetime, Decimal), or register the type with Pipeline(..., types=[YourType]) (a "
                    "dataclass, NamedTuple or Enum; anything else as CustomType(YourType, encode=..., "
                    "decode=...))")
        return StateError(f"step {self.name!r}: a state value could not be encoded")

    def commit(self, changelog_offset: int | None) -> None:
        """After the transaction committed: one WriteBatch of data + changelog offset."""
        changes = self.changes()
        if changes or changelog_offset is not None:
            self.backend.write_batch(changes, changelog_offset)
        written = self._snapshot or {}
        self._snapshot = None
        self._pending = None
        self._committed(written)

    def _committed(self, written: dict[bytes, Any]) -> None:
        """The backend now holds ``written``'s puts (these very objects, encoded) and none of
        its deletes: later reads take the objects, and a key whose last session closed is still
        known absent when its next record comes, intervals later."""
        absent, clean = self._absent, self._clean
        if len(clean) + len(written) > _CLEAN_MAX:
            clean.clear()  # (an interval's writes alone may exceed it: the write cache held them anyway)
        if len(absent) + len(written) > _ABSENT_MAX:
            absent.clear()
        # in bulk (a checkpoint may write thousands of keys): every key as put, then the deletes
        clean.update(written)
        if absent:
            absent.difference_update(written)
        for k in [k for k, v in written.items() if v is _DELETED]:
            del clean[k]
            absent.add(k)

    def discard(self) -> None:
        """After an abort: forget every uncommitted write (and the committed objects: the
        aborted interval may have changed them in place)."""
        self._cache = {}
        self._snapshot = None
        self._pending = None
        self._clean = {}

    def size(self) -> int:
        """Committed keys plus cached new keys (approximate)."""
        meta = sum(1 for _ in self.backend.iter_range(META_PREFIX, META_END))
        return self.backend.approximate_size() - meta + sum(
            1 for k, v in self._overlay().items() if v is not _DELETED and not k.startswith(META_PREFIX)
        )
