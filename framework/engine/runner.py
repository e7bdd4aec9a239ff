"""The task runner: the one place where tasks are made, fed, checkpointed and restored.

Every engine drives its tasks through a ``TaskRunner`` and keeps only its own I/O: the Kafka
runtime a consumer and a transactional producer, the TestDriver in-memory topics, the Spark
replay the records of a Spark partition. What an engine hands the runner:

- records, in batches (``process``), then ``end_batch``: watermarks go downstream;
- wall-clock ticks (``tick``): idleness, processing-time timers, periodic watermarks;
- checkpoints (``checkpoint``), through a ``CheckpointSink`` that makes the interval's
  outputs, changelog records and input positions durable together;
- restores: ``restore_plan`` says where each store partition of a task continues its
  changelog (rebuilding it when its local state is stale), ``restore`` applies changelog
  records, ``start`` runs the task.

Dead letters and skips (``Task.record_failed``), counters, the checkpoint's steps and the
restore's decisions exist once, here.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from framework.engine.calls import InlineCalls
from framework.engine.context import InputRecord, Output
from framework.engine.globals import GlobalTables
from framework.engine.skips import SkipList
from framework.engine.task import Handler, Task
from framework.errors import RecordCoordinates, RecordError, StateError
from framework.operators.async_io import HOLD, Calls
from framework.operators.table import rebuild_table
from framework.pipeline.definition import Pipeline
from framework.serde.values import ValueCodec
from framework.state.base import STATE_FORMAT, StoreBackend, StorePartition
from framework.state.cache import CachedPartition

log = logging.getLogger("framework.runner")


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000

TP = tuple[str, int]
Fault = Callable[[str], None]
"""Called at each named point of a checkpoint (``after_changelogs``, ``after_commit``,
``after_state_write``) and restore (``restore_batch``): crash tests stop there."""


def _no_fault(point: str) -> None:
    pass


class CheckpointSink(Protocol):
    """Where an engine makes a checkpoint durable (a Kafka transaction, in-memory topics)."""

    def commit(self, positions: Mapping[TP, int]) -> Mapping[TP, int]:
        """Make everything produced since the last commit (outputs, changelog records) and
        ``positions`` (the next input offset of each running task's partitions) durable
        together, atomically; return the next offset of every changelog partition written."""
        ...


@dataclass(frozen=True, slots=True)
class ChangelogInfo:
    """A changelog partition as the engine sees it now: its incarnation (Kafka's topic id;
    a topic deleted and created again has a new one) and its first and next offsets."""

    incarnation: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class StoreRestore:
    """One store partition to bring up to date: read ``changelog`` from ``start`` to ``end``."""

    partition: int
    store: str
    changelog: TP
    start: int
    end: int


class TaskRunner:
    """The tasks of one process (or TestDriver, or Spark partition) of a service."""

    def __init__(self, pipeline: Pipeline, backend: StoreBackend, output: Output, *, partitions: int,
                 now_ms: Callable[[], int] | None = None, fail_on_error: bool = False,
                 skips: SkipList | None = None, fault: Fault = _no_fault, calls: Calls | None = None) -> None:
        pipeline.validate()
        self.pipeline = pipeline
        self.backend = backend
        self.output = output
        self.partitions = partitions  # the service's task count: partitions of its internal topics
        self.now_ms = now_ms
        self.fail_on_error = fail_on_error
        self.skips = skips  # what a failing record under on_error=fail may be skipped by (framework.engine.skips)
        self.fault = fault
        self.codec = ValueCodec(pipeline.types)
        self.globals = GlobalTables(pipeline, backend, self.codec, now_ms or _wall_ms)
        # where async steps' calls run: the engine's (a thread of its own live), else each in turn
        self.calls: Calls | None = calls or (InlineCalls() if pipeline.async_steps() else None)
        self.tasks: dict[int, Task] = {}
        self.routes: dict[TP, tuple[Handler, Task, list[int]]] = {}
        self.records = 0  # processed, over the runner's life (not rolled back by aborts)
        self.consumed: dict[TP, list[int]] = {}  # processed per input partition, the same way
        self.held: dict[TP, list[InputRecord]] = {}  # handed over, not processed yet (``process``)
        self.full: set[TP] = set()  # the held partitions whose async step was full at the last pass
        self.in_hand: InputRecord | None = None  # the record being processed, for a watchdog
        self._alarm = _Alarm()
        self._closed_counters: dict[str, int] = {}

    # -- tasks -----------------------------------------------------------------------------

    def _new_task(self, partition: int) -> Task:
        return Task(self.pipeline, partition, self.backend, self.output, codec=self.codec,
                    partitions=self.partitions, now_ms=self.now_ms, fail_on_error=self.fail_on_error,
                    skips=self.skips, globals=self.globals, calls=self.calls)

    def start(self, partition: int) -> Task:
        """Run the task of ``partition`` from its stores as they are (restored, or new)."""
        task = self.tasks[partition] = self._new_task(partition)
        for topic in task.handlers:
            cell = self.consumed.setdefault((topic, partition), [0])
            self.routes[(topic, partition)] = (task.handlers[topic], task, cell)
        return task

    def stop(self, partition: int) -> None:
        """Close the task (its uncommitted writes are dropped; checkpoint first to keep them)."""
        task = self.tasks.pop(partition, None)
        if task is None:
            return
        for topic in task.handlers:
            self.routes.pop((topic, partition), None)
            self.held.pop((topic, partition), None)  # the next owner reads them from the committed position
        self._fold_counters(task)
        task.close()

    def running(self, tp: TP) -> bool:
        return tp in self.routes

    def close(self) -> None:
        for partition in list(self.tasks):
            self.stop(partition)
        self.globals.close()
        self._alarm.close()
        if self.calls is not None:
            self.calls.close()

    # -- global tables ---------------------------------------------------------------------

    def apply_global(self, records: Sequence[InputRecord]) -> int:
        """Records of the global tables' topics (any partition, in each one's order): into
        the tables; joins waiting for them release what the tables' watermarks now cover.
        Returns how many were applied."""
        return self.globals.apply(records)

    # -- records ---------------------------------------------------------------------------

    def process(self, records: Sequence[InputRecord], unrouted: Callable[[InputRecord], None] | None = None,
                failed: Callable[[InputRecord], None] | None = None, *, until: float = math.inf) -> int:
        """The hot loop: each record through its task's compiled handler; a record error goes
        to the dead-letter topic (or is raised, with ``fail_on_error``, unless ``skips`` names
        the record: ``Task.record_failed``). ``unrouted`` gets the first record of each
        partition without a running task (the engine fetches from there again), ``failed`` the
        consumer's error records. Returns how many records were
        processed (watermark records excluded).

        Time bounds the work, not the batch: once the monotonic clock passes ``until`` (the
        next checkpoint is due) after a record, the rest is *held*, each partition's records in
        order, and processed first by the next call. A checkpoint meanwhile commits a held
        partition's position at its first held record (``checkpoint``), so the deadline is
        kept however slow a step is, within about one record's time."""
        self._alarm.set(until)
        self.full = set()
        n = self._process_held(records, unrouted, failed, until) if self.held else \
            self._run(records, unrouted, failed, until)
        if self.calls is not None:
            self.calls.flush()  # the batch's calls start together
            if self.held:
                n += self._wait_for_room(unrouted, failed, until)
        return n

    def _wait_for_room(self, unrouted: Callable[[InputRecord], None] | None,
                       failed: Callable[[InputRecord], None] | None, until: float) -> int:
        """Records wait whose async steps are full: as calls complete, their results go out and
        the held records go in, until none is held or the deadline passes."""
        calls, n = self.calls, 0
        assert calls is not None
        while self.held and (left := until - time.monotonic()) > 0:
            calls.wait(min(left, 1.0))
            calls.dispatch()
            n += self._process_held([], unrouted, failed, until)
        return n

    def _run(self, records: Sequence[InputRecord], unrouted: Callable[[InputRecord], None] | None,
             failed: Callable[[InputRecord], None] | None, until: float, one_partition: bool = False) -> int:
        """``records`` in order (``one_partition``: all of one partition, as its held ones are:
        once its async step is full, the rest is held at once, without asking the step each)."""
        routes, due, n, held = self.routes, self._alarm.due, 0, self.held
        skipped: set[TP] = set()
        cut = None  # the record after which the deadline passed, or the one a full step did not take
        try:
            for msg in records:
                if msg.error() is not None:
                    if failed is not None:
                        failed(msg)
                    continue
                tp = (msg.topic(), msg.partition())
                route = routes.get(tp)
                if route is None:
                    if unrouted is not None and tp not in skipped:
                        skipped.add(tp)  # fetched again from its first record: the later ones come with it
                        unrouted(msg)
                    continue
                handler, task, cell = route
                self.in_hand = msg
                try:
                    taken_up = handler(msg)
                    if not taken_up:
                        n += 1
                        cell[0] += 1
                    elif taken_up is HOLD:  # its async step is full: it waits (and so does every later
                        held.setdefault(tp, []).append(msg)  # record of its partition: the step stays full)
                        self.full.add(tp)
                        if one_partition:
                            cut = msg
                            break
                    # else True: a watermark control record, not a record
                except RecordError as err:  # dead-lettered, or raised (on_error=fail) unless skipped
                    task.record_failed(msg, err)
                    n += 1
                    cell[0] += 1
                if due[0]:  # the deadline passed (``_Alarm``): the rest waits for the next call
                    cut = msg
                    break
        finally:
            self.in_hand = None
            self.records += n
        if cut is not None:
            # found by identity: ``records.index`` compares records with ``==``, and a
            # confluent-kafka Message compares by copying both, headers decoded: a header name
            # that is not UTF-8 leaves its error pending there, to surface later anywhere
            rest = records[next(i for i, r in enumerate(records) if r is cut) + 1:]
            place = held.get((cut.topic(), cut.partition())) if one_partition else None
            if place is not None:
                place.extend(rest)  # its partition's: behind the ones it holds already
            elif rest:
                self._hold(rest, unrouted, failed, skipped)
        return n

    def _process_held(self, records: Sequence[InputRecord], unrouted: Callable[[InputRecord], None] | None,
                      failed: Callable[[InputRecord], None] | None, until: float) -> int:
        """Each partition's held records first, then ``records`` (those of a partition that
        still holds some go after them)."""
        held, self.held, n = self.held, {}, 0
        self.full = set()
        for tp, msgs in held.items():
            if time.monotonic() >= until:  # the deadline passed: hold the rest as it was
                self.held.setdefault(tp, []).extend(msgs)
            else:
                n += self._run(msgs, unrouted, failed, until, one_partition=True)
        if self.held:
            fresh = []
            for msg in records:
                waiting = self.held.get((msg.topic(), msg.partition()))
                if waiting is None:
                    fresh.append(msg)
                else:
                    waiting.append(msg)
            records = fresh
            if time.monotonic() >= until:
                self._hold(records, unrouted, failed, set())
                return n
        return n + self._run(records, unrouted, failed, until)

    def _hold(self, records: Sequence[InputRecord], unrouted: Callable[[InputRecord], None] | None,
              failed: Callable[[InputRecord], None] | None, skipped: set[TP]) -> None:
        for msg in records:
            if msg.error() is not None:
                if failed is not None:
                    failed(msg)
                continue
            tp = (msg.topic(), msg.partition())
            if tp in self.routes:
                self.held.setdefault(tp, []).append(msg)
            elif unrouted is not None and tp not in skipped:
                skipped.add(tp)
                unrouted(msg)

    @property
    def held_records(self) -> int:
        """Records handed to ``process`` and not processed yet (held past a deadline)."""
        return sum(len(msgs) for msgs in self.held.values())

    def end_batch(self) -> bool:
        """The end of a consumed batch: each task sends its watermarks downstream if they
        moved. True when something was produced."""
        sent = False
        for task in self.tasks.values():
            sent = task.flush_watermarks() or sent
        return sent

    def tick(self) -> bool:
        """Wall-clock work of every task. True when a checkpoint has something to commit."""
        self.globals.tick()
        dirty = False
        for task in self.tasks.values():
            dirty = task.tick() or dirty
        return dirty

    # -- async steps (framework.operators.async_io) ----------------------------------------

    def complete(self) -> bool:
        """Hand the async steps the calls that completed: their results go downstream (in the
        open interval). True when there were any."""
        return self.calls is not None and self.calls.dispatch() > 0

    def settle(self, timeout_s: float = math.inf) -> bool:
        """Wait, at most ``timeout_s``, until no async step of any task has a record in flight
        (a Spark task before it commits a batch's outputs; a member that stops); whether none
        has."""
        calls = self.calls
        if calls is None:
            return True
        deadline = time.monotonic() + timeout_s
        while any(op.pending for task in self.tasks.values() for op in task.ctx.async_operators):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            calls.wait(min(left, 1.0))
            calls.dispatch()
        return True

    def in_flight(self) -> dict[str, int]:
        """Records in flight per async step, over the running tasks."""
        out: dict[str, int] = {}
        for task in self.tasks.values():
            for op in task.ctx.async_operators:
                out[op.name] = out.get(op.name, 0) + op.pending
        return out

    def take_call_latencies(self) -> dict[str, list[float]]:
        """The seconds of each call attempt since the last time, per async step."""
        out: dict[str, list[float]] = {}
        for task in self.tasks.values():
            for op in task.ctx.async_operators:
                if op.latencies:
                    out.setdefault(op.name, []).extend(op.latencies)
                    op.latencies = []
        return out

    # -- checkpoint ------------------------------------------------------------------------

    def checkpoint(self, positions: Mapping[TP, int], sink: CheckpointSink) -> int:
        """The checkpoint procedure (docs/architecture.md, section 5), engine side:

        1. every task's write cache to its changelogs (outputs were produced already);
        2. ``sink.commit``: outputs, changelog records and input positions durable at once;
        3. every store's changes and changelog offset to the backend, one batch per store.

        ``positions`` may name any partitions; only the running tasks' are committed, a
        partition with held records (``process``) at its first one. Returns the number of
        changelog records. An exception from the sink leaves the interval uncommitted:
        ``abort`` (or ``discard``) then drops its writes.
        """
        self.complete()  # what completed goes out in this interval; what is in flight is stored
        mine = {tp: o for tp, o in positions.items() if tp in self.routes}
        for tp, msgs in self.held.items():
            mine[tp] = msgs[0].offset()
        n = 0
        for p, task in self.tasks.items():
            n += task.produce_changelogs({f"{t}[{q}]": o for (t, q), o in mine.items() if q == p})
        self.fault("after_changelogs")
        ends = sink.commit(mine)
        self.fault("after_commit")
        for p, task in self.tasks.items():
            task.commit_state({t: o for (t, q), o in (*mine.items(), *ends.items()) if q == p})
        self.globals.commit()  # not transactional: the table and where it continues its topic
        self.fault("after_state_write")
        return n

    def abort(self) -> None:
        """After an aborted checkpoint: every task again as of the last one (state, clock,
        timers); the engine rewinds its inputs to the committed positions."""
        self.held.clear()
        self.full.clear()
        for partition, task in list(self.tasks.items()):
            task.ctx.close()  # its calls in flight are cancelled; the new task calls again what is stored
            task.discard_state()
            self._fold_counters(task)
            self.start(partition)  # over the same store partitions, as of the last checkpoint

    def discard(self) -> None:
        """The engine is stopping on an error: drop every uncommitted write."""
        self.held.clear()
        for task in self.tasks.values():
            task.discard_state()

    # -- restore ---------------------------------------------------------------------------

    def ahead_of_changelog(self, partition: int, changelogs: Mapping[str, ChangelogInfo]) -> dict[str, int]:
        """The changelog topics of task ``partition`` whose local state says it continues past
        their end (``changelogs``: by topic name), with the offset it continues at."""
        out = {}
        for store in self.pipeline.changelogged_stores():  # a table's own topic ends at the committed offset
            topic = self.pipeline.changelog_topic(store)
            part = self.backend.open(self.pipeline.name, store, partition)
            offset = part.changelog_offset()
            info = changelogs[topic]
            if offset is not None and offset > info.end and part.changelog_id() == info.incarnation:
                out[topic] = offset
        return out

    def restore_plan(self, partition: int, changelogs: Mapping[str, ChangelogInfo], *,
                     current: bool = False) -> list[StoreRestore]:
        """Where each store partition of task ``partition`` continues reading its changelog
        (``changelogs``: by topic name; a table read from its own topic reads that topic, up
        to the group's committed offset). Local state that does not reflect the changelog as it
        is now (another incarnation, past its end, before its start, another state format) is
        deleted and rebuilt from the changelog's start: it is never merged. Store partitions
        already at the end are left out, unless ``current`` (a standby tails every store)."""
        out = []
        for store in self.pipeline.store_names():
            topic = self.pipeline.restore_topic(store)
            info = changelogs[topic]
            part = self.backend.open(self.pipeline.name, store, partition)
            stale = _stale(part, info, topic != self.pipeline.changelog_topic(store))
            if stale is not None:
                log.warning("store %s[%d] %s: deleting it and rebuilding it from %s", store, partition, stale, topic)
                part.close()
                self.backend.drop(self.pipeline.name, store, partition)
                part = self.backend.open(self.pipeline.name, store, partition)
            if part.changelog_id() is None:  # new: it will reflect this incarnation
                part.write_batch({}, None, info.incarnation)
            offset = part.changelog_offset()
            start = info.start if offset is None else offset
            if start < info.end or current:
                out.append(StoreRestore(partition, store, (topic, partition), start, info.end))
        return out

    def restore(self, item: StoreRestore, records: Iterable[tuple[int, bytes | None, bytes | None, int]],
                next_offset: int | None = None) -> int:
        """Apply ``(offset, key, value, timestamp)`` changelog records of ``item`` in one batch
        with the next offset (``next_offset`` when the reader is past the last record: a
        transaction's commit marker holds an offset too). Every value is decoded first: a
        record the state encoding cannot read stops the restore with its coordinates; nothing
        of the batch is applied. A table read from its own topic applies the topic's records
        as its step does (``rebuild_table``)."""
        records = list(records)
        source = self.pipeline.table_source(item.store)
        part = self.backend.open(self.pipeline.name, item.store, item.partition)
        if source is not None:
            cache = CachedPartition(part, self.codec, item.store)
            rebuild_table(self.pipeline.steps[item.store], source, cache, records)  # type: ignore[arg-type]
            changes = cache.changes()
        else:
            changes = self._changelog_changes(item, records)
        if records or next_offset is not None:
            last = records[-1][0] if records else -1
            part.write_batch(changes, max(last + 1, next_offset or 0))
            self.fault("restore_batch")
        return len(records)

    def _changelog_changes(self, item: StoreRestore,
                           records: list[tuple[int, bytes | None, bytes | None, int]]) -> dict[bytes, bytes | None]:
        topic, partition = item.changelog
        checked = checked_changelog(self.pipeline.name, item.store, topic, partition, records, self.codec.decode)
        return {key: value for _offset, key, value in checked}

    # -- inspection ------------------------------------------------------------------------

    def dump(self, partition: int) -> dict[str, dict[bytes, Any]]:
        """Every entry of every store of a running task, decoded (``Task.dump``)."""
        return self.tasks[partition].dump()

    def metrics(self) -> dict[str, int]:
        """Counters over the runner's tasks (closed ones included): ``records``,
        ``dead_letters``, ``late_records.<step>``; and a global table's ``skipped_records``,
        ``late_records`` and ``expired_records`` (``.<table>``), the process's own."""
        total = dict(self._closed_counters)
        total["records"] = self.records
        total.setdefault("dead_letters", 0)
        for task in self.tasks.values():
            _add(total, task.counters())
        for table in self.globals.tables.values():
            _add(total, table.counters)
        return total

    def consumed_by_topic(self) -> dict[str, int]:
        """Records processed per input topic over the runner's life (``records``, split)."""
        out: dict[str, int] = {}
        for (topic, _), cell in self.consumed.items():
            out[topic] = out.get(topic, 0) + cell[0]
        return out

    def _fold_counters(self, task: Task) -> None:
        _add(self._closed_counters, task.counters())


