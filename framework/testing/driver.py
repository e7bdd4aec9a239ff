"""TestDriver: run a pipeline without a broker, deterministically, for users' unit tests.

It drives the same task runner as the Kafka runtime (``framework.engine.runner``), over
in-memory topics with read-committed semantics: records a task produces become visible (to
``output`` and to the steps after a ``key_by``) when a checkpoint commits. By default every
``pipe`` ends with a checkpoint, as Kafka Streams' TopologyTestDriver commits after each
record; with ``auto_checkpoint=False`` a ``crash()`` discards everything since the last
``checkpoint()``, restores the state exactly as a restarted service does (from the stored
changelog offset, or from the start when the local state is lost), and re-processes the
uncommitted input. ``restart(pipeline)`` does the same after a clean stop, with a changed
pipeline if given: an upgrade. With ``on_error="fail"`` a record error stops the call that
processes it, as it stops a member; ``skip`` names a record in the skip list as ``fw group
skip`` does (``framework.engine.skips``), and ``crash()`` then starts again from the last
checkpoint, as the member's restart does.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from framework.engine.calls import DeferredCalls, InlineCalls
from framework.engine.partitioner import partition_for
from framework.engine.record import Record
from framework.engine.runner import ChangelogInfo, TaskRunner
from framework.engine.skips import Skip, SkipList
from framework.engine.task import Task
from framework.errors import PipelineError
from framework.headers import VALUE_ENCODING, dead_letter_value
from framework.operators.table import TABLE_PREFIX, latest
from framework.operators.table import as_of as table_as_of
from framework.pipeline import steps as S
from framework.pipeline.definition import Pipeline, Topic
from framework.records import Headers
from framework.state.keys import keyed, state_prefix
from framework.state.memory import MemoryBackend
from framework.testing.piped import epoch_ms, raw, serialized
from framework.time.clock import WATERMARK_HEADER
from framework.time.timers import list_timers

TP = tuple[str, int]
CrashPoint = Literal["after_changelogs", "after_commit", "after_state_write"]


@dataclass(frozen=True)
class TestRecord:
    """A record read from an output topic, decoded with that topic's serdes."""

    __test__ = False  # not a pytest test class

    key: Any
    value: Any
    timestamp: int
    partition: int
    offset: int
    headers: tuple[tuple[str, bytes], ...] = ()


def _is_control(m: Record) -> bool:
    return m.key() is None and m.value() is None and any(h == WATERMARK_HEADER for h, _ in m.headers() or ())


def _letter_value(m: Record) -> Any:
    encoding = dict(m.headers() or ()).get(VALUE_ENCODING)
    return dead_letter_value(m.value(), None if encoding is None else encoding.decode())


def _decoded(decode: Callable[[bytes], Any], data: bytes | None) -> Any:
    return None if data is None else decode(data)


