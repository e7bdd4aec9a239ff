"""What an operator may use of its task: its stores, clock, output and the record in hand.

The engine builds each task's context (``framework.engine.context.TaskContext``) and hands it
to the operators it compiles; this protocol is that context as the operators see it. It lives
here, in the operator layer, so that the operators do not import the engine that compiles and
drives them (docs/architecture.md, "Layers"); mypy checks that the engine's class has it all
wherever the compile step passes one (``framework.engine.compile``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from framework.records import InputRecord, Output
from framework.serde.values import ValueCodec
from framework.state.cache import CachedPartition
from framework.time.clock import Clock
from framework.time.timers import TimerService

__all__ = ["TaskContext"]


class TaskContext(Protocol):
    """One task's context, as its operators use it."""

    pipeline: Any  # the pipeline definition (framework.pipeline.definition.Pipeline)
    partition: int
    output: Output
    codec: ValueCodec  # the pipeline's value encoding (its registered types)
    current: InputRecord | None  # the record being processed, None between records

    def store(self, name: str) -> CachedPartition:
        """The store of step ``name``, for this task's partition."""
        ...

    def sender(self, topic: str) -> tuple[Callable[..., None], str]:
        """How a step sends its records to ``topic``: the call, and the topic name it passes."""
        ...

    def now_ms(self) -> int:
        """The task's wall clock, in ms since the epoch."""
        ...

    def clock_for(self, step: str) -> Clock:
        """The clock (watermark) of ``step``."""
        ...

    def on_watermark(self, step: str, fn: Callable[[int], None]) -> None:
        """Call ``fn(watermark)`` whenever ``step``'s watermark advances."""
        ...

    def input_clock(self, step: str, parent: str) -> Clock:
        """The clock of ``step``'s input ``parent`` alone."""
        ...

    def on_input_watermark(self, step: str, parent: str, fn: Callable[[int], None]) -> None:
        """Call ``fn(watermark)`` whenever the watermark of ``step``'s input ``parent`` alone
        advances (a two-input step that also waits on one side)."""
        ...

    def on_processing_time(self, step: str, fn: Callable[[int], None]) -> None:
        """Call ``fn(now_ms)`` on every wall-clock tick of the task."""
        ...

    def memory_timers(self, step: str, domain: str, timers: TimerService) -> None:
        """``step`` keeps its ``domain`` timers in memory only (``TimerService(durable=False)``):
        what inspection (``TestDriver.timers``) lists for it instead of its store's."""
        ...

    def global_table(self, name: str) -> Any:
        """The process's global table ``name`` (``framework.engine.globals.GlobalTable``)."""
        ...

    def on_global_watermark(self, table: str, step: str, fn: Callable[[int], None]) -> None:
        """Call ``fn(watermark)`` whenever global table ``table``'s watermark advances, while
        the task runs."""
        ...

    def count(self, metric: str, n: int = 1) -> None:
        """Add ``n`` to the task's counter ``metric`` (``<kind>.<step>``)."""
        ...

    def late_output(self, step: Any) -> Callable[[Any, Any, int], None]:
        """Where ``step``'s late records go."""
        ...

    def timer_failed(self, step: str, ts: int, key: bytes, exc: BaseException) -> None:
        """User code raised while a timer of ``step`` fired."""
        ...

    calls: Any  # where async steps' calls run (framework.operators.async_io.Calls)
    async_operators: list[Any]

    def on_checkpoint(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` at each checkpoint, before the stores' changes go to the changelogs."""
        ...

    def on_start(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` once the task is built and its clock restored."""
        ...

    def on_close(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` when the task stops."""
        ...

    def output_watermark(self, step: str) -> int:
        """The watermark that has left async step ``step``."""
        ...

    def advance_output(self, step: str, watermark: int) -> None:
        """Async step ``step`` lets ``watermark`` through to the steps after it."""
        ...

    def output_idle(self, step: str, idle: bool) -> None:
        """Async step ``step``'s output is idle or not."""
        ...

    def record_failed(self, msg: InputRecord, error: Any) -> None:
        """A record failed outside the record loop: dead-lettered, or raised (``on_error=fail``)."""
        ...

    def origin(self) -> bytes | None:
        """The input record the record in hand was made from, ``topic[partition]@offset``
        (what ``key_by`` writes in the ``fw.origin`` header)."""
        ...
