"""Restoring a task's stores from their changelogs before the task runs: the Kafka side.

The decisions are the task runner's (``TaskRunner.restore_plan``: where each store
partition continues, and which local state is stale and rebuilt; ``TaskRunner.restore``:
decode-checked batches written with their offset). This module reads: on assignment it
asks the broker for each changelog partition's topic id and offsets, reads the changelogs
(read_committed) from where the plan says, and hands the records over batch by batch. Every
batch is written with its offset in one WriteBatch, so a rebalance or a crash during a
restore loses nothing and the next restore continues where this one stopped. The task's
inputs stay paused meanwhile.

Progress is reported per store partition (records applied and remaining, rate, ETA): in
``progress()`` for ``/status`` and the metrics, and every few seconds as a log line (a
progress bar instead when the log goes to a terminal).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from framework.engine.runner import ChangelogInfo, StoreRestore, TaskRunner
from framework.kafka.clients import TP, ChangelogReader

log = logging.getLogger("framework.restore")
_MARKER_WAIT_S = 10.0  # the coordinator writes a commit's markers within moments, not seconds
_PROGRESS_EVERY_S = 5.0
_REFRESH_TIMEOUT_S = 5.0  # the changelogs' metadata asked for before a restore's offsets (ChangelogReader.refresh)


class Restorer:
    def __init__(self, runner: TaskRunner, reader: ChangelogReader,
                 topic_ids: Callable[[Iterable[str]], dict[str, str]], on_restored: Callable[[int], None],
                 committed: Committed) -> None:
        self.runner, self.reader, self.topic_ids, self.on_restored = runner, reader, topic_ids, on_restored
        self.committed = committed
        self.tables = table_topics(runner)  # read up to the committed offset, not to their end
        self.pending: dict[int, set[TP]] = {}  # partition -> changelog partitions still restoring
        self.items: dict[TP, StoreRestore] = {}
        self.restored_records = 0
        self.restored_by_store: dict[str, int] = {}
        self.done: dict[TP, tuple[int, int]] = {}  # changelog partition -> (records applied, next offset)
        self.on_progress: Callable[[], None] = lambda: None
        self._last_report = time.monotonic()
        self._reported = 0
        self._bar: _ProgressBar | None = None

    @property
    def busy(self) -> bool:
        return bool(self.pending)

    def start(self, partitions: list[int]) -> None:
        """Begin restoring ``partitions``; those already at the changelog end finish at once.

        Offsets are queried before anything is assigned: once the reader fetches, each
        query waits behind the fetches.
        """
        ids = changelog_ids(self.runner, self.topic_ids)
        self.reader.refresh(ids, _REFRESH_TIMEOUT_S)
        assign: list[tuple[TP, int | None]] = []
        done: list[int] = []
        committed = table_positions(self.runner, self.committed, partitions)
        for p in partitions:
            infos = changelog_infos(self.runner, self.reader, ids, p, committed)
            items = self.runner.restore_plan(p, infos)
            for item in items:
                log.info("restoring %s[%d] from %s, offset %d to about %d", item.store, p, item.changelog[0],
                         item.start, item.end)
                self.items[item.changelog] = item
                self.done[item.changelog] = (0, item.start)
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
        batch: dict[TP, list[tuple[int, bytes | None, bytes | None, int]]] = {}
        finished: list[TP] = []
        for item in self.reader.read(max_records, 0.05):
            if item[1] is None:
                finished.append(item[0])
            else:
                tp, offset, key, value, ts = item  # type: ignore[misc]
                batch.setdefault(tp, []).append((offset, key, value, ts))
        for tp, records in batch.items():
            restore = self.items.get(tp)
            if restore is None:
                continue
            reached = None
            if tp[0] in self.tables:  # a table's own topic: up to the committed offset only
                kept = [r for r in records if r[0] < restore.end]
                if len(kept) < len(records) or (kept and kept[-1][0] + 1 >= restore.end):
                    reached = restore.end
                    finished.append(tp)
                records = kept
            n = self.runner.restore(restore, records, next_offset=reached)
            self.restored_records += n
            self.restored_by_store[restore.store] = self.restored_by_store.get(restore.store, 0) + n
            applied, _ = self.done[tp]
            self.done[tp] = (applied + n, reached or records[-1][0] + 1)
        for tp in finished:
            self._finish(tp)
        if batch or finished:
            self.on_progress()
            self._report()

    def progress(self) -> list[dict[str, Any]]:
        """Per store partition still restoring: records applied and (about) remaining."""
        out = []
        for tp, item in sorted(self.items.items()):
            applied, position = self.done.get(tp, (0, item.start))
            out.append({"store": item.store, "partition": item.partition, "restored": applied,
                        "remaining": max(item.end - position, 0)})
        return out

    def _report(self) -> None:
        """Every few seconds a log line per store partition (or a bar on a terminal)."""
        now = time.monotonic()
        if self._bar is None and _TERMINAL:
            self._bar = _ProgressBar()
        if self._bar is not None:
            self._bar.update(self.progress())
            if not self.pending:
                self._bar.close()
                self._bar = None
            return
        if now - self._last_report < _PROGRESS_EVERY_S:
            return
        rate = (self.restored_records - self._reported) / (now - self._last_report)
        self._last_report, self._reported = now, self.restored_records
        for p in self.progress():
            eta = f", about {p['remaining'] / rate:.0f} s left" if rate > 0 else ""
            log.info("restoring %s[%d]: %d records applied, %d remaining (%.0f records/s over all stores%s)",
                     p["store"], p["partition"], p["restored"], p["remaining"], rate, eta)

    def _finish(self, tp: TP) -> None:
        partition = tp[1]
        todo = self.pending.get(partition)
        if todo is None or tp not in todo:
            return
        todo.discard(tp)
        self.reader.remove(tp)
        item = self.items.pop(tp, None)
        applied = self.done.pop(tp, (0, 0))[0]
        if item is not None:
            log.info("restored %s[%d]: %d records", item.store, partition, applied)
        if not todo:
            del self.pending[partition]
            self.on_restored(partition)

    def cancel(self, partition: int) -> None:
        """The partition was revoked mid-restore: stop; what was applied stays (with its offset)."""
        for tp in self.pending.pop(partition, set()):
            self.reader.remove(tp)
            self.items.pop(tp, None)
            self.done.pop(tp, None)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        self.reader.close()


def changelog_ids(runner: TaskRunner, topic_ids: Callable[[Iterable[str]], dict[str, str]]) -> dict[str, str]:
    """The topic id of each topic the runner's stores restore from (changelogs, and the
    tables' own topics)."""
    pipeline = runner.pipeline
    topics = sorted({pipeline.restore_topic(s) for s in pipeline.store_names()})
    return topic_ids(topics) if topics else {}


