"""Step definitions: immutable, user-facing descriptions of what each step does.

Each step builds its logic for one task with ``build(ctx, down)``, returning the
``push(key, value, timestamp)`` closure that the task calls per record; ``down`` is the
push of the steps after it. The logic lives in ``framework.operators``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from framework.serde import Serde

if TYPE_CHECKING:
    from framework.engine.context import TaskContext
    from framework.operators.process import ProcessContext

Push = Callable[[Any, Any, int], None]


@dataclass(frozen=True)
class Step:
    name: str
    parents: tuple[str, ...]
    kind: ClassVar[str] = "step"
    stateful: ClassVar[bool] = False

    event_time: ClassVar[bool] = False  # needs watermarks from every source upstream

    def build(self, ctx: TaskContext, down: Push) -> Push:
        raise NotImplementedError

    def build_inputs(self, ctx: TaskContext, down: Push) -> dict[str, Push]:
        """The push per parent; a multi-input step tells its inputs apart here."""
        push = self.build(ctx, down)
        return {p: push for p in self.parents}


@dataclass(frozen=True)
class Source(Step):
    topic: Any = None  # framework.pipeline.Topic
    watermarks: Any = None  # framework.time.WatermarkStrategy | None
    kind: ClassVar[str] = "source"


@dataclass(frozen=True)
class Map(Step):
    fn: Callable[[Any], Any] = None  # type: ignore[assignment]
    kind: ClassVar[str] = "map"

    def build(self, ctx: TaskContext, down: Push) -> Push:
        from framework.operators.basic import build_map

        return build_map(self, ctx, down)


@dataclass(frozen=True)
class Filter(Step):
    fn: Callable[[Any], bool] = None  # type: ignore[assignment]
    kind: ClassVar[str] = "filter"

    def build(self, ctx: TaskContext, down: Push) -> Push:
        from framework.operators.basic import build_filter

        return build_filter(self, ctx, down)


@dataclass(frozen=True)
class FlatMap(Step):
    fn: Callable[[Any], Iterable[Any]] = None  # type: ignore[assignment]
    kind: ClassVar[str] = "flat_map"

    def build(self, ctx: TaskContext, down: Push) -> Push:
        from framework.operators.basic import build_flat_map

        return build_flat_map(self, ctx, down)


@dataclass(frozen=True)
class Peek(Step):
    fn: Callable[[Any, Any, int], None] = None  # type: ignore[assignment]
    kind: ClassVar[str] = "peek"

    def build(self, ctx: TaskContext, down: Push) -> Push:
        from framework.operators.basic import build_peek

        return build_peek(self, ctx, down)


@dataclass(frozen=True)
class KeyBy(Step):
    """Re-key; the push writes to the repartition topic, whose records feed the children."""

    fn: Callable[[Any], Any] = None  # type: ignore[assignment]
    key_serde: Serde = None  # type: ignore[assignment]
    kind: ClassVar[str] = "key_by"

    def build(self, ctx: TaskContext, down: Push) -> Push:
        from framework.operators.basic import build_key_by

        return build_key_by(self, ctx)


@dataclass(frozen=True)
class Sink(Step):
    topic: Any = None
    kind: ClassVar[str] = "to"

    def build(self, ctx: TaskContext, down: Push) -> Push:
        from framework.operators.basic import build_sink

        return build_sink(self, ctx)


@dataclass(frozen=True)
class Aggregate(Step):
    init: Callable[[], Any] = None  # type: ignore[assignment]
    add: Callable[[Any, Any], Any] = None  # type: ignore[assignment]
    result: Callable[[Any], Any] | None = None
    key_serde: Serde = None  # type: ignore[assignment]
    kind: ClassVar[str] = "aggregate"
    stateful: ClassVar[bool] = True

    def build(self, ctx: TaskContext, down: Push) -> Push:
        from framework.operators.aggregate import build_aggregate

        return build_aggregate(self, ctx, down)


class ProcessFunction:
    """A keyed process function, as Flink's ``KeyedProcessFunction``.

    Subclass and override ``process``; declare state in ``open`` through the context
    (``ctx.value_state(name)``, ``ctx.map_state(name)``, ``ctx.list_state(name)``). Each task
    gets its own deep copy of the function, so attributes set in ``open`` are per task.
    Timers: ``ctx.register_event_timer(ts)`` / ``ctx.register_processing_timer(ts)`` (and
    ``delete_...``) call ``on_timer`` for the current key once the watermark (or the wall
    clock) reaches ``ts``; ``ctx.watermark`` and ``ctx.processing_time`` tell the time.
    """

    def open(self, ctx: ProcessContext) -> None:
        """Called once per task before the first record."""

    def process(self, key: Any, value: Any, ctx: ProcessContext) -> None:
        raise NotImplementedError

    def on_timer(self, timestamp: int, key: Any, ctx: ProcessContext) -> None:
        """Called when a timer registered for ``key`` fires."""


@dataclass(frozen=True)
class Process(Step):
    function: ProcessFunction | Callable[..., None] = None  # type: ignore[assignment]
    key_serde: Serde = None  # type: ignore[assignment]
    kind: ClassVar[str] = "process"
    stateful: ClassVar[bool] = True

    def build(self, ctx: TaskContext, down: Push) -> Push:
        from framework.operators.process import build_process

        return build_process(self, ctx, down)


class CoProcessFunction:
    """Two keyed inputs over shared keyed state, as Flink's ``KeyedCoProcessFunction``:
    ``process1`` gets the records of the left stream, ``process2`` those of the right."""

    def open(self, ctx: ProcessContext) -> None:
        """Called once per task before the first record."""

    def process1(self, key: Any, value: Any, ctx: ProcessContext) -> None:
        raise NotImplementedError

    def process2(self, key: Any, value: Any, ctx: ProcessContext) -> None:
        raise NotImplementedError

    def on_timer(self, timestamp: int, key: Any, ctx: ProcessContext) -> None:
        """Called when a timer registered for ``key`` fires."""


@dataclass(frozen=True)
class CoProcess(Step):
    function: CoProcessFunction = None  # type: ignore[assignment]
    key_serde: Serde = None  # type: ignore[assignment]
    kind: ClassVar[str] = "co_process"
    stateful: ClassVar[bool] = True

    def build_inputs(self, ctx: TaskContext, down: Push) -> dict[str, Push]:
        from framework.operators.process import build_co_process

        return build_co_process(self, ctx, down)


@dataclass(frozen=True)
class Union(Step):
    kind: ClassVar[str] = "union"

    def build(self, ctx: TaskContext, down: Push) -> Push:
        return down


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
        from framework.windows.definitions import is_event_time

        return is_event_time(self.windows)

    def build(self, ctx: TaskContext, down: Push) -> Push:
        from framework.windows.operators import build_window

        return build_window(self, ctx, down)


@dataclass(frozen=True)
class IntervalJoin(Step):
    lower_ms: int = 0
    upper_ms: int = 0
    fn: Callable[[Any, Any], Any] = None  # type: ignore[assignment]
    key_serde: Serde = None  # type: ignore[assignment]
    kind: ClassVar[str] = "interval_join"
    stateful: ClassVar[bool] = True
    event_time: ClassVar[bool] = True

    def build_inputs(self, ctx: TaskContext, down: Push) -> dict[str, Push]:
        from framework.operators.join import build_interval_join

        return build_interval_join(self, ctx, down)


@dataclass(frozen=True)
class WindowJoin(Step):
    windows: Any = None
    fn: Callable[[Any, Any], Any] = None  # type: ignore[assignment]
    key_serde: Serde = None  # type: ignore[assignment]
    kind: ClassVar[str] = "window_join"
    stateful: ClassVar[bool] = True
    event_time: ClassVar[bool] = True

    def build_inputs(self, ctx: TaskContext, down: Push) -> dict[str, Push]:
        from framework.operators.join import build_window_join

        return build_window_join(self, ctx, down)
