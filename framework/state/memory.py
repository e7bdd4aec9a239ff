"""In-memory store backend: the TestDriver's and Spark replay's state, same contract as RocksDB."""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping

from framework.state.base import STATE_FORMAT


class MemoryPartition:
    """A sorted in-memory key space; "durable" for the lifetime of its backend."""

    __slots__ = ("_changelog_id", "_data", "_format", "_keys", "_offset")

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._keys: list[bytes] = []  # sorted; kept in step with _data
        self._offset: int | None = None
        self._changelog_id: str | None = None
        self._format: int | None = None

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def iter_range(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        keys = self._keys
        i = bisect.bisect_left(keys, start)
        j = len(keys) if end is None else bisect.bisect_left(keys, end)
        data = self._data
        # A snapshot, as a RocksDB iterator gives: callers may write while iterating.
        yield from [(k, data[k]) for k in keys[i:j]]

    def write_batch(self, changes: Mapping[bytes, bytes | None], changelog_offset: int | None,
                    changelog_id: str | None = None) -> None:
        data, keys = self._data, self._keys
        for k, v in changes.items():
            if v is None:
                if data.pop(k, None) is not None:
                    del keys[bisect.bisect_left(keys, k)]
            else:
                if k not in data:
                    bisect.insort(keys, k)
                data[k] = v
        if changelog_offset is not None:
            self._offset = changelog_offset
        if changelog_id is not None:
            self._changelog_id, self._format = changelog_id, STATE_FORMAT

    def changelog_offset(self) -> int | None:
        return self._offset

    def changelog_id(self) -> str | None:
        return self._changelog_id

    def state_format(self) -> int | None:
        return self._format

    def approximate_size(self) -> int:
        return len(self._data)

    def close(self) -> None:
        pass


class MemoryBackend:
    """Keeps partitions in a dict; ``drop`` forgets one (as losing a disk would)."""

    def __init__(self) -> None:
        self._parts: dict[tuple[str, str, int], MemoryPartition] = {}

    def open(self, service: str, store: str, partition: int) -> MemoryPartition:
        return self._parts.setdefault((service, store, partition), MemoryPartition())

    def drop(self, service: str, store: str, partition: int) -> None:
        self._parts.pop((service, store, partition), None)
