"""Pipelines as pure data: topics, steps and the streams that connect them.

A ``Pipeline`` is built fluently and does no I/O::

    p = Pipeline("even-odd")
    numbers = p.source(Topic("numbers", value_serde=JsonSerde()))
    numbers.key_by(lambda n: "even" if n % 2 == 0 else "odd", name="parity") \\
           .sum(name="sums").to(Topic("sums"))

Every step has a stable name (given, or ``<kind>-<index>``); a stateful step's name names
its state store and changelog topic ``<service>-<step>-changelog``; a ``key_by`` step's
name names its repartition topic ``<service>-<step>-repartition``. The same pipeline
object is compiled by the Kafka runtime, the TestDriver and the Spark replay.
"""

from __future__ import annotations

import inspect
import operator
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from framework.errors import PipelineError
from framework.pipeline import steps as S
from framework.pipeline.calls import AsyncFunction, Retry, takes_call
from framework.pipeline.functions import CoProcessFunction, ProcessContext, ProcessFunction
from framework.pipeline.internal import (
    DEAD_LETTER_SUFFIX,
    TIME_STORE,
    changelog_topic,
    repartition_topic,
)
from framework.pipeline.topology import describe
from framework.serde import JsonSerde, Serde, StringSerde
from framework.serde.keys import KeySerde
from framework.serde.values import CustomType
from framework.time.watermarks import WatermarkStrategy
from framework.windows.definitions import (
    SessionWindows,
    SlidingWindows,
    TumblingWindows,
    Window,
    WindowSpec,
)
from framework.windows.functions import WindowFunction, aggregating, full

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")


@dataclass(frozen=True)
class Topic:
    """A Kafka topic with its serdes. ``partitions`` is used only to create it when missing."""

    name: str
    key_serde: Serde = field(default_factory=StringSerde)
    value_serde: Serde = field(default_factory=JsonSerde)
    partitions: int | None = None
    config: Mapping[str, str] = field(default_factory=dict)
    watermarks: bool = False
    """As a sink: also write watermark control records, for framework services that read the
    topic with ``WatermarkStrategy.from_upstream()`` (other consumers would see them as
    records with no key and no value, and a ``fw.watermark`` header)."""

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise PipelineError(f"invalid topic name {self.name!r}: use letters, digits, '.', '_', '-'")


DAY_MS = 86_400_000  # a table's default history


