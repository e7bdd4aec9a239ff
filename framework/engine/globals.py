"""Global tables: every partition of a topic, held whole by every process of a service.

A global table is not a task's: the engine reads all of its topic's partitions (outside the
consumer group) and hands the records to ``GlobalTables.apply``, which keeps each key's
versions like a table (``framework.operators.table``) in one store per process, with the
next offset of each partition beside them. The store is not transactional and has no
changelog: it is the topic, read again from the offsets it saved with the partitions'
watermarks (a lost store reads the topic from its start). A join with a global table
looks a row up as of a record's time, and the versions are the same however far the table
has been read, so a task that processes a record again after a crash joins it the same way.

The table's watermark is the minimum over its partitions that are not idle. Listeners (the
joins of the running tasks) hear when it advances. Lateness and history are a table's: an
update at or behind the watermark is kept and counted (``late_records.<table>``), one older
than its key's history is dropped and counted (``expired_records.<table>``); the process's
counters, beside ``skipped_records.<table>`` (a record the serdes cannot decode).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from framework.engine.context import InputRecord
from framework.errors import RecordError, StateError, StoreLocked
from framework.logs import record_fields
from framework.operators.table import TABLE_PREFIX, put_version
from framework.pipeline import steps as S
from framework.pipeline.definition import Pipeline
from framework.serde.values import ValueCodec
from framework.state.base import StoreBackend, StorePartition
from framework.state.cache import CachedPartition
from framework.state.keys import keyed, state_prefix
from framework.time.watermarks import NO_WATERMARK, WatermarkGenerator

log = logging.getLogger("framework.globals")
PROGRESS_KEY = state_prefix("__progress")  # offsets (next, per partition), watermarks, idle partitions
GLOBAL_PARTITION = 0  # the store partition a process keeps a global table in
Listener = Callable[[int], None]


class GlobalTable:
    """One global table of this process: its store, its partitions' watermarks, its listeners."""

    def __init__(self, step: S.GlobalTable, store: CachedPartition, now_ms: Callable[[], int]) -> None:
        self.step, self.store, self.now_ms = step, store, now_ms
        t = step.topic
        self._key = t.key_serde.bind(t.name, True).deserialize
        self._value = t.value_serde.bind(t.name, False).deserialize
        self._ks = step.key_serde.serialize
        wm = step.watermarks
        self._assign = None if wm is None else wm.assigner(step.name)
        self._strategy = wm
        saved = store.get(PROGRESS_KEY) or {}
        self.positions: dict[int, int] = {int(p): o for p, o in saved.get("offsets", {}).items()}
        self.generators: dict[int, WatermarkGenerator] = {}
        for p, snap in saved.get("wm", {}).items():
            gen = self.generators[int(p)] = wm.generator()  # type: ignore[union-attr]
            gen.restore(snap)
        self.idle: set[int] = set(saved.get("idle", ()))
        self.active_ms: dict[int, int] = {}
        self.partitions = 0
        self.watermark = saved.get("w", NO_WATERMARK)
        self.listeners: list[Listener] = []
        self.counters: dict[str, int] = {}  # skipped, late and expired records (``_count``), by metric name
        self.changed = False  # progress (offsets, watermarks, idleness) not yet committed

    def set_partitions(self, n: int) -> None:
        """The topic has ``n`` partitions: each one counts in the watermark."""
        self.partitions = n
        now = self.now_ms()
        for p in range(n):
            self.active_ms.setdefault(p, now)

    def apply(self, msg: InputRecord) -> None:
        p, offset = msg.partition(), msg.offset()
        try:
            k = self._key(msg.key()) if msg.key() is not None else None
            vb = msg.value()
            v = None if vb is None else self._value(vb)
            ts = msg.timestamp()[1]
            if self._assign is not None:
                ts = self._assign(v, ts)
        except Exception as exc:  # noqa: BLE001 - any decoder failure is this record's fault
            self._count("skipped_records")
            reason = str(exc) if isinstance(exc, RecordError) else f"{type(exc).__name__}: {exc}"
            log.error("global table %s skips %s[%d]@%d: cannot decode it (%s). Fix: write the topic with the "
                      "table's serdes (the record stays in the topic; the table goes on without it)",
                      self.step.name, msg.topic(), p, offset, reason,
                      extra=record_fields(None, self.step.name, key=msg.key()))
            self.positions[p] = offset + 1
            self.changed = True
            return
        self.positions[p] = offset + 1
        self.changed = True
        if k is not None:
            self._put(k, v, ts)
        if self._strategy is not None:
            gen = self.generators.get(p)
            if gen is None:
                gen = self.generators[p] = self._strategy.generator()
            gen.on_event(v, ts)
            self.active_ms[p] = self.now_ms()
            self.idle.discard(p)
            self._advance()

    def _put(self, k: Any, v: Any, ts: int) -> None:
        """Keep the version and count it as ``build_table`` does: expired, or late (kept: later
        lookups see it; records already joined do not change). The watermark is the one before
        this record moves it, as a table's step sees its clock."""
        if not put_version(self.store, keyed(TABLE_PREFIX, self._ks(k)), ts, v, self.step.history_ms):
            self._count("expired_records")
        elif self.watermark != NO_WATERMARK and ts <= self.watermark:
            self._count("late_records")

    def _count(self, kind: str) -> None:
        metric = f"{kind}.{self.step.name}"
        self.counters[metric] = self.counters.get(metric, 0) + 1

    def _advance(self) -> None:
        self.changed = True
        live = [self.generators[p].watermark if p in self.generators else NO_WATERMARK
                for p in range(max(self.partitions, 1)) if p not in self.idle]
        w = min(live) if live else self.watermark
        if w > self.watermark:
            self.watermark = w
            for fn in list(self.listeners):
                fn(w)

    def force(self, watermark: int) -> None:
        """Every partition's watermark up to ``watermark`` (the TestDriver's ``advance_watermark``)."""
        if self._strategy is None:
            return
        for p in range(max(self.partitions, 1)):
            gen = self.generators.get(p)
            if gen is None:
                gen = self.generators[p] = self._strategy.generator()
            gen.watermark = max(gen.watermark, watermark)
        self._advance()

    @property
    def all_idle(self) -> bool:
        return self.partitions > 0 and len(self.idle) >= self.partitions

    def tick(self) -> None:
        """A partition silent for its strategy's idle timeout leaves the watermark's minimum."""
        timeout = None if self._strategy is None else self._strategy.idle_timeout_ms
        if timeout is None:
            return
        now = self.now_ms()
        went = [p for p in range(self.partitions) if p not in self.idle and now - self.active_ms.get(p, now) >= timeout]
        if went:
            self.idle.update(went)
            self._advance()

    def commit(self) -> None:
        """The versions, the positions and the watermarks, durable together (one write batch)."""
        self.store.put(PROGRESS_KEY, {"offsets": dict(self.positions), "idle": sorted(self.idle), "w": self.watermark,
                                      "wm": {p: g.snapshot() for p, g in self.generators.items()}})
        self.store.commit(None)
        self.changed = False


