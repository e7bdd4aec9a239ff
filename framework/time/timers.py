"""Timers of one step in one task: durable in the step's store, mirrored in a heap.

A timer is ``(timestamp, key bytes, namespace)``; registering the same one twice keeps one.
They live in the step's store under a reserved state name, so they are written to RocksDB
and the changelog at checkpoints like any state, and a restored task finds them again. The
in-memory heap gives the firing order: ascending ``(timestamp, key, namespace)``.

A step whose every timer follows from its other state (a window step without allowed
lateness: each window in its store has not fired, and fires at its end − 1) keeps them in
memory only (``durable=False``): it registers them again from that state when its task
starts, and writes no timer to its store or changelog.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Iterator

from framework.state.cache import CachedPartition
from framework.state.keys import prefix_end, state_prefix

_TS = struct.Struct(">Q")
_BIAS = 2**63  # signed timestamps sort bytewise as unsigned
_NS = tuple(bytes((n,)) for n in range(256))  # a namespace as its one byte
Timer = tuple[int, bytes, int]


class TimerService:
    """Event-time or processing-time timers of one step (``domain`` names the store section)."""

    __slots__ = ("_heap", "_live", "_prefix", "_store", "durable")

    def __init__(self, store: CachedPartition, domain: str, *, durable: bool = True) -> None:
        self._store = store
        self._prefix = state_prefix(f"__timers.{domain}")
        self.durable = durable  # False: in memory only, registered again by the step when its task starts
        self._live: set[Timer] = set()
        self._live.update(list_timers(store, domain))
        if not durable:  # stored by an earlier version of the step: kept in memory from now on
            for t in self._live:
                store.delete(self._encode(t))
        self._heap: list[Timer] = sorted(self._live)

    def _encode(self, t: Timer) -> bytes:
        return self._prefix + _TS.pack(t[0] + _BIAS) + t[1] + _NS[t[2]]

    def register(self, ts: int, key: bytes, namespace: int = 0) -> None:
        """``ValueError`` for a time outside Kafka's signed 64-bit milliseconds, before any change."""
        t = (ts, key, namespace)
        live = self._live
        if t not in live:
            if not -_BIAS <= ts < _BIAS:
                raise ValueError(f"a timer at {ts} ms is outside Kafka's timestamps (signed 64-bit milliseconds)")
            if self.durable:  # not live: the store holds no such timer
                self._store.put_new(self._prefix + _TS.pack(ts + _BIAS) + key + _NS[namespace], 1)
            live.add(t)
            heapq.heappush(self._heap, t)

    def delete(self, ts: int, key: bytes, namespace: int = 0) -> None:
        t = (ts, key, namespace)
        if t in self._live:
            self._live.discard(t)
            if self.durable:
                self._store.delete(self._encode(t))
            heap = self._heap
            if len(heap) > 2 * len(self._live) + 1024:  # deleted timers stay in the heap: compact
                heap[:] = self._live  # in place: a running ``due`` holds this list
                heapq.heapify(heap)

    def due(self, limit: int) -> Iterator[Timer] | tuple[()]:
        """Remove and yield, in order, every timer with timestamp <= ``limit``, including
        timers registered while iterating."""
        heap = self._heap
        if not heap or heap[0][0] > limit:
            return ()  # the common case on every watermark advance: no generator to build
        return self._drain(limit)

    def _drain(self, limit: int) -> Iterator[Timer]:
        heap, live, prefix, pack, pop = self._heap, self._live, self._prefix, _TS.pack, heapq.heappop
        delete = self._store.delete if self.durable else None
        while heap and heap[0][0] <= limit:
            t = pop(heap)
            if t in live:
                live.discard(t)
                if delete is not None:
                    delete(prefix + pack(t[0] + _BIAS) + t[1] + _NS[t[2]])
                yield t

    def next_timestamp(self) -> int | None:
        heap, live = self._heap, self._live
        while heap and heap[0] not in live:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def pending(self) -> list[Timer]:
        return sorted(self._live)

    def __len__(self) -> int:
        return len(self._live)


def list_timers(store: CachedPartition, domain: str) -> list[Timer]:
    """The pending timers of a step's store (committed and cached), for inspection."""
    prefix = state_prefix(f"__timers.{domain}")
    n = len(prefix)
    # key layout: prefix, timestamp (8 bytes, biased), key bytes, namespace (1 byte)
    return [(_TS.unpack_from(k, n)[0] - _BIAS, k[n + 8 : -1], k[-1])
            for k, _ in store.iter_range(prefix, prefix_end(prefix))]