class Pipeline:
    """A service's dataflow: sources, steps, sinks and its dead-letter topic."""

    def __init__(self, name: str, *, dead_letter: str | Topic | None = None, partitions: int = 4,
                 types: Iterable[type | CustomType] = ()) -> None:
        """``types``: the user types its state and repartition values may hold (dataclasses,
        NamedTuples, Enums, or ``CustomType(cls, encode=..., decode=...)``); every other
        value must be a built-in one (docs/state-format.md)."""
        if not _NAME.match(name):
            raise PipelineError(f"invalid pipeline name {name!r}: it names the consumer group and topics")
        self.name = name
        self.default_partitions = partitions
        self.types = tuple(t if isinstance(t, CustomType) else CustomType(t) for t in types)
        for t in self.types:
            t.resolved()  # a type that cannot be registered fails here, not on its first value
        dlq = dead_letter or f"{name}{DEAD_LETTER_SUFFIX}"
        self.dead_letter = dlq if isinstance(dlq, Topic) else Topic(dlq)
        self.steps: dict[str, S.Step] = {}
        self.children: dict[str, list[str]] = {}
        self.target: str | None = None
        """The ``module:pipeline`` it was loaded from (``load_pipeline``), for messages that
        name a command to run on it."""

    # -- building ----------------------------------------------------------------------

    def source(self, topic: Topic | str, *, watermarks: WatermarkStrategy | None = None,
               name: str | None = None) -> Stream:
        """A stream of ``topic``'s records, keyed by their Kafka key. ``watermarks`` gives its
        records event timestamps and its partitions watermarks (needed by event-time steps)."""
        t = Topic(topic) if isinstance(topic, str) else topic
        step = self._add(S.Source(self._name(name, "source"), (), t, watermarks))
        return Stream(self, step.name, t.key_serde)

    def table(self, topic: Topic | str, *, history_ms: int = DAY_MS, watermarks: WatermarkStrategy | None = None,
              name: str | None = None) -> Table:
        """``topic`` read as a table: the latest value of each key, and its earlier values over
        ``history_ms`` (by timestamp), for joins as of a record's time; a record with no value
        (a tombstone) deletes its key. ``watermarks`` gives its records event timestamps: a
        stream joined with it on event time waits for the table's updates up to each record's
        time (docs/tables.md). Its store is named ``name`` (``table-<index>`` by default)."""
        t = Topic(topic) if isinstance(topic, str) else topic
        tname = self._name(name, "table")
        source = self._add(S.Source(self._name(f"{tname}.source", "source"), (), t, watermarks))
        return Table(self, self._add(S.Table(tname, (source.name,), _history(history_ms), t.key_serde)).name,
                     t.key_serde)

    def global_table(self, topic: Topic | str, *, history_ms: int = DAY_MS,
                     watermarks: WatermarkStrategy | None = None, name: str | None = None) -> GlobalTable:
        """``topic`` read as a table that every process of the service holds whole: all its
        partitions, read outside the consumer group, restored completely before anything is
        processed. A stream joins it by a key taken from each record (``Stream.join(...,
        key=...)``), so nothing needs to be co-partitioned with it. Versions, deletes,
        ``history_ms`` and ``watermarks`` as in ``Pipeline.table`` (docs/tables.md)."""
        t = Topic(topic) if isinstance(topic, str) else topic
        if t.name in {s.topic.name for s in self.sources()} | {g.topic.name for g in self.global_tables()}:
            raise PipelineError(f"topic {t.name!r} is read twice; read it once")
        step = self._add(S.GlobalTable(self._name(name, "global_table"), (), t, watermarks, _history(history_ms),
                                       t.key_serde))
        return GlobalTable(self, step.name, t.key_serde)

    def global_tables(self) -> list[S.GlobalTable]:
        return [s for s in self.steps.values() if isinstance(s, S.GlobalTable)]

    def _name(self, given: str | None, kind: str) -> str:
        name = f"{kind}-{len(self.steps)}" if given is None else given
        if not _NAME.match(name):
            raise PipelineError(f"invalid step name {name!r}: use letters, digits, '.', '_', '-'")
        if name in self.steps:
            raise PipelineError(f"step name {name!r} is used twice in pipeline {self.name!r}")
        return name

    def _add(self, step: S.Step) -> S.Step:
        self.steps[step.name] = step
        self.children[step.name] = []
        for parent in step.parents:
            self.children[parent].append(step.name)
        return step

    # -- derived topology ----------------------------------------------------------------

    def changelog_topic(self, store: str) -> str:
        return changelog_topic(self.name, store)

    def repartition_topic(self, step: str) -> str:
        return repartition_topic(self.name, step)

    def stateful_steps(self) -> list[S.Step]:
        return [s for s in self.steps.values() if s.stateful]

    def uses_event_time(self) -> bool:
        return any(s.watermarks is not None for s in self.sources())

    def store_names(self) -> list[str]:
        """Every state store of the service: the stateful steps', and the task clock's."""
        names = [s.name for s in self.stateful_steps()]
        return names + [TIME_STORE] if self.uses_event_time() else names

    def table_source(self, store: str) -> S.Source | None:
        """The source a table store is read from, when the table is a topic as it is
        (``Pipeline.table``, or ``as_table`` of a source read by nothing else): such a store
        has no changelog of its own; it is restored from that topic, up to the group's
        committed offset, by the table step's own code (docs/tables.md)."""
        step = self.steps.get(store)
        if isinstance(step, S.Table):
            parent = self.steps[step.parents[0]]
            if isinstance(parent, S.Source) and self.children[parent.name] == [store]:
                return parent
        return None

    def restore_topic(self, store: str) -> str:
        """The topic ``store`` is restored from: its changelog, or a table's own topic."""
        source = self.table_source(store)
        return self.changelog_topic(store) if source is None else source.topic.name

    def changelogged_stores(self) -> list[str]:
        """The stores that write a changelog: every store but the tables read from their topic."""
        return [s for s in self.store_names() if self.table_source(s) is None]

    def step_inputs(self, name: str) -> frozenset[str]:
        """The input topics whose records reach step ``name`` without crossing a topic."""
        step = self.steps[name]
        if isinstance(step, S.Source):
            return frozenset((step.topic.name,))
        out: set[str] = set()
        for parent in step.parents:
            if isinstance(self.steps[parent], S.KeyBy):
                out.add(self.repartition_topic(parent))
            else:
                out |= self.step_inputs(parent)
        return frozenset(out)

    def clock_inputs(self, name: str) -> frozenset[str]:
        """What step ``name``'s watermark is the minimum of: its input topics (``step_inputs``),
        except that the watermark of an async step's output is its own, ``async:<step>`` (a
        name no topic can have): a watermark leaves an async step only after every record
        before it (docs/async.md)."""
        step = self.steps[name]
        if isinstance(step, S.Source):
            return frozenset((step.topic.name,))
        out: set[str] = set()
        for parent in step.parents:
            kind = self.steps[parent]
            if isinstance(kind, S.KeyBy):
                out.add(self.repartition_topic(parent))
            elif isinstance(kind, S.AsyncStep):
                out.add(async_input(parent))
            else:
                out |= self.clock_inputs(parent)
        return frozenset(out)

    def async_steps(self) -> list[S.AsyncStep]:
        return [s for s in self.steps.values() if isinstance(s, S.AsyncStep)]

    def upstream_sources(self, name: str) -> list[S.Source]:
        step = self.steps[name]
        if isinstance(step, S.Source):
            return [step]
        found: dict[str, S.Source] = {}
        for parent in step.parents:
            for src in self.upstream_sources(parent):
                found[src.name] = src
        return list(found.values())

    def validate(self) -> None:
        """Event-time steps need watermarks from every source upstream of them."""
        for step in self.steps.values():
            if not step.event_time:
                continue
            for src in self.upstream_sources(step.name):
                if src.watermarks is None:
                    raise PipelineError(
                        f"step {step.name!r} runs on event time, but source {src.name!r} ({src.topic.name!r}) "
                        "has no watermarks: pass watermarks=WatermarkStrategy.bounded_out_of_orderness(bound_ms, "
                        "timestamp=...) to Pipeline.source, or use clock='processing' windows"
                    )

    def sources(self) -> list[S.Source]:
        return [s for s in self.steps.values() if isinstance(s, S.Source)]

    def repartition_topics(self) -> list[str]:
        """The repartition topic of every ``key_by`` step."""
        return [self.repartition_topic(s.name) for s in self.steps.values() if isinstance(s, S.KeyBy)]

    def input_topics(self) -> list[str]:
        """Every topic the service consumes: sources and its own repartition topics."""
        return [s.topic.name for s in self.sources()] + self.repartition_topics()

    def sink_topics(self) -> list[Topic]:
        """Every topic the service writes records to: its sinks and its windows' late topics."""
        topics = [s.topic for s in self.steps.values() if isinstance(s, S.Sink)]
        return topics + [s.late for s in self.steps.values() if isinstance(s, S.WindowStep) and s.late is not None]

    def describe(self) -> dict[str, Any]:
        """The topology as plain data (JSON values only), read from the definition; nothing
        is asked of a cluster. Keys:

        - ``service``, ``partitions`` (the default for the topics it creates), ``event_time``;
        - ``sources`` and ``global_tables``: per source step its ``topic``, ``key_serde`` and
          ``value_serde`` (by name), ``partitions`` (None: the pipeline's) and ``watermarks``
          (``strategy``, ``bound_ms``, ``timestamp``, ``idle_timeout_ms``; None without event time);
        - ``steps``, in the order they were added: ``name``, ``kind``, ``parents``, ``children``,
          ``stateful``, ``event_time``, ``store`` (its store's name, or None) and ``params``, the
          step's own fields (window specs with their sizes, slides and gaps, lateness, join
          bounds and grace, async capacity and timeouts, functions by name);
        - ``edges``: ``[parent, child]`` pairs;
        - ``stores``: ``name``, ``step`` (None for ``_time``, the task clock), ``changelogged``,
          ``changelog`` and ``restored_from``;
        - ``internal_topics``: repartition topics and changelogs (``topic``, ``kind``, ``of``);
        - ``sinks`` and ``late_outputs`` (per topic the step writing it, its serdes), and
          ``dead_letter``.

        ``framework.pipeline.topology`` draws it as text or Mermaid (``fw describe``)."""
        return describe(self)


