"""Step definitions: immutable, user-facing descriptions of what each step does.

Steps are pure data: they know their name, their parents and their parameters, never how
they run. ``framework.engine.compile`` maps each kind of step to its operator (the logic in
``framework.operators``, windows in ``framework.operators.windows``), which the task calls as a
``push(key, value, timestamp)`` closure per record.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from framework.pipeline.functions import CoProcessFunction, ProcessFunction
from framework.serde.base import Serde
from framework.windows.definitions import is_event_time

Push = Callable[[Any, Any, int], None]

STATE_LAYOUT = 1
"""Version of the store layouts of docs/state-format.md, part of every step's signature."""


@dataclass(frozen=True)
class Step:
    name: str
    parents: tuple[str, ...]
    kind: ClassVar[str] = "step"
    stateful: ClassVar[bool] = False

    event_time: ClassVar[bool] = False  # needs watermarks from every source upstream

    def state_signature(self) -> dict[str, Any]:
        """What the step's state must have been written by (kept in its store): a store
        whose signature differs belongs to another kind of step and is refused at start."""
        return {"kind": self.kind, "layout": STATE_LAYOUT}


@dataclass(frozen=True)
class Source(Step):
    topic: Any = None  # framework.pipeline.Topic
    watermarks: Any = None  # framework.time.WatermarkStrategy | None
    kind: ClassVar[str] = "source"


@dataclass(frozen=True)
class Map(Step):
    fn: Callable[[Any], Any] = None  # type: ignore[assignment]
    kind: ClassVar[str] = "map"


@dataclass(frozen=True)
class Filter(Step):
    fn: Callable[[Any], bool] = None  # type: ignore[assignment]
    kind: ClassVar[str] = "filter"


@dataclass(frozen=True)
class FlatMap(Step):
    fn: Callable[[Any], Iterable[Any]] = None  # type: ignore[assignment]
    kind: ClassVar[str] = "flat_map"


@dataclass(frozen=True)
class Peek(Step):
    fn: Callable[[Any, Any, int], None] = None  # type: ignore[assignment]
    kind: ClassVar[str] = "peek"


@dataclass(frozen=True)
class KeyBy(Step):
    """Re-key; the step writes to its repartition topic, whose records feed the children.
    ``value_serde`` encodes the values there (the framework's value encoding when None)."""

    fn: Callable[[Any], Any] = None  # type: ignore[assignment]
    key_serde: Serde = None  # type: ignore[assignment]
    value_serde: Serde | None = None
    kind: ClassVar[str] = "key_by"


@dataclass(frozen=True)
class Sink(Step):
    topic: Any = None
    kind: ClassVar[str] = "to"


@dataclass(frozen=True)
class Aggregate(Step):
    init: Callable[[], Any] = None  # type: ignore[assignment]
    add: Callable[[Any, Any], Any] = None  # type: ignore[assignment]
    result: Callable[[Any], Any] | None = None
    key_serde: Serde = None  # type: ignore[assignment]
    kind: ClassVar[str] = "aggregate"
    stateful: ClassVar[bool] = True


@dataclass(frozen=True)
class Process(Step):
    function: ProcessFunction | Callable[..., None] = None  # type: ignore[assignment]
    key_serde: Serde = None  # type: ignore[assignment]
    kind: ClassVar[str] = "process"
    stateful: ClassVar[bool] = True


@dataclass(frozen=True)
class CoProcess(Step):
    function: CoProcessFunction = None  # type: ignore[assignment]
    key_serde: Serde = None  # type: ignore[assignment]
    kind: ClassVar[str] = "co_process"
    stateful: ClassVar[bool] = True


@dataclass(frozen=True)
class AsyncStep(Step):
    """A step whose function is awaited, up to ``capacity`` records at once per task
    (``map_async``: one output per record; ``process_async``, ``emit_many``: the values it
    returns). ``ordered``: outputs in input order; else as calls complete, never across a
    watermark. Its store keeps the records in flight at a checkpoint, which a restarted task
    calls again (docs/async.md)."""

    fn: Any = None  # an async function, or a framework.pipeline.calls.AsyncFunction
    capacity: int = 100
    timeout_ms: int = 10_000
    retry: Any = None  # framework.pipeline.calls.Retry
    ordered: bool = True
    emit_many: bool = False
    with_call: bool = False  # fn takes an AsyncCall after the record's arguments
    key_serde: Serde = None  # type: ignore[assignment]
    kind: ClassVar[str] = "async"
    stateful: ClassVar[bool] = True


