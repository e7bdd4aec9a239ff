"""Slow records: which step holds the member, and what a record that outlives its
transaction means (docs/operations.md, "Slow steps").

The member's loop checkpoints on time, not per batch (``TaskRunner.process`` holds what is
left when a checkpoint is due), so only one record that takes long can keep a transaction
open. A ``SlowRecords`` watchdog thread looks at the record in hand (``runner.in_hand``) a few
times a second, and at nothing on the hot path:

- a record in a step for ``warn_after_s`` or more: one WARNING naming the step (the user
  function on the loop's stack, from a sample of it), the record (``topic[partition]@offset``)
  and the time so far (from the first look that found it in hand);
- a record still in hand when its transaction is older than ``kafka.transaction_timeout_ms``:
  the broker aborts that transaction, so nothing of the interval can commit. ``overdue`` then
  holds the line that ends the member (``Service.run`` raises it in place of the client error
  that follows; a checkpoint that commits after all clears it); ``/health``'s stall names the
  record and the step (``holding``).
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from typing import Any

from framework.errors import described
from framework.headers import ORIGIN
from framework.kafka.logs import Transport
from framework.pipeline.definition import Pipeline
from framework.records import record_headers

log = logging.getLogger("framework.runtime")
_FRAMEWORK = sys.modules["framework"].__path__[0]


class SlowRecords:
    """The watchdog of one member's loop (a daemon thread between ``start`` and ``stop``)."""

    def __init__(self, pipeline: Pipeline, runner: Any, *, warn_after_s: float, transaction_timeout_s: float | None,
                 transaction_began: Callable[[], float]) -> None:
        """``runner``: the ``TaskRunner`` whose ``in_hand``/``since`` it reads;
        ``transaction_timeout_s``: None at-least-once (no transaction to outlive);
        ``transaction_began``: the monotonic time the open interval's transaction began."""
        self.runner = runner
        self.warn_after_s = warn_after_s
        self.transaction_timeout_s = transaction_timeout_s
        self.transaction_began = transaction_began
        self.steps = user_code(pipeline)
        self.warnings = 0  # slow records reported (``fw_slow_records_total``)
        self.overdue: str | None = None  # the line that ends the member (see the module docstring)
        self._seen: Any = None  # the record in hand at the last look, and the time of the first look at it
        self._since = 0.0
        self._warned: Any = None  # the record warned about
        self._overdue_since = 0.0  # the transaction ``overdue`` is about
        self._main = threading.main_thread().ident
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._watch, name="fw-slow-records", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _watch(self) -> None:
        period = min(max(self.warn_after_s / 4, 0.05), 1.0)
        while not self._stop.wait(period):
            try:
                self.check(time.monotonic())
            except Exception:  # a watchdog must not die of what it looks at
                log.debug("slow-record watchdog", exc_info=True)

    def check(self, now: float) -> None:
        """One look at the record in hand (called by the thread; a test may call it). A record
        is timed from the first look that found it in hand, so the time is short by at most one
        look's period: the loop pays nothing for it."""
        msg = self.runner.in_hand
        if msg is not self._seen:
            self._seen, self._since = msg, now
            return
        if msg is None:
            return
        took = now - self._since
        if took >= self.warn_after_s and self._warned is not msg:
            self._warned = msg
            self.warnings += 1
            step, where = self.locate()
            log.warning("record %s has been in step %s for %.1f s%s: the member checkpoints on time, but this "
                        "record holds its transaction open. A step that waits on another service can wait "
                        "without holding the member: map_async (docs/async.md). Reported once per record "
                        "slower than processing.slow_record_warning_ms (%d)", coordinates(msg),
                        step, took, f" ({where})" if where else "", round(self.warn_after_s * 1000))
        timeout, began = self.transaction_timeout_s, self.transaction_began()
        if self.overdue is not None and began != self._overdue_since:
            self.overdue = None  # a checkpoint committed after all: the broker had not aborted it yet
            Transport.fatal_explained = False
        if timeout is not None and self.overdue is None and now - began >= timeout:
            self._overdue_since = began
            step, where = self.locate()
            self.overdue = (
                f"record {coordinates(msg)} has been in step {step} for {took:.0f} s{f' ({where})' if where else ''}, "
                f"and the transaction open since the last checkpoint is older than kafka.transaction_timeout_ms "
                f"({round(timeout * 1000)}): the broker aborts it, so nothing processed since that checkpoint "
                "can commit, and the member stops. It is processed again when the member starts. Fix: make the "
                "step faster or give its calls a timeout (a step that waits on another service: map_async, "
                "docs/async.md), or raise kafka.transaction_timeout_ms above the slowest record's time (the "
                "broker caps it at transaction.max.timeout.ms, 900000 by default)")
            Transport.fatal_explained = True  # the producer's fencing to come is this, said by the member

    def holding(self, now: float | None = None) -> str | None:
        """The record that holds the loop, its step and for how long, in words (``/health``'s
        reason when the loop has not come round); None when none is in hand."""
        msg = self.runner.in_hand
        if msg is None or msg is not self._seen:
            return None
        took = (time.monotonic() if now is None else now) - self._since
        step, _where = self.locate()
        return f"record {coordinates(msg)} in step {step} for {took:.1f} s"

    def locate(self) -> tuple[str, str]:
        """The step whose user code is on the loop's stack (its name quoted, or "unknown"), and
        where (``file:line in function`` of the innermost frame outside the framework)."""
        frames = sys._current_frames()  # a sample of every thread's stack: the loop's is the main thread's
        frame = frames.get(self._main) if self._main is not None else None
        step, where = None, ""
        while frame is not None:
            code = frame.f_code
            if not where and not code.co_filename.startswith(_FRAMEWORK) and "/threading.py" not in code.co_filename:
                where = f"{code.co_filename}:{frame.f_lineno} in {code.co_name}"
            if step is None and code in self.steps:
                step = self.steps[code]
            frame = frame.f_back
        return (repr(step) if step is not None else "unknown"), where


