"""Restoring a task's stores from their changelogs before the task runs.

On assignment each store partition continues from the changelog offset stored with its
data, up to the end of the changelog (read_committed). Every batch is written with its
offset in one WriteBatch, so a rebalance or crash during a restore loses nothing and the
next restore continues where this one stopped. The task's inputs stay paused meanwhile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from framework.kafka.clients import TP, ChangelogReader
from framework.pipeline.definition import Pipeline
from framework.runtime.faults import crash_point
from framework.state.base import StoreBackend
from framework.state.restore import apply_changelog

log = logging.getLogger("framework.restore")
_PROGRESS_EVERY_S = 5.0


class Restorer:
    def __init__(self, pipeline: Pipeline, reader: ChangelogReader, backend: StoreBackend,
                 on_restored: Callable[[int], None]) -> None:
        self.pipeline, self.reader, self.backend, self.on_restored = pipeline, reader, backend, on_restored
        self.pending: dict[int, set[TP]] = {}  # partition -> changelog partitions still restoring
        self.stores: dict[TP, str] = {}
        self.restored_records = 0
        self._last_report = time.monotonic()

    @property
    def busy(self) -> bool:
        return bool(self.pending)

    def start(self, partitions: list[int]) -> None:
        """Begin restoring ``partitions``; those already at the changelog end finish at once.

        End offsets are queried before anything is assigned: once the reader fetches, each
        query waits behind the fetches.
        """
        wanted: list[tuple[int, str, TP, int | None]] = []
        for p in partitions:
            for name in self.pipeline.store_names():
                tp = (self.pipeline.changelog_topic(name), p)
                store = self.backend.open(self.pipeline.name, name, p)
                wanted.append((p, name, tp, store.changelog_offset()))
        todo: dict[int, set[TP]] = {p: set() for p in partitions}
        assign: list[tuple[TP, int | None]] = []
        for p, store_name, tp, start in wanted:
            end = self.reader.end_offset(tp, 30.0)
            if start is not None and start > end:  # the changelog was recreated: rebuild
                log.warning("store %s[%d] is ahead of its changelog (%d > %d): rebuilding", store_name, p,
                            start, end)
                self.backend.open(self.pipeline.name, store_name, p).close()
                self.backend.drop(self.pipeline.name, store_name, p)
                start = None
            if (start or 0) >= end:
                continue
            log.info("restoring %s[%d] from offset %s to about %d", store_name, p, start or 0, end)
            self.stores[tp] = store_name
            assign.append((tp, start))
            todo[p].add(tp)
        self.reader.add_all(assign)
        for p, tps in todo.items():
            if tps:
                self.pending[p] = tps
            else:
                self.on_restored(p)

    def step(self, max_records: int = 2_000) -> None:
        """Apply one batch of changelog records; finish the partitions that reached the end."""
        batch: dict[TP, list[tuple[int, bytes, bytes | None]]] = {}
        finished: list[TP] = []
        for item in self.reader.read(max_records, 0.05):
            if item[1] is None:
                finished.append(item[0])
            else:
                tp, offset, key, value = item  # type: ignore[misc]
                batch.setdefault(tp, []).append((offset, key or b"", value))
        for tp, records in batch.items():
            if tp in self.stores:
                store = self.backend.open(self.pipeline.name, self.stores[tp], tp[1])
                self.restored_records += apply_changelog(store, records)
                crash_point("restore_batch")
        for tp in finished:
            self._finish(tp)
        if time.monotonic() - self._last_report >= _PROGRESS_EVERY_S:
            self._last_report = time.monotonic()
            log.info("restore progress: %d records applied, %d partitions pending", self.restored_records,
                     len(self.pending))

    def _finish(self, tp: TP) -> None:
        partition = tp[1]
        todo = self.pending.get(partition)
        if todo is None or tp not in todo:
            return
        todo.discard(tp)
        self.reader.remove(tp)
        self.stores.pop(tp, None)
        if not todo:
            del self.pending[partition]
            self.on_restored(partition)

    def cancel(self, partition: int) -> None:
        """The partition was revoked mid-restore: stop; what was applied stays (with its offset)."""
        for tp in self.pending.pop(partition, set()):
            self.reader.remove(tp)
            self.stores.pop(tp, None)

    def close(self) -> None:
        self.reader.close()
