"""What a window computes: incremental aggregation or a full window function.

Both are one ``WindowFunction``: ``init() -> acc``, ``add(acc, value) -> acc``,
``merge(acc, acc) -> acc`` (session windows merge), and ``result(key, window, acc)``.
Incremental aggregation keeps one accumulator per window; a full window function keeps
the window's elements (its accumulator is the list) and receives them when it fires.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from framework.windows.definitions import Window


@dataclass(frozen=True)
class WindowFunction:
    init: Callable[[], Any]
    add: Callable[[Any, Any], Any]
    merge: Callable[[Any, Any], Any] | None
    result: Callable[[Any, Window, Any], Any]
    # The same result from the accumulator alone, when it needs neither key nor window
    # (incremental aggregation): the operators then build no ``Window`` per result.
    of_acc: Callable[[Any], Any] | None = None

    @property
    def keeps_elements(self) -> bool:
        """A full window function's (``full``): its accumulator is the window's elements."""
        return self.add is _append


def aggregating(init: Callable[[], Any], add: Callable[[Any, Any], Any],
                merge: Callable[[Any, Any], Any] | None, result: Callable[[Any], Any] | None) -> WindowFunction:
    if result is None:
        return WindowFunction(init, add, merge, _acc, _same)
    res = result
    return WindowFunction(init, add, merge, lambda _k, _w, acc: res(acc), res)


def full(fn: Callable[[Any, Window, list[Any]], Any]) -> WindowFunction:
    """``fn(key, window, elements)`` over every element of the window, in arrival order."""
    return WindowFunction(list, _append, _concat, lambda k, w, acc: fn(k, w, list(acc)))


def _acc(_key: Any, _window: Window, acc: Any) -> Any:
    return acc


def _same(acc: Any) -> Any:
    return acc


def _append(acc: list[Any], value: Any) -> list[Any]:
    acc.append(value)
    return acc


def _concat(a: list[Any], b: list[Any]) -> list[Any]:
    return [*a, *b]