class _Alarm:
    """``due[0]`` turns true once the monotonic clock passes the deadline set last: the hot loop
    looks at a list cell after each record, not at the clock (about 50 ns a record). A thread
    of its own keeps the time; it starts at the first finite deadline and fires within the
    interpreter's switch interval (5 ms) of it."""

    def __init__(self) -> None:
        self.due = [False]
        self._until = math.inf
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def set(self, until: float) -> None:
        self.due[0] = time.monotonic() >= until
        if self._thread is None:
            if until == math.inf:
                return
            self._thread = threading.Thread(target=self._keep_time, name="fw-deadline", daemon=True)
            self._thread.start()
        with self._cond:
            self._until = until
            self._cond.notify()

    def _keep_time(self) -> None:
        with self._cond:
            while not self._closed:
                left = self._until - time.monotonic()
                if left <= 0:
                    self.due[0] = True
                    self._until = math.inf
                    continue
                self._cond.wait(None if left == math.inf else left)

    def close(self) -> None:
        if self._thread is not None:
            with self._cond:
                self._closed = True
                self._cond.notify()
            self._thread.join(5)


def _add(total: dict[str, int], counters: Mapping[str, int]) -> None:
    for name, n in counters.items():
        total[name] = total.get(name, 0) + n


def _stale(part: StorePartition, info: ChangelogInfo, table: bool) -> str | None:
    """Why a store partition's local state cannot continue from ``info`` (``table``: a
    table's own topic, read up to the group's committed offset), or None."""
    offset, incarnation = part.changelog_offset(), part.changelog_id()
    if offset is None and incarnation is None:
        return None  # new, or never written: nothing to keep
    if part.state_format() != STATE_FORMAT:
        return f"holds state format {part.state_format()}, not {STATE_FORMAT}"
    if incarnation != info.incarnation:
        return (f"reflects another incarnation of its changelog (topic id {incarnation}, now {info.incarnation}: "
                "the topic was deleted and created again)")
    if offset is not None and offset > info.end and table:
        return (f"is ahead of the group's committed offset in its topic ({offset} > {info.end}: the group's "
                "offsets were moved back)")
    if offset is not None and offset > info.end:
        return f"is ahead of its changelog (offset {offset} > end {info.end}: the changelog was truncated)"
    if offset is not None and offset < info.start:
        return f"continues at offset {offset}, before the changelog's first offset {info.start} (records were deleted)"
    return None


