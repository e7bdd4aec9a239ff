"""Keyed process functions: user code with value/map/list state per key."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from framework.operators.aggregate import require_key
from framework.operators.basic import user_error
from framework.state.views import KeyScope, ListState, MapState, ValueState

if TYPE_CHECKING:
    from framework.engine.context import TaskContext
    from framework.pipeline import steps as S


class ProcessContext:
    """What a process function sees: the current key and timestamp, state, and ``emit``."""

    __slots__ = ("_task", "_store", "_scope", "_down", "key", "timestamp")

    def __init__(self, task: TaskContext, step: str, down: S.Push) -> None:
        self._task = task
        self._store = task.store(step)
        self._scope = KeyScope()
        self._down = down
        self.key: Any = None
        self.timestamp: int = 0

    @property
    def partition(self) -> int:
        return self._task.partition

    @property
    def headers(self) -> list[tuple[str, bytes]]:
        msg = self._task.current
        return list(msg.headers() or ()) if msg is not None else []

    def emit(self, value: Any, *, key: Any = None, timestamp: int | None = None) -> None:
        """Send a record downstream: the current key and timestamp unless given."""
        self._down(self.key if key is None else key, value, self.timestamp if timestamp is None else timestamp)

    def value_state(self, name: str, default: Any = None) -> ValueState[Any]:
        return ValueState(self._store, self._scope, name, default)

    def map_state(self, name: str) -> MapState[Any]:
        return MapState(self._store, self._scope, name)

    def list_state(self, name: str) -> ListState[Any]:
        return ListState(self._store, self._scope, name)


def build_process(step: S.Process, ctx: TaskContext, down: S.Push) -> S.Push:
    pctx = ProcessContext(ctx, step.name, down)
    fn = copy.deepcopy(step.function)  # one instance per task, as Flink's parallel instances
    process = fn.process if hasattr(fn, "process") else fn
    if hasattr(fn, "open"):
        fn.open(pctx)
    ks, scope, name = step.key_serde.serialize, pctx._scope, step.name

    def push(k: Any, v: Any, ts: int) -> None:
        if k is None:
            require_key(k, name)
        scope.key = ks(k)
        pctx.key, pctx.timestamp = k, ts
        try:
            process(k, v, pctx)
        except Exception as exc:
            raise user_error(name, exc) from exc

    return push