def async_input(step: str) -> str:
    """The clock input an async step's output watermark is (``Pipeline.clock_inputs``)."""
    return f"async:{step}"


class Stream:
    """A stream of (key, value, timestamp) records inside a pipeline."""

    __slots__ = ("key_serde", "pipeline", "step")

    def __init__(self, pipeline: Pipeline, step: str, key_serde: Serde) -> None:
        self.pipeline, self.step, self.key_serde = pipeline, step, key_serde

    def _then(self, step: S.Step, key_serde: Serde | None = None) -> Stream:
        self.pipeline._add(step)
        return Stream(self.pipeline, step.name, key_serde or self.key_serde)

    def _n(self, name: str | None, kind: str) -> str:
        return self.pipeline._name(name, kind)

    # -- stateless ---------------------------------------------------------------------

    def map(self, fn: Callable[[Any], Any], *, name: str | None = None) -> Stream:
        """Replace each value by ``fn(value)``; key and timestamp stay."""
        return self._then(S.Map(self._n(name, "map"), (self.step,), fn))

    def filter(self, fn: Callable[[Any], bool], *, name: str | None = None) -> Stream:
        """Keep the records whose value satisfies ``fn``."""
        return self._then(S.Filter(self._n(name, "filter"), (self.step,), fn))

    def flat_map(self, fn: Callable[[Any], Iterable[Any]], *, name: str | None = None) -> Stream:
        """Replace each value by the values of ``fn(value)`` (zero or more), same key and timestamp."""
        return self._then(S.FlatMap(self._n(name, "flat_map"), (self.step,), fn))

    def peek(self, fn: Callable[[Any, Any, int], None], *, name: str | None = None) -> Stream:
        """Call ``fn(key, value, timestamp)`` for its side effect; records pass unchanged."""
        return self._then(S.Peek(self._n(name, "peek"), (self.step,), fn))

    def key_by(self, fn: Callable[[Any], Any], *, name: str | None = None,
               key_serde: Serde | None = None, value_serde: Serde | None = None) -> Stream:
        """Re-key by ``fn(value)``: records go through the repartition topic of this step,
        so each key's records meet in the task that owns the key's state. Values cross it in
        the framework's value encoding (built-in types and the pipeline's ``types``) unless
        ``value_serde`` is given; keys in ``key_serde`` (deterministic JSON by default)."""
        return self._then(S.KeyBy(self._n(name, "key_by"), (self.step,), fn, key_serde or KeySerde(), value_serde),
                          key_serde or KeySerde())

    # -- calls to other services (docs/async.md) ---------------------------------------

    def map_async(self, fn: Callable[..., Awaitable[Any]] | AsyncFunction, *, capacity: int = 100,
                  timeout_ms: int = 10_000, retry: Retry | None = None, ordered: bool = True,
                  name: str | None = None) -> Stream:
        """Replace each value by ``await fn(value)`` (or ``fn(value, call)``, ``call`` an
        ``AsyncCall``), with up to ``capacity`` calls in flight per task, each attempt given
        ``timeout_ms``, failures retried as ``retry`` says. ``ordered``: outputs in input order;
        else as calls complete, but never across a watermark. Exactly once: the records in
        flight at a checkpoint are stored with it and called again after a restart."""
        return self._async(fn, capacity, timeout_ms, retry, ordered, name, many=False)

    def process_async(self, fn: Callable[..., Awaitable[Iterable[Any]]] | AsyncFunction, *, capacity: int = 100,
                      timeout_ms: int = 10_000, retry: Retry | None = None, ordered: bool = True,
                      name: str | None = None) -> Stream:
        """As ``map_async``, with ``await fn(key, value, call)`` returning the values to emit
        (none, one or more), each with the record's key and timestamp."""
        return self._async(fn, capacity, timeout_ms, retry, ordered, name, many=True)

    def _async(self, fn: Any, capacity: int, timeout_ms: int, retry: Retry | None, ordered: bool,
               name: str | None, *, many: bool) -> Stream:
        kind = "process_async" if many else "map_async"
        step = self._n(name, kind)
        method = type(fn).__call__ if callable(fn) else None  # a function object's: async def __call__
        if not (inspect.iscoroutinefunction(fn) or isinstance(fn, AsyncFunction)
                or inspect.iscoroutinefunction(method)):
            raise PipelineError(f"step {step!r}: {kind} takes an async function (async def ...) or an "
                                f"AsyncFunction, not {fn!r}; a function that does not await runs in .map")
        if capacity < 1 or timeout_ms < 1:
            raise PipelineError(f"step {step!r}: capacity={capacity} and timeout_ms={timeout_ms} must be positive")
        with_call = takes_call(fn, 2 if many else 1)
        if many and not with_call:
            raise PipelineError(f"step {step!r}: process_async's function takes (key, value, call)")
        return self._then(S.AsyncStep(step, (self.step,), fn, capacity, timeout_ms, retry or Retry.none(), ordered,
                                      many, with_call, self.key_serde))

    # -- keyed state -------------------------------------------------------------------

    def process(self, function: ProcessFunction | Callable[[Any, Any, ProcessContext], None], *,
                name: str | None = None) -> Stream:
        """A keyed process function with value/map/list state (see ``ProcessFunction``), or a
        plain function ``(key, value, ctx)``."""
        return self._then(S.Process(self._n(name, "process"), (self.step,), function, self.key_serde))

    def aggregate(self, init: Callable[[], Any], add: Callable[[Any, Any], Any], *,
                  result: Callable[[Any], Any] | None = None, name: str | None = None) -> Stream:
        """Rolling aggregate per key: after each record emit ``result(acc)``, where
        ``acc = add(acc or init(), value)``."""
        return self._then(S.Aggregate(self._n(name, "aggregate"), (self.step,), init, add, result,
                                      self.key_serde))

    def reduce(self, fn: Callable[[Any, Any], Any], *, name: str | None = None) -> Stream:
        """Rolling reduce per key: emit ``fn(previous, value)`` (the first value as is)."""
        return self.aggregate(_Unset, lambda acc, v: v if acc is _Unset else fn(acc, v), name=name or
                              self._n(None, "reduce"))

    def count(self, *, name: str | None = None) -> Stream:
        """Running count per key."""
        return self.aggregate(int, lambda acc, _v: acc + 1, name=name or self._n(None, "count"))

    def sum(self, fn: Callable[[Any], Any] | None = None, *, name: str | None = None) -> Stream:
        """Running sum per key of ``fn(value)`` (of the value itself by default)."""
        f = fn or _identity
        return self.aggregate(int, lambda acc, v: acc + f(v), name=name or self._n(None, "sum"))

    def min(self, fn: Callable[[Any], Any] | None = None, *, name: str | None = None) -> Stream:
        """Running minimum per key of ``fn(value)``."""
        f = fn or _identity
        return self.aggregate(_Unset, lambda acc, v: f(v) if acc is _Unset else min(acc, f(v)),
                              name=name or self._n(None, "min"))

    def max(self, fn: Callable[[Any], Any] | None = None, *, name: str | None = None) -> Stream:
        """Running maximum per key of ``fn(value)``."""
        f = fn or _identity
        return self.aggregate(_Unset, lambda acc, v: f(v) if acc is _Unset else max(acc, f(v)),
                              name=name or self._n(None, "max"))

    def mean(self, fn: Callable[[Any], Any] | None = None, *, name: str | None = None) -> Stream:
        """Running mean per key of ``fn(value)``."""
        f = fn or _identity
        return self.aggregate(lambda: (0, 0), lambda acc, v: (acc[0] + f(v), acc[1] + 1),
                              result=lambda acc: acc[0] / acc[1], name=name or self._n(None, "mean"))

    # -- event time --------------------------------------------------------------------

    def window(self, windows: WindowSpec, *, allowed_lateness_ms: int = 0, late: Topic | str | None = None,
               early_firing: bool = False) -> WindowedStream:
        """Group each key's records into ``windows`` (tumbling, sliding, session, count, global);
        finish with ``aggregate``/``reduce``/``count``/``sum``/``apply``. A result is the value
        ``{"start", "end", "value"}`` with timestamp ``end - 1``. ``allowed_lateness_ms``: late
        records within it update and re-emit a fired window; later ones go to ``late`` (a
        topic) or are dropped, and are counted. ``early_firing``: also emit the updated result
        of an open window after every record."""
        if allowed_lateness_ms < 0:
            raise PipelineError(f"allowed_lateness_ms must be >= 0, got {allowed_lateness_ms}")
        late_topic = Topic(late, key_serde=self.key_serde) if isinstance(late, str) else late
        return WindowedStream(self, windows, allowed_lateness_ms, late_topic, early_firing)

    def union(self, *others: Stream, name: str | None = None) -> Stream:
        """The records of this stream and of ``others``, as one stream (its watermark is the
        minimum of theirs)."""
        parents = (self.step, *(o.step for o in others))
        if len(set(parents)) != len(parents):
            raise PipelineError("union of a stream with itself: fan out with two steps instead")
        return self._then(S.Union(self._n(name, "union"), parents))

    def connect(self, other: Stream) -> ConnectedStreams:
        """Two keyed streams over shared keyed state: ``.process(CoProcessFunction)``."""
        return ConnectedStreams(self, other)

    def interval_join(self, other: Stream, lower_ms: int, upper_ms: int, fn: Callable[[Any, Any], Any], *,
                      name: str | None = None) -> Stream:
        """Per key, ``fn(left, right)`` for every pair with ``left.ts + lower_ms <= right.ts <=
        left.ts + upper_ms``, timestamped ``max(left.ts, right.ts)`` (Flink's interval join)."""
        if lower_ms > upper_ms:
            raise PipelineError(f"interval_join needs lower_ms <= upper_ms, got {lower_ms} > {upper_ms}")
        _distinct(self, other)
        return self._then(S.IntervalJoin(self._n(name, "interval_join"), (self.step, other.step), lower_ms,
                                         upper_ms, fn, self.key_serde))

    def window_join(self, other: Stream, windows: TumblingWindows | SlidingWindows, fn: Callable[[Any, Any], Any],
                    *, name: str | None = None) -> Stream:
        """Per key and event-time window, ``fn(left, right)`` for every pair of the window's
        records, emitted when the window fires with timestamp ``end - 1``."""
        if not isinstance(windows, (TumblingWindows, SlidingWindows)) or windows.clock != "event":
            raise PipelineError("window_join takes event-time TumblingWindows or SlidingWindows")
        _distinct(self, other)
        return self._then(S.WindowJoin(self._n(name, "window_join"), (self.step, other.step), windows, fn,
                                       self.key_serde))

    def join(self, table: Table | GlobalTable, fn: Callable[[Any, Any], Any], *, how: str = "inner",
             grace_ms: int | None = None, key: Callable[[Any], Any] | None = None, name: str | None = None) -> Stream:
        """Each record joined with ``table``'s value for its key: ``fn(value, row)``, same key
        and timestamp. On event time (this stream has watermarks) the row is the table's value
        as of the record's timestamp, and the record waits until the table's watermark has
        passed it; ``grace_ms`` bounds that wait by this stream's own watermark. Without event
        time, the table's latest value. ``how="left"`` also joins records the table has no row
        for (``row`` is None); ``"inner"`` counts them (``unmatched.<step>``) and drops them.
        The stream must be keyed like the table's topic (same key serde; the sources'
        partition counts are checked at start). A global table is joined by ``key(value)``
        instead, a key of its topic's key type, with no co-partitioning."""
        if isinstance(table, GlobalTable):
            return self._join_global(table, fn, how, grace_ms, key, name)
        if key is not None:
            raise PipelineError("join key=... is for a global table: a table is joined by the stream's own key "
                                "(key_by the stream first)")
        if not isinstance(table, Table) or table.pipeline is not self.pipeline:
            raise PipelineError("join takes a table of the same pipeline: pipeline.table(Topic(...)) or "
                                "stream.as_table()")
        if how not in ("inner", "left"):
            raise PipelineError(f"join how={how!r}: use 'inner' or 'left'")
        if grace_ms is not None and (type(grace_ms) is not int or grace_ms < 0):
            raise PipelineError(f"grace_ms must be an int >= 0 or None, got {grace_ms!r}")
        p = self.pipeline
        if not same_key_bytes(self.key_serde, table.key_serde):
            raise PipelineError(
                f"stream {self.step!r} is keyed with {_serde_name(self.key_serde)}, table {table.step!r} with "
                f"{_serde_name(table.key_serde)}: equal keys would reach different partitions and never meet. Fix: "
                f"key the stream with the table's key serde (.key_by(fn, key_serde={_serde_name(table.key_serde)}))")
        timed = any(s.watermarks is not None for s in p.upstream_sources(self.step))
        untimed = [s.topic.name for s in p.upstream_sources(table.step) if s.watermarks is None]
        if timed and untimed:
            raise PipelineError(
                f"stream {self.step!r} has event time, table {table.step!r} ({', '.join(untimed)}) has none, so "
                "nothing says when the table is up to a record's time. Fix: pass watermarks="
                "WatermarkStrategy.bounded_out_of_orderness(bound_ms, idle_timeout_ms=...) to pipeline.table")
        return self._then(S.TableJoin(self._n(name, "join"), (self.step, table.step), table.step, fn, how, grace_ms,
                                      timed, self.key_serde))

    def _join_global(self, table: GlobalTable, fn: Callable[[Any, Any], Any], how: str, grace_ms: int | None,
                     key: Callable[[Any], Any] | None, name: str | None) -> Stream:
        if table.pipeline is not self.pipeline:
            raise PipelineError("join takes a global table of the same pipeline")
        if key is None:
            raise PipelineError(f"a join with global table {table.step!r} needs key=lambda value: <the table's key "
                                "for the record>")
        if how not in ("inner", "left"):
            raise PipelineError(f"join how={how!r}: use 'inner' or 'left'")
        if grace_ms is not None and (type(grace_ms) is not int or grace_ms < 0):
            raise PipelineError(f"grace_ms must be an int >= 0 or None, got {grace_ms!r}")
        p = self.pipeline
        step = p.steps[table.step]
        timed = any(s.watermarks is not None for s in p.upstream_sources(self.step))
        if timed and step.watermarks is None:  # type: ignore[attr-defined]
            raise PipelineError(
                f"stream {self.step!r} has event time, global table {table.step!r} "
                f"({step.topic.name}) has none, so nothing says when the table is up to a "  # type: ignore[attr-defined]
                "record's time. Fix: pass watermarks=WatermarkStrategy.bounded_out_of_orderness(bound_ms, "
                "idle_timeout_ms=...) to pipeline.global_table")
        return self._then(S.GlobalTableJoin(self._n(name, "join"), (self.step,), table.step, key, fn, how, grace_ms,
                                            timed, self.key_serde))

    def as_table(self, *, history_ms: int = DAY_MS, name: str | None = None) -> Table:
        """This stream as a table: each record is the new value of its key (``None`` deletes),
        e.g. an aggregate's results. See ``Pipeline.table``."""
        step = self._then(S.Table(self._n(name, "table"), (self.step,), _history(history_ms), self.key_serde))
        return Table(self.pipeline, step.step, self.key_serde)

    def to(self, topic: Topic | str, *, name: str | None = None) -> Stream:
        """Produce every record to ``topic`` (inside the checkpoint's transaction)."""
        t = Topic(topic) if isinstance(topic, str) else topic
        return self._then(S.Sink(self._n(name, "to"), (self.step,), t))