COPIES = 64  # copies of a global table one state directory may hold (processes sharing it)


def open_copy(backend: StoreBackend, service: str, table: str) -> StorePartition:
    """A copy of global table ``table`` no other process holds: ``<table>``, else
    ``<table>@1``, ``<table>@2``... The processes of one machine (``fw run --processes N``)
    share a state directory; each takes a free copy, and a restarted one usually finds its
    own again (any copy is a whole table with the offsets it continues from)."""
    for slot in range(COPIES):
        try:
            return backend.open(service, table if slot == 0 else f"{table}@{slot}", GLOBAL_PARTITION)
        except StoreLocked:
            continue
    raise StateError(f"all {COPIES} copies of global table {table!r} in the state directory are held by other "
                     "processes. Fix: give each process a state directory of its own (state.dir)")


class GlobalTables:
    """The global tables of one process, by step name."""

    def __init__(self, pipeline: Pipeline, backend: StoreBackend, codec: ValueCodec,
                 now_ms: Callable[[], int]) -> None:
        self.tables: dict[str, GlobalTable] = {}
        self.by_topic: dict[str, GlobalTable] = {}
        for step in pipeline.global_tables():
            store = CachedPartition(open_copy(backend, pipeline.name, step.name), codec, step.name)
            table = self.tables[step.name] = GlobalTable(step, store, now_ms)
            self.by_topic[step.topic.name] = table

    def __bool__(self) -> bool:
        return bool(self.tables)

    def topics(self) -> list[str]:
        return list(self.by_topic)

    def positions(self) -> dict[tuple[str, int], int]:
        """Where each partition of each global topic continues (partitions never read: absent)."""
        return {(t.step.topic.name, p): o for t in self.tables.values() for p, o in t.positions.items()}

    def apply(self, records: Iterable[InputRecord]) -> int:
        n = 0
        for msg in records:
            if msg.error() is not None:
                continue
            table = self.by_topic.get(msg.topic())
            if table is not None:
                table.apply(msg)
                n += 1
        return n

    def tick(self) -> None:
        for t in self.tables.values():
            t.tick()

    def commit(self) -> None:
        for t in self.tables.values():
            if t.changed or t.store.dirty:
                t.commit()

    def close(self) -> None:
        for t in self.tables.values():
            t.store.backend.close()
