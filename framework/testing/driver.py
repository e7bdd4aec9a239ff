"""TestDriver: run a pipeline without a broker, deterministically, for users' unit tests.

It drives the same compiled tasks as the Kafka runtime, over in-memory topics with
read-committed semantics: records a task produces become visible (to ``output`` and to the
steps after a ``key_by``) when a checkpoint commits. By default every ``pipe`` ends with a
checkpoint, as Kafka Streams' TopologyTestDriver commits after each record; with
``auto_checkpoint=False`` a ``crash()`` discards everything since the last ``checkpoint()``,
restores the state from the changelogs, and re-processes the uncommitted input.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from framework.engine.context import Headers
from framework.engine.partitioner import partition_for
from framework.engine.task import Task
from framework.errors import PipelineError, RecordError
from framework.pipeline.definition import Pipeline, Topic
from framework.state.keys import keyed, state_prefix
from framework.state.memory import MemoryBackend
from framework.state.restore import apply_changelog
from framework.time.clock import WATERMARK_HEADER
from framework.time.timers import list_timers


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


class _Msg:
    """An in-memory record with the method interface of ``confluent_kafka.Message``."""

    __slots__ = ("_t", "_p", "_o", "_k", "_v", "_ts", "_h")

    def __init__(self, t: str, p: int, o: int, k: bytes | None, v: bytes | None, ts: int, h: Headers) -> None:
        self._t, self._p, self._o, self._k, self._v, self._ts, self._h = t, p, o, k, v, ts, h

    def topic(self) -> str: return self._t
    def partition(self) -> int: return self._p
    def offset(self) -> int: return self._o
    def key(self) -> bytes | None: return self._k
    def value(self) -> bytes | None: return self._v
    def timestamp(self) -> tuple[int, int]: return (1, self._ts)
    def headers(self) -> list[tuple[str, bytes]] | None: return list(self._h) if self._h else None


def _is_control(m: _Msg) -> bool:
    return m.key() is None and m.value() is None and any(h == WATERMARK_HEADER for h, _ in m.headers() or ())


class _Topics:
    """In-memory topics: committed logs plus the pending records of the open transaction."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.logs: dict[str, list[list[_Msg]]] = {}
        self.pending: list[tuple[str, int, bytes | None, bytes | None, int, Headers]] = []
        self._round_robin = itertools.count()

    def log(self, topic: str) -> list[list[_Msg]]:
        log = self.logs.get(topic)
        if log is None:
            log = self.logs[topic] = [[] for _ in range(self.partitions)]
        return log

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
               timestamp: int, headers: Headers) -> _Msg:
        part = self.log(topic)[partition]
        msg = _Msg(topic, partition, len(part), key, value, timestamp, headers)
        part.append(msg)
        return msg

    def commit(self) -> dict[tuple[str, int], int]:
        """Make pending records visible; returns the next offset per written partition."""
        ends: dict[tuple[str, int], int] = {}
        for topic, p, k, v, ts, h in self.pending:
            ends[(topic, p)] = self.append(topic, p, k, v, ts, h).offset() + 1
        self.pending = []
        return ends

    def abort(self) -> None:
        self.pending = []