class Table:
    """A keyed, versioned table inside a pipeline (``Pipeline.table``, ``Stream.as_table``):
    join streams with it (``Stream.join``), or read its changes as a stream."""

    __slots__ = ("key_serde", "pipeline", "step")

    def __init__(self, pipeline: Pipeline, step: str, key_serde: Serde) -> None:
        self.pipeline, self.step, self.key_serde = pipeline, step, key_serde

    def to_stream(self) -> Stream:
        """The table's updates as a stream, deletes included (value None)."""
        return Stream(self.pipeline, self.step, self.key_serde)

    def join(self, other: Table, fn: Callable[[Any, Any], Any], *, how: str = "inner",
             history_ms: int = DAY_MS, name: str | None = None) -> Table:
        """The two tables joined on their key: a table whose value at any time is
        ``fn(left row, right row)`` of the two rows at that time. ``how``: ``"inner"`` (a
        value while both have a row), ``"left"`` (while this one has; ``right`` may be None)
        or ``"outer"`` (while either has). The joined table keeps its versions over
        ``history_ms`` and is stored under ``name``. Both tables must be keyed alike."""
        if not isinstance(other, Table) or other.pipeline is not self.pipeline or other.step == self.step:
            raise PipelineError("a table joins another table of the same pipeline")
        if how not in ("inner", "left", "outer"):
            raise PipelineError(f"table join how={how!r}: use 'inner', 'left' or 'outer'")
        if not same_key_bytes(self.key_serde, other.key_serde):
            raise PipelineError(
                f"table {self.step!r} is keyed with {_serde_name(self.key_serde)}, table {other.step!r} with "
                f"{_serde_name(other.key_serde)}: equal keys would reach different partitions and never meet. Fix: "
                "give both topics the same key serde")
        p = self.pipeline
        out = p._name(name, "table")
        join = p._add(S.TableTableJoin(p._name(f"{out}.join", "join"), (self.step, other.step), fn, how, out,
                                       self.key_serde))
        p._add(S.Table(out, (join.name,), _history(history_ms), self.key_serde))
        return Table(p, out, self.key_serde)