class _Topics:
    """In-memory topics: committed logs plus the pending records of the open transaction.
    Each topic has an incarnation id, new when the topic is deleted and created again."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.logs: dict[str, list[list[Record]]] = {}
        self.ids: dict[str, str] = {}
        self.pending: list[tuple[str, int, bytes | None, bytes | None, int, Headers]] = []
        self._round_robin = itertools.count()

    def log(self, topic: str) -> list[list[Record]]:
        log = self.logs.get(topic)
        if log is None:
            log = self.logs[topic] = [[] for _ in range(self.partitions)]
            self.ids[topic] = uuid.uuid4().hex
        return log

    def delete(self, topic: str) -> None:
        self.logs.pop(topic, None)
        self.ids.pop(topic, None)

    def info(self, topic: str, partition: int) -> ChangelogInfo:
        end = len(self.log(topic)[partition])
        return ChangelogInfo(self.ids[topic], 0, end)

    def produce(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int,
                headers: Headers = None, partition: int | None = None) -> None:
        if partition is None:
            partition = (partition_for(key, self.partitions) if key is not None
                         else next(self._round_robin) % self.partitions)
        self.pending.append((topic, partition, key, value, timestamp, headers))

    def produce_changelog(self, topic: str, partition: int, key: bytes, value: bytes | None,
                          headers: Headers) -> None:
        self.produce(topic, key, value, 0, headers, partition)

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
               timestamp: int, headers: Headers) -> Record:
        part = self.log(topic)[partition]
        msg = Record(topic, partition, len(part), key, value, timestamp, headers)
        part.append(msg)
        return msg

    def commit(self) -> dict[TP, int]:
        """Make pending records visible; returns the next offset per written partition."""
        ends: dict[TP, int] = {}
        for topic, p, k, v, ts, h in self.pending:
            ends[(topic, p)] = self.append(topic, p, k, v, ts, h).offset() + 1
        self.pending = []
        return ends

    def abort(self) -> None:
        self.pending = []


class _Crash(Exception):
    """The simulated process died at a checkpoint step."""


class _Commit:
    """The driver's checkpoint sink: the open transaction's records and the input positions
    become visible together."""

    def __init__(self, driver: TestDriver) -> None:
        self.driver = driver

    def commit(self, positions: Mapping[TP, int]) -> Mapping[TP, int]:
        ends = self.driver.topics.commit()
        self.driver.committed.update(positions)
        return ends


class TestDriver:
    """Pipe records in, read outputs, inspect state, checkpoint, crash and restore."""

    __test__ = False

    def __init__(self, pipeline: Pipeline, *, partitions: int = 1, auto_checkpoint: bool = True,
                 wall_clock_ms: int = 0, calls: Literal["inline", "deferred"] = "inline",
                 fakes: Mapping[str, Any] | None = None,
                 on_error: Literal["dead_letter", "fail"] = "dead_letter") -> None:
        """``calls``: how async steps' calls run. ``"inline"``: each to its end when it is made,
        so outputs come in input order, deterministically; ``"deferred"``: they wait until
        ``complete_calls()``, so a test can checkpoint, crash and restore with records in
        flight. ``fakes``: a function per async step name to call instead of the step's own (a
        fake client). ``on_error``: as ``processing.on_error``; ``"fail"`` raises a record's
        error (a ``RecordError`` naming it) from the call that processed it, unless ``skip``
        named the record."""
        self.partitions = partitions
        self.auto_checkpoint = auto_checkpoint
        self.wall_clock_ms = wall_clock_ms  # the tasks' processing time; moves only by advance_wall_clock
        self.topics = _Topics(partitions)
        self.backend = MemoryBackend()
        self.positions: dict[TP, int] = {}
        self.committed: dict[TP, int] = {}
        self._deferred, self._fakes = calls == "deferred", dict(fakes or {})
        self.fail_on_error = on_error == "fail"
        self.skips = SkipList()
        self._start(pipeline)

    def _start(self, pipeline: Pipeline, crash_at: str | None = None) -> None:
        """A new process: a runner whose tasks restore their stores as a service's do."""
        self.pipeline = pipeline
        self.inputs = pipeline.input_topics()
        self._crash_at = crash_at
        self.calls = DeferredCalls(self._fakes) if self._deferred else InlineCalls(self._fakes)
        self.runner = TaskRunner(pipeline, self.backend, self.topics, partitions=self.partitions,
                                 now_ms=lambda: self.wall_clock_ms, fail_on_error=self.fail_on_error,
                                 skips=self.skips, fault=self._fault, calls=self.calls)
        for p in range(self.partitions):
            changelogs = {}
            for store in self.pipeline.store_names():
                topic = self.pipeline.restore_topic(store)
                info = changelogs[topic] = self.topics.info(topic, p)
                if self.pipeline.table_source(store) is not None:  # its own topic, as far as committed
                    changelogs[topic] = ChangelogInfo(info.incarnation, 0, self.committed.get((topic, p), 0))
            for item in self.runner.restore_plan(p, changelogs):
                log = self.topics.log(item.changelog[0])[p]
                self.runner.restore(item, ((m.offset(), m.key(), m.value(), m.timestamp()[1])
                                           for m in log[item.start:item.end]))
            self.runner.start(p)
        for table in self.runner.globals.tables.values():  # read whole again from where its store left off
            table.set_partitions(self.partitions)
            topic = table.step.topic.name
            for p, part in enumerate(self.topics.log(topic)):
                self.runner.apply_global(part[table.positions.get(p, 0):])
                self.positions[(topic, p)] = len(part)

    @property
    def tasks(self) -> list[Task]:
        """The running tasks, by partition."""
        return [self.runner.tasks[p] for p in range(self.partitions)]

    def _fault(self, point: str) -> None:
        if point == self._crash_at:
            raise _Crash(point)

    # -- input ---------------------------------------------------------------------------

    def _source(self, topic: str) -> Topic:
        read: list[Topic] = [s.topic for s in self.pipeline.sources()] + [g.topic for g in self.pipeline.global_tables()]
        for t in read:
            if t.name == topic:
                return t
        names = [t.name for t in read]
        raise PipelineError(f"{topic!r} is not a source of pipeline {self.pipeline.name!r}; sources: {names}")

    def pipe(self, topic: str, value: Any, *, key: Any = None, timestamp: int | datetime = 0,
             headers: Headers = None, partition: int | None = None) -> None:
        """Produce one record to a source topic (with its serdes) and process it. ``timestamp``:
        milliseconds since the epoch, or a ``datetime`` (a naive one is UTC). A key or value its
        serde refuses, or another kind of timestamp, is a ``UsageError`` naming them."""
        self._pipe("pipe", topic, value, key, timestamp, headers, partition)

    def _pipe(self, call: str, topic: str, value: Any, key: Any, timestamp: int | datetime, headers: Headers,
              partition: int | None) -> None:
        t = self._source(topic)
        ts = epoch_ms(call, topic, timestamp)
        kb = None if key is None else serialized(call, topic, "key", key, t.key_serde.bind(topic, True))
        vb = None if value is None else serialized(call, topic, "value", value, t.value_serde.bind(topic, False))
        self._append(call, topic, vb, kb, ts, headers, partition)
        self.run()

    def pipe_raw(self, topic: str, value: bytes | None, *, key: bytes | None = None, timestamp: int | datetime = 0,
                 headers: Headers = None, partition: int | None = None) -> None:
        """Produce one record of raw bytes (e.g. malformed input) to a source topic and process
        it; a key or value that is not bytes (or None) is a ``UsageError``."""
        self._source(topic)
        self._append("pipe_raw", topic, value, key, timestamp, headers, partition)
        self.run()

    def append(self, topic: str, value: bytes | None, *, key: bytes | None = None, timestamp: int | datetime = 0,
               headers: Headers = None, partition: int | None = None) -> None:
        """Append raw bytes to any topic (a source, a repartition or changelog topic) without
        processing: what another producer could write there."""
        self._append("append", topic, value, key, timestamp, headers, partition)

    def _append(self, call: str, topic: str, value: Any, key: Any, timestamp: int | datetime, headers: Headers,
                partition: int | None) -> None:
        value, key = raw(call, topic, "value", value), raw(call, topic, "key", key)
        ts = epoch_ms(call, topic, timestamp)
        if partition is None:
            partition = partition_for(key, self.partitions) if key is not None else 0
        self.topics.append(topic, partition, key, value, ts, headers)

    def pipe_many(self, topic: str, records: Iterable[tuple[Any, Any, int | datetime]]) -> None:
        """Pipe ``(key, value, timestamp)`` records in order."""
        for key, value, ts in records:
            self._pipe("pipe_many", topic, value, key, ts, None, None)

    # -- processing ----------------------------------------------------------------------

    def run(self) -> None:
        """Process every visible unprocessed record (checkpointing after each round if automatic)."""
        while self._process_visible():
            if not self.auto_checkpoint:
                return
            self.checkpoint()

    def _process_visible(self) -> bool:
        progressed = False
        for table in self.pipeline.global_tables():
            topic = table.topic.name
            for p, part in enumerate(self.topics.log(topic)):
                pos = self.positions.get((topic, p), 0)
                if pos < len(part):
                    self.runner.apply_global(part[pos:])
                    self.positions[(topic, p)] = len(part)
                    progressed = True
        for topic in self.inputs:
            for p, part in enumerate(self.topics.log(topic)):
                pos = self.positions.get((topic, p), 0)
                if pos < len(part):
                    self.runner.process(part[pos:])
                    self.positions[(topic, p)] = len(part)
                    progressed = True
        return self.runner.end_batch() or progressed  # the end of a batch: watermarks go downstream

    # -- async steps -------------------------------------------------------------------

    def complete_calls(self) -> int:
        """Run the async steps' calls waiting (``calls="deferred"``), oldest first, and process
        their results as a batch's; how many ran."""
        n = self.calls.run() if isinstance(self.calls, DeferredCalls) else 0
        self.runner.complete()
        self._settle()
        return n

    def calls_in_flight(self) -> dict[str, int]:
        """Records in flight per async step (waiting for ``complete_calls`` when deferred)."""
        return self.runner.in_flight()

    # -- time ----------------------------------------------------------------------------

    def advance_watermark(self, watermark: int, *, topic: str | None = None, partition: int | None = None) -> None:
        """Raise the watermark of the source partitions (all, or of ``topic``/``partition``) to
        ``watermark``, as if their generators had seen it, and process what that fires."""
        for task in self.tasks:
            if partition is not None and task.partition != partition:
                continue
            for src in self.pipeline.sources():
                if topic is not None and src.topic.name != topic:
                    continue
                task.time.force(src.topic.name, watermark)
        for table in self.runner.globals.tables.values():
            if topic is None or table.step.topic.name == topic:
                table.force(watermark)
        self._settle()

    def advance_wall_clock(self, ms: int) -> None:
        """Move the tasks' processing time forward by ``ms``: processing-time timers and
        windows fire, idle partitions leave the watermark minimum."""
        self.runner.tick()  # records piped since the last advance arrived at the old time
        self.wall_clock_ms += ms
        self.runner.tick()
        self._settle()

    def _settle(self) -> None:
        self.runner.end_batch()
        if self.auto_checkpoint:
            self.checkpoint()
        self.run()

    def watermark(self, step: str, *, partition: int = 0) -> int:
        """The current watermark of ``step`` in the task of ``partition``."""
        task = self.runner.tasks[partition]
        return task.time.clock(self.pipeline.clock_inputs(step)).watermark

    def timers(self, step: str, *, domain: str = "event") -> list[tuple[int, Any]]:
        """Pending timers of ``step`` as ``(timestamp, key)``, in firing order, over all tasks."""
        out: list[tuple[int, bytes, int]] = []
        for task in self.tasks:
            in_memory = task.ctx.timers_in_memory.get((step, domain))  # a step that derives them from its state
            out += in_memory.pending() if in_memory is not None else list_timers(task.stores[step], domain)
        kd = self.pipeline.steps[step].key_serde.deserialize  # type: ignore[attr-defined]
        return [(ts, kd(kb)) for ts, kb, _ in sorted(out)]

    def metrics(self) -> dict[str, int]:
        """Counters summed over the tasks, e.g. ``late_records.<step>``, ``dead_letters``,
        ``records`` (processed; since the driver started or last crashed)."""
        return self.runner.metrics()

    # -- checkpoints and failures --------------------------------------------------------

    def skip(self, topic: str, partition: int, offset: int, *, reason: str = "") -> None:
        """Name the record ``topic[partition]@offset`` in the skip list, as ``fw group skip``
        does: with ``on_error="fail"``, when a step raises on it (or on a record made from it,
        behind a ``key_by``) it goes to the dead-letter topic instead (``fw.skipped``,
        ``fw.skip.reason``) and processing goes on. ``crash()`` after a failure starts again."""
        self.skips.add(Skip(f"{topic}[{partition}]@{offset}", reason))

    def checkpoint(self, *, crash_at: CrashPoint | None = None) -> None:
        """Changelogs, commit (outputs and positions become visible), then state writes: the
        runner's checkpoint, as in the Kafka runtime. ``crash_at``: the process dies at that
        step instead of finishing (``after_commit``: committed, but the local state was not
        written; the restore then applies the changelog's tail), then restarts (``crash``)."""
        self._crash_at = crash_at
        try:
            self.runner.checkpoint(self.positions, _Commit(self))
        except _Crash:
            self.crash()
        finally:
            self._crash_at = None

    def crash(self, *, lose_local_state: bool = False) -> None:
        """The process dies: every uncommitted write and the in-memory tasks are lost. A new
        one restores each store from its stored changelog offset to the changelog's end (from
        the start with ``lose_local_state``, as on a new machine) and re-processes the input
        after the last checkpoint."""
        self.topics.abort()
        self.runner.discard()
        self.runner.close()
        if lose_local_state:
            for p in range(self.partitions):
                for name in self.pipeline.store_names():
                    self.backend.drop(self.pipeline.name, name, p)
        self.positions = dict(self.committed)
        self._start(self.pipeline)
        self.run()

    def restart(self, pipeline: Pipeline | None = None) -> None:
        """A clean stop (a final checkpoint) and a start with ``pipeline`` (the same one by
        default): test that an upgraded pipeline continues from the old one's state."""
        self.checkpoint()
        self.runner.close()
        self._start(pipeline or self.pipeline)
        self.run()

    # -- inspection ----------------------------------------------------------------------

    def output(self, topic: str | Topic, *, key_serde: Any = None, value_serde: Any = None) -> list[TestRecord]:
        """The committed records of ``topic``, decoded, in partition then offset order. The
        dead-letter topic's (without serdes given): keys as bytes, values as their
        ``fw.value.encoding`` header says (JSON parsed, ``repr`` as text, else the bytes)."""
        t = topic if isinstance(topic, Topic) else self._sink(topic)
        if t.name == self.pipeline.dead_letter.name and key_serde is None and value_serde is None:
            return [TestRecord(m.key(), _letter_value(m), m.timestamp()[1], m.partition(), m.offset(),
                               tuple(m.headers() or ()))
                    for part in self.topics.log(t.name) for m in part]
        kd = (key_serde or t.key_serde).bind(t.name, True).deserialize
        vd = (value_serde or t.value_serde).bind(t.name, False).deserialize
        return [
            TestRecord(_decoded(kd, m.key()), _decoded(vd, m.value()), m.timestamp()[1], m.partition(), m.offset(),
                       tuple(m.headers() or ()))
            for part in self.topics.log(t.name) for m in part if not _is_control(m)
        ]

    def values(self, topic: str) -> list[Any]:
        return [r.value for r in self.output(topic)]

    def dead_letters(self) -> list[Record]:
        return [m for part in self.topics.log(self.pipeline.dead_letter.name) for m in part]

    def _sink(self, name: str) -> Topic:
        for t in self.pipeline.sink_topics():
            if t.name == name:
                return t
        if name == self.pipeline.dead_letter.name:
            return self.pipeline.dead_letter
        raise PipelineError(f"{name!r} is not an output topic of {self.pipeline.name!r}")

    def state(self, store: str, key: Any, *, state: str = "acc") -> Any:
        """The committed-or-cached value of ``state`` for ``key`` in ``store`` (None if absent)."""
        step = self.pipeline.steps.get(store)
        if step is None or not step.stateful:
            raise PipelineError(f"no stateful step {store!r}; stateful steps: "
                                f"{[s.name for s in self.pipeline.stateful_steps()]}")
        skey = keyed(state_prefix(state), step.key_serde.serialize(key))  # type: ignore[attr-defined]
        for task in self.tasks:
            value = task.stores[store].get(skey)
            if value is not None:
                return value
        return None

    def table(self, name: str, key: Any, *, as_of: int | None = None) -> Any:
        """The value of ``key`` in table ``name`` (a table, a joined table or a global table)
        as of ``as_of`` (its latest value by default); None when it has no row then."""
        step = self.pipeline.steps.get(name)
        if not isinstance(step, (S.Table, S.GlobalTable)):
            tables = [s.name for s in self.pipeline.steps.values() if isinstance(s, (S.Table, S.GlobalTable))]
            raise PipelineError(f"no table {name!r}; tables: {tables}")
        skey = keyed(TABLE_PREFIX, step.key_serde.serialize(key))
        if isinstance(step, S.GlobalTable):
            versions = self.runner.globals.tables[name].store.get(skey)
        else:
            versions = next((v for v in (t.stores[name].get(skey) for t in self.tasks) if v is not None), None)
        return latest(versions) if as_of is None else table_as_of(versions, as_of)

    def state_sizes(self) -> dict[str, int]:
        """Keys held per store, summed over partitions."""
        return {name: sum(t.stores[name].size() for t in self.tasks) for name in self.tasks[0].stores}

    def dump(self, partition: int = 0) -> dict[str, dict[bytes, Any]]:
        """Every entry of every store of a task, decoded: what its changelogs restore."""
        return self.runner.dump(partition)

    @staticmethod
    def sorted_values(records: Sequence[TestRecord]) -> list[Any]:
        return sorted(r.value for r in records)
