"""The compile step: each kind of step (pure data, ``framework.pipeline.steps``) to its
operator (``framework.operators``; windows: ``framework.operators.windows``).

``build_step(step, ctx, down)`` returns the ``push(key, value, timestamp)`` closure of the
step for one task, per parent (a two-input step tells its inputs apart); ``down`` is the
push of the steps after it. Sources are not here: the task decodes their records itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from framework.engine.context import TaskContext
from framework.errors import PipelineError
from framework.operators.aggregate import build_aggregate
from framework.operators.async_io import build_async
from framework.operators.basic import (
    build_filter,
    build_flat_map,
    build_key_by,
    build_map,
    build_peek,
    build_sink,
)
from framework.operators.join import build_interval_join, build_window_join
from framework.operators.process import build_co_process, build_process
from framework.operators.table import (
    build_global_join,
    build_table,
    build_table_join,
    build_table_table_join,
)
from framework.operators.windows import build_window
from framework.pipeline import steps as S

Builder = Callable[[Any, TaskContext, S.Push], S.Push]
MultiBuilder = Callable[[Any, TaskContext, S.Push], dict[str, S.Push]]


def _union(step: S.Union, ctx: TaskContext, down: S.Push) -> S.Push:
    return down


_ONE_INPUT: dict[type[S.Step], Builder] = {
    S.Map: build_map,
    S.Filter: build_filter,
    S.FlatMap: build_flat_map,
    S.Peek: build_peek,
    S.KeyBy: build_key_by,
    S.Sink: build_sink,
    S.Aggregate: build_aggregate,
    S.Process: build_process,
    S.WindowStep: build_window,
    S.Union: _union,
    S.Table: build_table,
    S.GlobalTableJoin: build_global_join,
    S.AsyncStep: build_async,
}
_TWO_INPUTS: dict[type[S.Step], MultiBuilder] = {
    S.CoProcess: build_co_process,
    S.IntervalJoin: build_interval_join,
    S.WindowJoin: build_window_join,
    S.TableJoin: build_table_join,
    S.TableTableJoin: build_table_table_join,
}


def build_step(step: S.Step, ctx: TaskContext, down: S.Push) -> dict[str, S.Push]:
    """The step's push per parent, for the task of ``ctx``."""
    kind = type(step)
    one = _ONE_INPUT.get(kind)
    if one is not None:
        push = one(step, ctx, down)
        return {p: push for p in step.parents}
    two = _TWO_INPUTS.get(kind)
    if two is not None:
        return two(step, ctx, down)
    raise PipelineError(f"step {step.name!r} is a {kind.__name__}, which no operator runs")