class TestDriver:
    """Pipe records in, read outputs, inspect state, checkpoint, crash and restore."""

    __test__ = False

    def __init__(self, pipeline: Pipeline, *, partitions: int = 1, auto_checkpoint: bool = True,
                 wall_clock_ms: int = 0) -> None:
        self.pipeline = pipeline
        self.partitions = partitions
        self.auto_checkpoint = auto_checkpoint
        self.wall_clock_ms = wall_clock_ms  # the tasks' processing time; moves only by advance_wall_clock
        self.topics = _Topics(partitions)
        self.backend = MemoryBackend()
        self.inputs = pipeline.input_topics()
        self.positions: dict[tuple[str, int], int] = {}
        self.committed: dict[tuple[str, int], int] = {}
        self.tasks = [self._new_task(p) for p in range(partitions)]

    def _new_task(self, partition: int) -> Task:
        return Task(self.pipeline, partition, self.backend, self.topics, partitions=self.partitions,
                    now_ms=lambda: self.wall_clock_ms)

    # -- input ---------------------------------------------------------------------------

    def _source(self, topic: str) -> Topic:
        for s in self.pipeline.sources():
            if s.topic.name == topic:
                return s.topic
        names = [s.topic.name for s in self.pipeline.sources()]
        raise PipelineError(f"{topic!r} is not a source of pipeline {self.pipeline.name!r}; sources: {names}")

    def pipe(self, topic: str, value: Any, *, key: Any = None, timestamp: int = 0,
             headers: Headers = None, partition: int | None = None) -> None:
        """Produce one record to a source topic (with its serdes) and process it."""
        t = self._source(topic)
        kb = None if key is None else t.key_serde.bind(topic, True).serialize(key)
        vb = None if value is None else t.value_serde.bind(topic, False).serialize(value)
        self.pipe_raw(topic, vb, key=kb, timestamp=timestamp, headers=headers, partition=partition)

    def pipe_raw(self, topic: str, value: bytes | None, *, key: bytes | None = None, timestamp: int = 0,
                 headers: Headers = None, partition: int | None = None) -> None:
        """Produce one record of raw bytes (e.g. malformed input) to a source topic and process it."""
        self._source(topic)
        if partition is None:
            partition = partition_for(key, self.partitions) if key is not None else 0
        self.topics.append(topic, partition, key, value, timestamp, headers)
        self.run()

    def pipe_many(self, topic: str, records: Iterable[tuple[Any, Any, int]]) -> None:
        """Pipe ``(key, value, timestamp)`` records in order."""
        for key, value, ts in records:
            self.pipe(topic, value, key=key, timestamp=ts)

    # -- processing ----------------------------------------------------------------------

    def run(self) -> None:
        """Process every visible unprocessed record (checkpointing after each round if automatic)."""
        while self._process_visible():
            if not self.auto_checkpoint:
                return
            self.checkpoint()

    def _process_visible(self) -> bool:
        progressed = False
        for topic in self.inputs:
            for p, part in enumerate(self.topics.log(topic)):
                pos = self.positions.get((topic, p), 0)
                for msg in part[pos:]:
                    self._handle(self.tasks[p], msg)
                    progressed = True
                self.positions[(topic, p)] = len(part)
        for task in self.tasks:  # the end of a batch: watermarks go downstream
            progressed = task.flush_watermarks() or progressed
        return progressed

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
        self._settle()

    def advance_wall_clock(self, ms: int) -> None:
        """Move the tasks' processing time forward by ``ms``: processing-time timers and
        windows fire, idle partitions leave the watermark minimum."""
        for task in self.tasks:  # records piped since the last advance arrived at the old time
            task.tick()
        self.wall_clock_ms += ms
        for task in self.tasks:
            task.tick()
        self._settle()

    def _settle(self) -> None:
        for task in self.tasks:
            task.flush_watermarks()
        if self.auto_checkpoint:
            self.checkpoint()
        self.run()

    def watermark(self, step: str, *, partition: int = 0) -> int:
        """The current watermark of ``step`` in the task of ``partition``."""
        return self.tasks[partition].ctx.clock_for(step).watermark

    def timers(self, step: str, *, domain: str = "event") -> list[tuple[int, Any]]:
        """Pending timers of ``step`` as ``(timestamp, key)``, in firing order, over all tasks."""
        out: list[tuple[int, bytes, int]] = []
        for task in self.tasks:
            out += list_timers(task.stores[step], domain)
        kd = self.pipeline.steps[step].key_serde.deserialize  # type: ignore[attr-defined]
        return [(ts, kd(kb)) for ts, kb, _ in sorted(out)]

    def metrics(self) -> dict[str, int]:
        """Counters summed over the tasks, e.g. ``late_records.<step>``, ``dead_letters``."""
        total: dict[str, int] = {"dead_letters": 0}
        for task in self.tasks:
            total["dead_letters"] += task.dead_letters
            for name, n in task.ctx.counters.items():
                total[name] = total.get(name, 0) + n
        return total

    def _handle(self, task: Task, msg: _Msg) -> None:
        try:
            task.handle(msg)
        except RecordError as err:
            task.dead_letter(msg, err)

    def checkpoint(self) -> None:
        """Changelogs, commit (outputs and positions become visible), then state writes."""
        for task in self.tasks:
            task.produce_changelogs({f"{t}[{p}]": o for (t, p), o in self.positions.items() if p == task.partition})
        ends = self.topics.commit()
        self.committed = dict(self.positions)
        for task in self.tasks:
            task.commit_state({t: o for (t, p), o in ends.items() if p == task.partition})

    def crash(self) -> None:
        """Lose every uncommitted write and the local state; restore it from the changelogs
        and re-process the input after the last checkpoint."""
        self.topics.abort()
        for task in self.tasks:
            task.discard_state()
        self.positions = dict(self.committed)
        for p in range(self.partitions):
            for name in self.pipeline.store_names():
                self.backend.drop(self.pipeline.name, name, p)
                store = self.backend.open(self.pipeline.name, name, p)
                log = self.topics.log(self.pipeline.changelog_topic(name))[p]
                apply_changelog(store, ((m.offset(), m.key() or b"", m.value()) for m in log))
        self.tasks = [self._new_task(p) for p in range(self.partitions)]
        self.run()

    # -- inspection ----------------------------------------------------------------------

    def output(self, topic: str | Topic, *, key_serde: Any = None, value_serde: Any = None) -> list[TestRecord]:
        """The committed records of ``topic``, decoded, in partition then offset order."""
        t = topic if isinstance(topic, Topic) else self._sink(topic)
        kd = (key_serde or t.key_serde).bind(t.name, True).deserialize
        vd = (value_serde or t.value_serde).bind(t.name, False).deserialize
        return [
            TestRecord(None if m.key() is None else kd(m.key()), None if m.value() is None else vd(m.value()),
                       m.timestamp()[1], m.partition(), m.offset(), tuple(m.headers() or ()))
            for part in self.topics.log(t.name) for m in part if not _is_control(m)
        ]

    def values(self, topic: str) -> list[Any]:
        return [r.value for r in self.output(topic)]

    def dead_letters(self) -> list[_Msg]:
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

    def state_sizes(self) -> dict[str, int]:
        """Keys held per store, summed over partitions."""
        return {name: sum(t.stores[name].size() for t in self.tasks) for name in self.tasks[0].stores}

    @staticmethod
    def sorted_values(records: Sequence[TestRecord]) -> list[Any]:
        return sorted(r.value for r in records)