class GlobalTable:
    """A table every process holds whole (``Pipeline.global_table``): join streams with it
    by a key taken from each record (``Stream.join(global_table, fn, key=...)``)."""

    __slots__ = ("key_serde", "pipeline", "step")

    def __init__(self, pipeline: Pipeline, step: str, key_serde: Serde) -> None:
        self.pipeline, self.step, self.key_serde = pipeline, step, key_serde


def _history(ms: int) -> int:
    if type(ms) is not int or ms < 0:
        raise PipelineError(f"history_ms must be an int >= 0, got {ms!r}")
    return ms


def same_key_bytes(a: Serde, b: Serde) -> bool:
    """Whether two key serdes write the same bytes for the same key: the same class, and the
    same settings where the class shows them (its ``repr``)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    return type(a).__repr__ is object.__repr__ or repr(a) == repr(b)


def _serde_name(serde: Serde) -> str:
    return f"{type(serde).__name__}()" if type(serde).__repr__ is object.__repr__ else repr(serde)


class WindowedStream:
    """A keyed stream grouped into windows; one of the methods below makes it a stream again."""

    __slots__ = ("early", "late", "lateness", "stream", "windows")

    def __init__(self, stream: Stream, windows: WindowSpec, lateness: int, late: Topic | None,
                 early: bool) -> None:
        self.stream, self.windows, self.lateness, self.late, self.early = stream, windows, lateness, late, early

    def _step(self, fn: WindowFunction, name: str | None, kind: str) -> Stream:
        if isinstance(self.windows, SessionWindows) and fn.merge is None:
            raise PipelineError("session windows merge accumulators: pass merge=... to aggregate")
        s = self.stream
        step = S.WindowStep(s._n(name, kind), (s.step,), self.windows, fn, self.lateness, self.late, self.early,
                            s.key_serde)
        return s._then(step)

    def aggregate(self, init: Callable[[], Any], add: Callable[[Any, Any], Any], *,
                  merge: Callable[[Any, Any], Any] | None = None, result: Callable[[Any], Any] | None = None,
                  name: str | None = None) -> Stream:
        """One accumulator per window: ``add(acc, value)``, ``merge(acc, acc)`` (sessions),
        and the emitted ``result(acc)`` (the accumulator itself by default)."""
        return self._step(aggregating(init, add, merge, result), name, "window")

    def reduce(self, fn: Callable[[Any, Any], Any], *, name: str | None = None) -> Stream:
        """``fn(a, b)`` over the window's values."""
        return self._step(aggregating(_Unset, lambda acc, v: v if acc is _Unset else fn(acc, v),
                                      lambda a, b: b if a is _Unset else a if b is _Unset else fn(a, b),
                                      None), name, "window")

    def count(self, *, name: str | None = None) -> Stream:
        return self._step(aggregating(int, lambda acc, _v: acc + 1, operator.add, None), name, "window")

    def sum(self, fn: Callable[[Any], Any] | None = None, *, name: str | None = None) -> Stream:
        f = fn or _identity
        return self._step(aggregating(int, lambda acc, v: acc + f(v), operator.add, None), name, "window")

    def apply(self, fn: Callable[[Any, Window, list[Any]], Any], *, name: str | None = None) -> Stream:
        """A full window function: ``fn(key, window, elements)`` when the window fires."""
        return self._step(full(fn), name, "window")


class ConnectedStreams:
    __slots__ = ("left", "right")

    def __init__(self, left: Stream, right: Stream) -> None:
        _distinct(left, right)
        self.left, self.right = left, right

    def process(self, function: CoProcessFunction, *, name: str | None = None) -> Stream:
        left = self.left
        return left._then(S.CoProcess(left._n(name, "co_process"), (left.step, self.right.step), function,
                                      left.key_serde))


def _distinct(left: Stream, right: Stream) -> None:
    if left.step == right.step:
        raise PipelineError("a two-input step needs two different streams")


def _identity(v: Any) -> Any:
    return v


class _UnsetType:
    """Marks an accumulator that has seen no value yet (distinct from None and 0)."""

    def __call__(self) -> _UnsetType:
        return self

    def __repr__(self) -> str:
        return "<unset>"


_Unset = _UnsetType()