def coordinates(msg: Any) -> str:
    """The record for people: ``orders[0]@42 (through shop-by-user-repartition[1]@7)`` when it
    carries the origin of the input it was made from, else ``topic[partition]@offset``."""
    here = f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
    origin = next((v for k, v in record_headers(msg) or () if k == ORIGIN), None)
    return described(here, None if origin is None else origin.decode("utf-8", "replace"))


def user_code(pipeline: Pipeline) -> dict[types.CodeType, str]:
    """The code objects of every step's functions (a function, a method of a function object,
    a callable object, or one held by the framework's wrappers), by step name; the
    framework's own code is left out, since steps of one kind share it."""
    out: dict[types.CodeType, str] = {}
    for step in pipeline.steps.values():
        for f in dataclasses.fields(step):
            for code in _codes(getattr(step, f.name), 3):
                if not code.co_filename.startswith(_FRAMEWORK):
                    out.setdefault(code, step.name)
    return out


def _codes(value: Any, depth: int) -> Iterator[types.CodeType]:
    if depth <= 0 or value is None or isinstance(value, (str, bytes, int, float, bool)):
        return
    if isinstance(value, types.FunctionType):
        yield value.__code__
        for cell in value.__closure__ or ():  # a wrapper's: the user function it calls
            try:
                inner = cell.cell_contents
            except ValueError:
                continue
            yield from _codes(inner, depth - 1)
        return
    if isinstance(value, types.MethodType):
        yield from _codes(value.__func__, depth)
        return
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _codes(item, depth - 1)
        return
    if callable(value) or hasattr(value, "__dict__"):  # a function object: its class's own methods
        for cls in type(value).__mro__:
            if cls is object:
                continue
            for attr in vars(cls).values():
                if isinstance(attr, types.FunctionType):
                    yield attr.__code__
        for attr in getattr(value, "__dict__", {}).values():
            yield from _codes(attr, depth - 1)