def checked_changelog(service: str, store: str, topic: str, partition: int,
                      records: Iterable[tuple[int, bytes | None, bytes | None, int]],
                      decode: Callable[[bytes], Any]) -> Iterator[tuple[int, bytes, bytes | None]]:
    """``(offset, key, value)`` of changelog records ``(offset, key, value, timestamp)``, each
    value decoded first: a record the state encoding cannot read stops the reading with its
    coordinates (``unreadable_changelog_record``). A restore and a savepoint made with Spark
    read changelogs through it."""
    for offset, key, value, _ts in records:
        try:
            if key is None:
                raise ValueError("a changelog record needs a key")
            if value is not None:
                decode(value)
        except ValueError as exc:
            raise unreadable_changelog_record(service, store, topic, partition, offset, key, exc) from None
        yield offset, key, value


def unreadable_changelog_record(service: str, store: str, topic: str, partition: int, offset: int,
                                key: bytes | None, exc: Exception) -> StateError:
    """The error of a changelog record the state encoding cannot read: where it is, and the
    fix. A restore stops at it (``TaskRunner.restore``), as a savepoint made with Spark does."""
    where = RecordCoordinates(topic, partition, offset, key)
    return StateError(
        f"{where}: cannot restore store {store!r} of service {service!r}: {exc}. "
        f"Fix: only the service writes its changelogs; remove this record (produce a tombstone for "
        f"its key, or delete the topic {topic!r} and the service's local state, then reprocess the "
        "input), and check who else can write to the topic")
