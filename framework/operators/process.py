"""Keyed process functions: user code with value/map/list state and timers per key.

``TaskProcessContext`` is the task's implementation of the public ``ProcessContext``
(``framework.pipeline.functions``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from framework.operators.aggregate import require_key
from framework.operators.basic import user_error
from framework.records import record_headers
from framework.state.views import KeyScope, ListState, MapState, ValueState
from framework.time.timers import TimerService

if TYPE_CHECKING:
    from framework.operators.context import TaskContext
    from framework.pipeline import steps as S


class TaskProcessContext:
    """What a process function sees in one task: the current key and timestamp, state, timers,
    ``emit`` (the ``ProcessContext`` interface)."""

    __slots__ = (
        "_clock",
        "_down",
        "_event",
        "_processing",
        "_scope",
        "_store",
        "_task",
        "key",
        "time_domain",
        "timestamp",
    )

    def __init__(self, task: TaskContext, step: str, down: S.Push) -> None:
        self._task = task
        self._store = task.store(step)
        self._scope = KeyScope()
        self._down = down
        self._clock = task.clock_for(step)
        self._event = TimerService(self._store, "event")
        self._processing = TimerService(self._store, "processing")
        self.key: Any = None
        self.timestamp: int = 0
        self.time_domain: str | None = None  # in on_timer: "event" or "processing"

    @property
    def partition(self) -> int:
        return self._task.partition

    @property
    def headers(self) -> list[tuple[str, bytes]]:
        msg = self._task.current
        return (record_headers(msg) or []) if msg is not None else []

    @property
    def watermark(self) -> int:
        """The step's current event-time watermark."""
        return self._clock.watermark

    @property
    def processing_time(self) -> int:
        """The task's wall clock, in ms since the epoch."""
        return self._task.now_ms()

    def emit(self, value: Any, *, key: Any = None, timestamp: int | None = None) -> None:
        """Send a record downstream: the current key and timestamp unless given."""
        self._down(self.key if key is None else key, value, self.timestamp if timestamp is None else timestamp)

    def value_state(self, name: str, default: Any = None) -> ValueState[Any]:
        return ValueState(self._store, self._scope, name, default)

    def map_state(self, name: str) -> MapState[Any]:
        return MapState(self._store, self._scope, name)

    def list_state(self, name: str) -> ListState[Any]:
        return ListState(self._store, self._scope, name)

    def register_event_timer(self, timestamp: int) -> None:
        """Call ``on_timer(timestamp, key)`` once the watermark reaches ``timestamp``."""
        self._event.register(int(timestamp), self._scope.key)

    def delete_event_timer(self, timestamp: int) -> None:
        self._event.delete(int(timestamp), self._scope.key)

    def register_processing_timer(self, timestamp: int) -> None:
        """Call ``on_timer(timestamp, key)`` once the wall clock reaches ``timestamp``."""
        self._processing.register(int(timestamp), self._scope.key)

    def delete_processing_timer(self, timestamp: int) -> None:
        self._processing.delete(int(timestamp), self._scope.key)


def _wire_timers(step: S.Step, ctx: TaskContext, pctx: TaskProcessContext, fn: Any) -> None:
    """Fire the function's timers as the watermark and the wall clock advance."""
    on_timer = getattr(fn, "on_timer", None)
    if on_timer is None:
        return
    kd, scope, name = step.key_serde.deserialize, pctx._scope, step.name  # type: ignore[attr-defined]

    def firer(timers: TimerService, domain: str) -> Callable[[int], None]:
        def fire(limit: int) -> None:
            for ts, kb, _ in timers.due(limit):
                scope.key = kb
                pctx.key, pctx.timestamp, pctx.time_domain = kd(kb), ts, domain
                try:
                    on_timer(ts, pctx.key, pctx)
                except Exception as exc:  # noqa: BLE001 - user code
                    ctx.timer_failed(name, ts, kb, exc)
            pctx.time_domain = None

        return fire

    ctx.on_watermark(name, firer(pctx._event, "event"))
    ctx.on_processing_time(name, firer(pctx._processing, "processing"))


def _keyed_call(step: S.Step, pctx: TaskProcessContext, fn: Callable[[Any, Any, TaskProcessContext], None]) -> S.Push:
    ks, scope, name = step.key_serde.serialize, pctx._scope, step.name  # type: ignore[attr-defined]

    def push(k: Any, v: Any, ts: int) -> None:
        if k is None:
            require_key(k, name)
        scope.key = ks(k)
        pctx.key, pctx.timestamp = k, ts
        try:
            fn(k, v, pctx)
        except Exception as exc:
            raise user_error(name, exc) from exc

    return push


def build_process(step: S.Process, ctx: TaskContext, down: S.Push) -> S.Push:
    pctx = TaskProcessContext(ctx, step.name, down)
    fn = copy.deepcopy(step.function)  # one instance per task, as Flink's parallel instances
    process = fn.process if hasattr(fn, "process") else fn
    if hasattr(fn, "open"):
        fn.open(pctx)
    _wire_timers(step, ctx, pctx, fn)
    return _keyed_call(step, pctx, process)


def build_co_process(step: S.CoProcess, ctx: TaskContext, down: S.Push) -> dict[str, S.Push]:
    pctx = TaskProcessContext(ctx, step.name, down)
    fn = copy.deepcopy(step.function)
    fn.open(pctx)
    _wire_timers(step, ctx, pctx, fn)
    left, right = step.parents
    return {left: _keyed_call(step, pctx, fn.process1), right: _keyed_call(step, pctx, fn.process2)}
