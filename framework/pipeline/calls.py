"""What users write for steps that call other services: ``map_async`` and ``process_async``
(docs/async.md), as Flink's ``AsyncDataStream`` with its ``AsyncRetryStrategies``.

- ``AsyncCall``: what one call sees besides the record: its key, timestamp, attempt, the
  input record it was made from, and an ``idempotency_key`` that is the same for every
  attempt and every re-issue of the record after a restart (a call may be made twice: pass
  it on, e.g. as an ``Idempotency-Key`` header, so the other service can tell).
- ``AsyncFunction``: a function object whose ``open``/``close`` are awaited on the calls'
  event loop, once per task (a client with a connection pool: ``aiohttp.ClientSession``).
- ``Retry``: when a failed or unwanted answer is asked again, and after how long.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["AsyncCall", "AsyncFunction", "Retry"]


@dataclass(frozen=True, slots=True)
class AsyncCall:
    """One call of an async step's function, for one record.

    ``origin``: the input record it was made from, ``topic[partition]@offset`` (for a record
    that crossed a repartition topic, the source record it came from); ``idempotency_key``:
    ``<service>/<step>/<origin>``, the same for every attempt and for the call made again after
    a restart; ``attempt``: 1 for the first try."""

    key: Any
    timestamp: int
    origin: str
    idempotency_key: str
    attempt: int


class AsyncFunction:
    """An async step's function with a life of its own: subclass and override ``__call__``
    (``map_async``: ``async def __call__(self, value, call)``, returning the new value;
    ``process_async``: ``async def __call__(self, key, value, call)``, returning the values to
    emit), and optionally ``open`` and ``close``. Each task gets its own deep copy of the
    object, opened on the calls' event loop before its first call and closed when the task
    stops, so a client made in ``open`` is used from that loop only."""

    async def open(self) -> None:
        """Before the task's first call: make clients here."""

    async def close(self) -> None:
        """When the task stops (its calls in flight were cancelled)."""


Predicate = Callable[[Any], bool]


def _always(_: Any) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class Retry:
    """When a call is made again: up to ``attempts`` calls in all, while ``on_exception(exc)``
    (a call that raised or timed out: ``TimeoutError``) or ``on_result(result)`` says so,
    waiting ``delay_ms`` before the second, multiplied by ``multiplier`` each time after, at
    most ``max_delay_ms``. A record whose last attempt fails goes to the dead-letter topic
    with the exception (or stops the service, ``on_error=fail``); a result ``on_result``
    refuses on the last attempt is emitted as it is."""

    attempts: int = 1
    delay_ms: int = 0
    multiplier: float = 1.0
    max_delay_ms: int = 60_000
    on_exception: Predicate = _always
    on_result: Predicate | None = None

    @classmethod
    def none(cls) -> Retry:
        """One attempt: a failure is final."""
        return cls()

    @classmethod
    def fixed(cls, attempts: int, delay_ms: int, *, on_exception: Predicate = _always,
              on_result: Predicate | None = None) -> Retry:
        """Up to ``attempts`` calls, ``delay_ms`` apart (Flink's fixed-delay strategy)."""
        return cls(attempts, delay_ms, 1.0, delay_ms, on_exception, on_result)

    @classmethod
    def exponential(cls, attempts: int, initial_delay_ms: int, max_delay_ms: int, multiplier: float = 2.0, *,
                    on_exception: Predicate = _always, on_result: Predicate | None = None) -> Retry:
        """Up to ``attempts`` calls, waiting ``initial_delay_ms``, then ``multiplier`` times as
        long each time, at most ``max_delay_ms`` (Flink's exponential back-off strategy)."""
        return cls(attempts, initial_delay_ms, multiplier, max_delay_ms, on_exception, on_result)

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"Retry(attempts={self.attempts}): at least 1 (the first call)")
        if self.delay_ms < 0 or self.max_delay_ms < 0 or self.multiplier < 1.0:
            raise ValueError("Retry: delays are 0 or more milliseconds, and the multiplier at least 1.0")

    def delay_s(self, attempt: int) -> float:
        """The wait after failed attempt ``attempt`` (1 for the first)."""
        return min(self.delay_ms * self.multiplier ** (attempt - 1), self.max_delay_ms) / 1000

    def describe(self) -> dict[str, Any]:
        """The strategy's numbers (its predicates are code: not part of it)."""
        return {"attempts": self.attempts, "delay_ms": self.delay_ms, "multiplier": self.multiplier,
                "max_delay_ms": self.max_delay_ms}


def takes_call(fn: Callable[..., Awaitable[Any]], plain: int) -> bool:
    """Whether ``fn`` takes an ``AsyncCall`` after its ``plain`` record arguments (value, or
    key and value): a function may leave it out."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin or a C function: passed what it is declared with
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return any(p.kind is p.VAR_POSITIONAL for p in params) or len(positional) > plain
