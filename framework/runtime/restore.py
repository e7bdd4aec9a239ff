"""Restoring a task's stores from their changelogs before the task runs: the Kafka side.

The decisions are the task runner's (``TaskRunner.restore_plan``: where each store
partition continues, and which local state is stale and rebuilt; ``TaskRunner.restore``:
decode-checked batches written with their offset). This module reads: on assignment it
asks the broker for each changelog partition's topic id and offsets, reads the changelogs
(read_committed) from where the plan says, and hands the records over batch by batch. Every
batch is written with its offset in one WriteBatch, so a rebalance or a crash during a
restore loses nothing and the next restore continues where this one stopped. The task's
inputs stay paused meanwhile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from framework.engine.runner import ChangelogInfo, StoreRestore, TaskRunner
from framework.kafka.clients import TP, ChangelogReader

log = logging.getLogger("framework.restore")
_PROGRESS_EVERY_S = 5.0


class Restorer:
    def __init__(self, runner: TaskRunner, reader: ChangelogReader,
                 topic_ids: Callable[[Iterable[str]], dict[str, str]], on_restored: Callable[[int], None]) -> None:
        self.runner, self.reader, self.topic_ids, self.on_restored = runner, reader, topic_ids, on_restored
        self.pending: dict[int, set[TP]] = {}  # partition -> changelog partitions still restoring
        self.items: dict[TP, StoreRestore] = {}
        self.restored_records = 0
        self._last_report = time.monotonic()

    @property
    def busy(self) -> bool:
        return bool(self.pending)

    def start(self, partitions: list[int]) -> None:
        """Begin restoring ``partitions``; those already at the changelog end finish at once.

        Offsets are queried before anything is assigned: once the reader fetches, each
        query waits behind the fetches.
        """
        pipeline = self.runner.pipeline
        topics = [pipeline.changelog_topic(s) for s in pipeline.store_names()]
        ids = self.topic_ids(topics) if topics else {}
        assign: list[tuple[TP, int | None]] = []
        done: list[int] = []
        for p in partitions:
            infos = {}
            for topic in topics:
                start, end = self.reader.offsets((topic, p), 30.0)
                infos[topic] = ChangelogInfo(ids[topic], start, end)
            items = self.runner.restore_plan(p, infos)
            for item in items:
                log.info("restoring %s[%d] from offset %d to about %d", item.store, p, item.start, item.end)
                self.items[item.changelog] = item
                assign.append((item.changelog, item.start))
            if items:
                self.pending[p] = {item.changelog for item in items}
            else:
                done.append(p)
        self.reader.add_all(assign)
        for p in done:
            self.on_restored(p)

    def step(self, max_records: int = 2_000) -> None:
        """Apply one batch of changelog records; finish the partitions that reached the end."""
        batch: dict[TP, list[tuple[int, bytes | None, bytes | None]]] = {}
        finished: list[TP] = []
        for item in self.reader.read(max_records, 0.05):
            if item[1] is None:
                finished.append(item[0])
            else:
                tp, offset, key, value = item  # type: ignore[misc]
                batch.setdefault(tp, []).append((offset, key, value))
        for tp, records in batch.items():
            restore = self.items.get(tp)
            if restore is not None:
                self.restored_records += self.runner.restore(restore, records)
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
        self.items.pop(tp, None)
        if not todo:
            del self.pending[partition]
            self.on_restored(partition)

    def cancel(self, partition: int) -> None:
        """The partition was revoked mid-restore: stop; what was applied stays (with its offset)."""
        for tp in self.pending.pop(partition, set()):
            self.reader.remove(tp)
            self.items.pop(tp, None)

    def close(self) -> None:
        self.reader.close()