# the service group's committed offsets of input partitions, asked in one request (None: none committed)
Committed = Callable[[list[TP]], Mapping[TP, "int | None"]]


def table_positions(runner: TaskRunner, committed: Committed, partitions: Iterable[int]) -> Mapping[TP, int | None]:
    """The group's committed offsets in the topics that tables of ``partitions`` are restored
    from (``table_topics``), in one request: where those restores end."""
    tps = [(topic, p) for topic in sorted(table_topics(runner)) for p in partitions]
    return committed(tps) if tps else {}


def changelog_infos(runner: TaskRunner, reader: ChangelogReader, ids: dict[str, str],
                    partition: int, committed: Mapping[TP, int | None]) -> dict[str, ChangelogInfo]:
    """Each changelog partition of task ``partition`` as it is now, for ``restore_plan``. A
    table read from its own topic ends at the group's committed offset there (``committed``,
    from ``table_positions``): what the service has processed (nothing when nothing is
    committed). Offsets are queried before the reader fetches: once it does, each query waits
    behind the fetches."""
    tables = table_topics(runner)
    infos = {}
    for topic, incarnation in ids.items():
        start, end = reader.offsets((topic, partition), 30.0)
        if topic in tables:
            at = committed.get((topic, partition))
            end = start if at is None else min(max(at, start), end)
        infos[topic] = ChangelogInfo(incarnation, start, end)
    _await_markers(runner, reader, partition, infos)
    return infos


def table_topics(runner: TaskRunner) -> set[str]:
    """The topics that tables of the runner's pipeline restore from (no changelog of their own)."""
    pipeline = runner.pipeline
    return {pipeline.restore_topic(s) for s in pipeline.store_names() if pipeline.table_source(s) is not None}


def _await_markers(runner: TaskRunner, reader: ChangelogReader, p: int, infos: dict[str, ChangelogInfo]) -> None:
    """Local state a step past its changelog's read_committed end is usually not ahead: the
    transaction that wrote it committed, but its commit markers, which the coordinator
    writes after the commit returned, are not in the log yet (a task handed straight back
    to the member that just committed it). While the log itself (its high watermark)
    reaches the local offset, ask again for the end, for up to ``_MARKER_WAIT_S``; only
    what is still ahead then is truncation, and rebuilt."""
    deadline = time.monotonic() + _MARKER_WAIT_S
    backoff = 0.01
    while True:
        ahead = runner.ahead_of_changelog(p, infos)
        waiting = {t: o for t, o in ahead.items() if reader.high_watermark((t, p), 30.0) >= o}
        if not waiting or time.monotonic() > deadline:
            return
        time.sleep(backoff)  # the markers are on their way: nothing to wait on but the log
        backoff = min(backoff * 2, 0.5)
        for topic in waiting:
            start, end = reader.offsets((topic, p), 30.0)
            infos[topic] = ChangelogInfo(infos[topic].incarnation, start, end)


_TERMINAL = sys.stderr.isatty()


class _ProgressBar:
    """Restore progress on a terminal: one rich bar per store partition, with rate and ETA."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            ProgressColumn,
            TextColumn,
            TimeRemainingColumn,
        )
        from rich.text import Text

        class Rate(ProgressColumn):
            def render(self, task: Any) -> Text:
                return Text(f"{task.speed or 0:,.0f} records/s")

        self.progress = Progress(TextColumn("restoring {task.description}"), BarColumn(), MofNCompleteColumn(),
                                 Rate(), TimeRemainingColumn(), console=Console(stderr=True), transient=True,
                                 auto_refresh=False)
        self.tasks: dict[tuple[str, int], Any] = {}
        self.progress.start()
        self._refreshed = 0.0

    def update(self, items: list[dict[str, Any]]) -> None:
        for p in items:
            key = (p["store"], p["partition"])
            total = p["restored"] + p["remaining"]
            if key not in self.tasks:
                self.tasks[key] = self.progress.add_task(f"{p['store']}[{p['partition']}]", total=total)
            self.progress.update(self.tasks[key], completed=p["restored"], total=total)
        now = time.monotonic()
        if now - self._refreshed >= 0.1:
            self._refreshed = now
            self.progress.refresh()

    def close(self) -> None:
        self.progress.stop()
