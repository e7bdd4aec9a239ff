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

    def build(self, ctx: TaskContext, down: Push) -> Push:
        raise NotImplementedError


@dataclass(frozen=True)
class Source(Step):
    topic: Any = None  # framework.pipeline.Topic
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