@dataclass(frozen=True)
class Union(Step):
    kind: ClassVar[str] = "union"


def _windows_signature(spec: Any) -> dict[str, Any]:
    """A window spec as plain data: its class and parameters (what its state layout depends on)."""
    return {"type": type(spec).__name__, **dataclasses.asdict(spec)}


@dataclass(frozen=True)
class WindowStep(Step):
    windows: Any = None  # framework.windows.WindowSpec
    function: Any = None  # framework.windows.functions.WindowFunction
    allowed_lateness_ms: int = 0
    late: Any = None  # Topic | None
    early_firing: bool = False
    key_serde: Serde = None  # type: ignore[assignment]
    kind: ClassVar[str] = "window"
    stateful: ClassVar[bool] = True

    @property
    def event_time(self) -> bool:  # type: ignore[override]
        return is_event_time(self.windows)

    def state_signature(self) -> dict[str, Any]:
        return {**super().state_signature(), "windows": _windows_signature(self.windows)}


@dataclass(frozen=True)
class IntervalJoin(Step):
    lower_ms: int = 0
    upper_ms: int = 0
    fn: Callable[[Any, Any], Any] = None  # type: ignore[assignment]
    key_serde: Serde = None  # type: ignore[assignment]
    kind: ClassVar[str] = "interval_join"
    stateful: ClassVar[bool] = True
    event_time: ClassVar[bool] = True


@dataclass(frozen=True)
class WindowJoin(Step):
    windows: Any = None
    fn: Callable[[Any, Any], Any] = None  # type: ignore[assignment]
    key_serde: Serde = None  # type: ignore[assignment]
    kind: ClassVar[str] = "window_join"
    stateful: ClassVar[bool] = True
    event_time: ClassVar[bool] = True

    def state_signature(self) -> dict[str, Any]:
        return {**super().state_signature(), "windows": _windows_signature(self.windows)}


@dataclass(frozen=True)
class Table(Step):
    """A keyed, versioned table: each key's values with their timestamps over ``history_ms``
    (``None`` values delete). Its parent is its source (a topic) or a stream (``as_table``)."""

    history_ms: int = 0
    key_serde: Serde = None  # type: ignore[assignment]
    kind: ClassVar[str] = "table"
    stateful: ClassVar[bool] = True


@dataclass(frozen=True)
class TableJoin(Step):
    """A stream joined with a table (parents: the stream, then the table step): each record
    with the table's value as of its timestamp (by event time) or its latest value."""

    table: str = ""
    fn: Callable[[Any, Any], Any] = None  # type: ignore[assignment]
    how: str = "inner"
    grace_ms: int | None = None
    by_event_time: bool = False
    key_serde: Serde = None  # type: ignore[assignment]
    kind: ClassVar[str] = "table_join"
    stateful: ClassVar[bool] = True

    @property
    def event_time(self) -> bool:  # type: ignore[override]
        return self.by_event_time


@dataclass(frozen=True)
class TableTableJoin(Step):
    """Two tables joined on their key (parents: the left and right table steps), feeding the
    table step ``output`` that keeps the joined versions."""

    fn: Callable[[Any, Any], Any] = None  # type: ignore[assignment]
    how: str = "inner"
    output: str = ""
    key_serde: Serde = None  # type: ignore[assignment]
    kind: ClassVar[str] = "table_table_join"


@dataclass(frozen=True)
class GlobalTable(Step):
    """A table every process holds whole: all partitions of ``topic``, read outside the
    consumer group (no parents, no task's state)."""

    topic: Any = None  # framework.pipeline.Topic
    watermarks: Any = None  # framework.time.WatermarkStrategy | None
    history_ms: int = 0
    key_serde: Serde = None  # type: ignore[assignment]
    kind: ClassVar[str] = "global_table"


@dataclass(frozen=True)
class GlobalTableJoin(Step):
    """A stream joined with a global table by a key taken from each record (``key``)."""

    table: str = ""
    key: Callable[[Any], Any] = None  # type: ignore[assignment]
    fn: Callable[[Any, Any], Any] = None  # type: ignore[assignment]
    how: str = "inner"
    grace_ms: int | None = None
    by_event_time: bool = False
    key_serde: Serde = None  # type: ignore[assignment]
    kind: ClassVar[str] = "global_join"
    stateful: ClassVar[bool] = True

    @property
    def event_time(self) -> bool:  # type: ignore[override]
        return self.by_event_time
