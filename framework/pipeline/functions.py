"""What users subclass for keyed logic: ``ProcessFunction``, ``CoProcessFunction``, and the
``ProcessContext`` they receive (as Flink's ``KeyedProcessFunction`` and its ``Context``).

``ProcessContext`` is the interface; the operator in ``framework.operators.process`` provides
it per task. Annotate with it: ``def process(self, key, value, ctx: ProcessContext)``.
"""

from __future__ import annotations

from typing import Any, Protocol

from framework.state.views import ListState, MapState, ValueState


class ProcessContext(Protocol):
    """What a process function sees: the key and timestamp in hand, state, timers, ``emit``.

    ``key``, ``timestamp``: the record's (or, in ``on_timer``, the timer's).
    ``time_domain``: in ``on_timer``, ``"event"`` or ``"processing"``; otherwise None.
    """

    key: Any
    timestamp: int
    time_domain: str | None

    @property
    def partition(self) -> int:
        """The task's partition number."""
        ...

    @property
    def headers(self) -> list[tuple[str, bytes]]:
        """The headers of the record in hand (empty in ``on_timer``)."""
        ...

    @property
    def watermark(self) -> int:
        """The step's current event-time watermark (ms since the epoch)."""
        ...

    @property
    def processing_time(self) -> int:
        """The task's wall clock, in ms since the epoch."""
        ...

    def emit(self, value: Any, *, key: Any = None, timestamp: int | None = None) -> None:
        """Send a record downstream: the current key and timestamp unless given."""
        ...

    def value_state(self, name: str, default: Any = None) -> ValueState[Any]:
        """One value per key (``get``, ``set``, ``clear``)."""
        ...

    def map_state(self, name: str) -> MapState[Any]:
        """A sorted map per key (``get``, ``put``, ``remove``, ``contains``, ``items``, ``keys``)."""
        ...

    def list_state(self, name: str) -> ListState[Any]:
        """A list per key (``get``, ``add``, ``update``, ``clear``)."""
        ...

    def register_event_timer(self, timestamp: int) -> None:
        """Call ``on_timer(timestamp, key)`` once the watermark reaches ``timestamp``."""
        ...

    def delete_event_timer(self, timestamp: int) -> None: ...

    def register_processing_timer(self, timestamp: int) -> None:
        """Call ``on_timer(timestamp, key)`` once the wall clock reaches ``timestamp``."""
        ...

    def delete_processing_timer(self, timestamp: int) -> None: ...


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
