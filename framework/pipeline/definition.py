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

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from framework.errors import PipelineError
from framework.pipeline import steps as S
from framework.serde import JsonSerde, Serde, StringSerde
from framework.serde.keys import KeySerde

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")


@dataclass(frozen=True)
class Topic:
    """A Kafka topic with its serdes. ``partitions`` is used only to create it when missing."""

    name: str
    key_serde: Serde = field(default_factory=StringSerde)
    value_serde: Serde = field(default_factory=JsonSerde)
    partitions: int | None = None
    config: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise PipelineError(f"invalid topic name {self.name!r}: use letters, digits, '.', '_', '-'")


class Pipeline:
    """A service's dataflow: sources, steps, sinks and its dead-letter topic."""

    def __init__(self, name: str, *, dead_letter: str | Topic | None = None, partitions: int = 4) -> None:
        if not _NAME.match(name):
            raise PipelineError(f"invalid pipeline name {name!r}: it names the consumer group and topics")
        self.name = name
        self.default_partitions = partitions
        dlq = dead_letter or f"{name}-dead-letter"
        self.dead_letter = dlq if isinstance(dlq, Topic) else Topic(dlq)
        self.steps: dict[str, S.Step] = {}
        self.children: dict[str, list[str]] = {}

    # -- building ----------------------------------------------------------------------

    def source(self, topic: Topic | str, *, name: str | None = None) -> Stream:
        """A stream of ``topic``'s records, keyed by their Kafka key."""
        t = Topic(topic) if isinstance(topic, str) else topic
        step = self._add(S.Source(self._name(name, "source"), (), t))
        return Stream(self, step.name, t.key_serde)

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
        return f"{self.name}-{store}-changelog"

    def repartition_topic(self, step: str) -> str:
        return f"{self.name}-{step}-repartition"

    def stateful_steps(self) -> list[S.Step]:
        return [s for s in self.steps.values() if s.stateful]

    def sources(self) -> list[S.Source]:
        return [s for s in self.steps.values() if isinstance(s, S.Source)]

    def input_topics(self) -> list[str]:
        """Every topic the service consumes: sources and its own repartition topics."""
        names = [s.topic.name for s in self.sources()]
        names += [self.repartition_topic(s.name) for s in self.steps.values() if isinstance(s, S.KeyBy)]
        return names

    def sink_topics(self) -> list[Topic]:
        return [s.topic for s in self.steps.values() if isinstance(s, S.Sink)]

    def describe(self) -> str:
        lines = [f"pipeline {self.name}"]
        for s in self.steps.values():
            via = f" <- {', '.join(s.parents)}" if s.parents else ""
            lines.append(f"  {s.kind:<10} {s.name}{via}")
        return "\n".join(lines)


class Stream:
    """A stream of (key, value, timestamp) records inside a pipeline."""

    __slots__ = ("pipeline", "step", "key_serde")

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
               key_serde: Serde | None = None) -> Stream:
        """Re-key by ``fn(value)``: records go through the repartition topic of this step,
        so each key's records meet in the task that owns the key's state."""
        return self._then(S.KeyBy(self._n(name, "key_by"), (self.step,), fn, key_serde or KeySerde()),
                          key_serde or KeySerde())

    # -- keyed state -------------------------------------------------------------------

    def process(self, function: S.ProcessFunction, *, name: str | None = None) -> Stream:
        """A keyed process function with value/map/list state (see ``ProcessFunction``)."""
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

    # -- sinks -------------------------------------------------------------------------

    def to(self, topic: Topic | str, *, name: str | None = None) -> Stream:
        """Produce every record to ``topic`` (inside the checkpoint's transaction)."""
        t = Topic(topic) if isinstance(topic, str) else topic
        return self._then(S.Sink(self._n(name, "to"), (self.step,), t))


def _identity(v: Any) -> Any:
    return v


class _UnsetType:
    """Marks an accumulator that has seen no value yet (distinct from None and 0)."""

    def __call__(self) -> _UnsetType:
        return self

    def __reduce__(self) -> str:  # pickles to the same singleton
        return "_Unset"

    def __repr__(self) -> str:
        return "<unset>"


_Unset = _UnsetType()
