"""Async steps (``map_async``, ``process_async``): calls to other services, many at once,
exactly once, with Flink's async I/O semantics (docs/async.md).

The operator keeps a queue of the records in flight per task, as Flink's
``AsyncWaitOperator`` does. Its calls run on an event loop the engine supplies (``Calls``):
a thread of the member's own live and in a Spark task, the caller's own thread in the
TestDriver; results come back to the task's thread (``Calls.dispatch``), so state and outputs
are touched by one thread only.

- **Order**: ``ordered`` emits in input order; unordered emits as calls complete, but never
  across a watermark: a watermark leaves the step (``async:<step>``, the clock input of the
  steps after it) only after every record that came before it, and a record that came after
  it only after it (records are grouped in segments between watermarks).
- **Capacity**: at most ``capacity`` records not yet emitted per task. A record that would
  reach a full step is not handed to the task (``HOLD``): ``TaskRunner.process`` holds it and
  its partition's next records, goes on with the other partitions, and waits for room until
  the next checkpoint is due; then the member comes round, checkpoints and reports while a
  service it calls is slow or away.
- **Exactly once**: the records in flight at a checkpoint are written to the step's store
  (state ``inflight``, key: the record's key, then the sequence number) with the checkpoint;
  a task that starts calls them again, in order, with the watermarks between them. A call may
  thus be made twice; ``AsyncCall.idempotency_key`` is the same both times.
- **Failures**: each attempt gets ``timeout_ms``; ``Retry`` decides on another; a record
  whose last attempt fails goes to the dead-letter topic with the exception (or stops the
  service, ``on_error=fail``).
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any, Protocol, cast

from framework.errors import ProcessingError, RecordError
from framework.pipeline.calls import AsyncCall, AsyncFunction
from framework.records import InputRecord, Record, record_headers
from framework.state.keys import keyed, prefix_end, state_prefix

if TYPE_CHECKING:
    from framework.operators.context import TaskContext
    from framework.pipeline import steps as S

INFLIGHT = state_prefix("inflight")
HOLD: Any = object()
"""What a gated handler returns for a record it did not take: its async step is full
(``TaskRunner.process`` holds it and the rest of its partition until the step has room)."""


class Calls(Protocol):
    """Where an engine runs the async steps' calls (``framework.engine.calls``)."""

    def submit(self, coro: Coroutine[Any, Any, Any], done: Callable[[bool, Any], None]) -> Callable[[], Any]:
        """Run ``coro``; ``done(ok, result or exception)`` is called on the task's thread, by
        ``dispatch`` (or at once). Returns what cancels it."""
        ...

    def wait(self, timeout_s: float) -> None:
        """Until a call completes (its ``done`` waits for ``dispatch``), at most ``timeout_s``."""
        ...

    def dispatch(self) -> int:
        """Call the ``done`` of every call that completed; how many."""
        ...

    def function(self, step: str, fn: Any) -> Any:
        """What step ``step`` calls: ``fn``, or a test's stand-in for it."""
        ...

    def flush(self) -> None:
        """Start the calls submitted so far (an engine may gather them; ``wait`` and
        ``dispatch`` flush too)."""
        ...

    def close(self) -> None:
        """Cancel what is in flight: the engine stops."""
        ...


class _Entry:
    """One record in flight."""

    __slots__ = ("attempts", "cancel", "done", "emitted", "key", "latencies", "msg", "ok", "origin", "result",
                 "segment", "seq", "skey", "stored", "timeouts", "ts", "value", "wm")

    def __init__(self, seq: int, key: Any, value: Any, ts: int, msg: InputRecord, origin: str, wm: int) -> None:
        self.seq, self.key, self.value, self.ts, self.msg, self.origin, self.wm = seq, key, value, ts, msg, origin, wm
        self.done = self.ok = self.emitted = self.stored = False
        self.result: Any = None
        self.cancel: Callable[[], Any] | None = None
        self.skey = b""
        self.segment: _Segment | None = None
        self.attempts = self.timeouts = 0
        self.latencies: list[float] = []


class _Segment:
    """Unordered: the records between two watermarks, and the watermark that closes them."""

    __slots__ = ("done", "pending", "watermark")

    def __init__(self) -> None:
        self.pending: dict[int, _Entry] = {}
        self.done: list[_Entry] = []  # completed while an earlier segment was still open
        self.watermark: int | None = None


class AsyncOperator:
    """The async step of one task."""

    def __init__(self, step: S.AsyncStep, ctx: TaskContext, down: S.Push) -> None:
        self.step, self.ctx, self.down = step, ctx, down
        self.name = step.name
        self.capacity = step.capacity
        self.calls: Calls = ctx.calls
        fn = self.calls.function(step.name, step.fn)
        self.fn = copy.deepcopy(fn) if isinstance(fn, AsyncFunction) else fn  # one per task, as a ProcessFunction
        self.store = ctx.store(step.name)
        self.key_bytes = step.key_serde.serialize
        self.idempotency = f"{ctx.pipeline.name}/{step.name}/"
        self.pending = 0  # records not emitted: what the capacity bounds
        self.items: deque[_Entry | int] = deque()  # ordered: records and watermarks, in arrival order
        self.segments: deque[_Segment] = deque([_Segment()])  # unordered
        self.seq = 0
        self.closed = False
        self.latencies: list[float] = []  # call attempts' seconds since the observer last took them
        self._open: Any = None  # the AsyncFunction's open(), once per task, on the calls' loop
        self.upstream = ctx.clock_for(step.name)
        self.marker = ctx.output_watermark(step.name)  # the last watermark that came in
        ctx.on_watermark(step.name, self._on_watermark)
        ctx.on_processing_time(step.name, self._tick)
        ctx.on_checkpoint(self._persist)
        ctx.on_start(self._restore)
        ctx.on_close(self.close)
        ctx.async_operators.append(self)

    # -- records in ---------------------------------------------------------------------

    def push(self, k: Any, v: Any, ts: int) -> None:
        ctx = self.ctx
        msg = ctx.current
        if msg is None:  # a timer fired (a processing-time window's result): no input record in hand
            where = f"{self.name}[{ctx.partition}]@timer:{ts}:{self.seq}"
            msg = Record(self.name, ctx.partition, -1, None, None, ts)
        else:
            origin = ctx.origin()
            where = (origin.decode("utf-8", "replace") if origin else
                     f"{msg.topic()}[{msg.partition()}]@{msg.offset()}")
        self._enter(_Entry(self.seq, k, v, ts, msg, where, self.marker))

    def _enter(self, entry: _Entry) -> None:
        self.seq = max(self.seq, entry.seq) + 1
        self.pending += 1
        if self.step.ordered:
            self.items.append(entry)
        else:
            seg = entry.segment = self.segments[-1]
            seg.pending[entry.seq] = entry
        entry.cancel = self.calls.submit(self._attempts(entry), lambda ok, result: self._done(entry, ok, result))

    # -- the call, on the calls' event loop ------------------------------------------------

    async def _attempts(self, entry: _Entry) -> Any:
        if isinstance(self.fn, AsyncFunction):
            if self._open is None:
                self._open = asyncio.ensure_future(self.fn.open())
            if not self._open.done():
                await asyncio.shield(self._open)  # the calls that come while it opens wait for it
            elif self._open.exception() is not None:
                raise self._open.exception()  # type: ignore[misc]  # open() failed: every call fails with it
        step, fn = self.step, cast("Callable[..., Awaitable[Any]]", self.fn)  # a string: no alias made per call
        retry, timeout = step.retry, step.timeout_ms / 1000
        attempt = 0
        while True:
            attempt += 1
            entry.attempts = attempt
            began = time.perf_counter()
            limit = asyncio.timeout(timeout)
            try:
                if step.emit_many:
                    awaitable = fn(entry.key, entry.value, self._call(entry, attempt))
                elif step.with_call:
                    awaitable = fn(entry.value, self._call(entry, attempt))
                else:
                    awaitable = fn(entry.value)
                async with limit:
                    result = await awaitable
            except Exception as failure:  # noqa: BLE001 - the call's failure: retried, or the record's error
                entry.latencies.append(time.perf_counter() - began)
                exc = failure
                if limit.expired():  # the step's timeout, not a TimeoutError of the function's own
                    entry.timeouts += 1
                    exc = TimeoutError(f"no answer within timeout_ms={step.timeout_ms}")
                if attempt < retry.attempts and retry.on_exception(exc):
                    await asyncio.sleep(retry.delay_s(attempt))
                    continue
                raise exc from None
            entry.latencies.append(time.perf_counter() - began)
            if attempt < retry.attempts and retry.on_result is not None and retry.on_result(result):
                await asyncio.sleep(retry.delay_s(attempt))
                continue
            return list(result) if step.emit_many else result

    def _call(self, entry: _Entry, attempt: int) -> AsyncCall:
        return AsyncCall(entry.key, entry.ts, entry.origin, self.idempotency + entry.origin, attempt)

    # -- results out, on the task's thread ---------------------------------------------------

    def _done(self, entry: _Entry, ok: bool, result: Any) -> None:
        if self.closed or entry.done:
            return
        entry.done, entry.ok, entry.result = True, ok, result
        if entry.attempts > 1:
            self.ctx.count(f"async_retries.{self.name}", entry.attempts - 1)
        if entry.timeouts:
            self.ctx.count(f"async_timeouts.{self.name}", entry.timeouts)
        self.latencies.extend(entry.latencies)
        if self.step.ordered:
            self._drain()
            return
        seg = entry.segment
        if seg is self.segments[0]:
            del seg.pending[entry.seq]
            self._emit(entry)
            self._advance()
        else:
            assert seg is not None
            seg.done.append(entry)

    def _drain(self) -> None:
        """Ordered: every record and watermark at the head whose turn has come."""
        items = self.items
        while items:
            head = items[0]
            if isinstance(head, int):
                items.popleft()
                self.ctx.advance_output(self.name, head)
            elif head.done:
                items.popleft()
                self._emit(head)
            else:
                return

    def _advance(self) -> None:
        """Unordered: past each closed segment whose records are all out, its watermark, then
        the records of the next one that completed meanwhile."""
        segments = self.segments
        while len(segments) > 1 and not segments[0].pending:
            closed = segments.popleft()
            assert closed.watermark is not None
            self.ctx.advance_output(self.name, closed.watermark)
            head = segments[0]
            for entry in head.done:
                del head.pending[entry.seq]
                self._emit(entry)
            head.done = []

    def _emit(self, entry: _Entry) -> None:
        self.pending -= 1
        entry.emitted = True
        if entry.stored:
            self.store.delete(entry.skey)  # in this interval's write cache: gone with its checkpoint
        ctx = self.ctx
        before, ctx.current = ctx.current, entry.msg
        try:
            if not entry.ok:
                raise self._failure(entry)
            if self.step.emit_many:
                for value in entry.result:
                    self.down(entry.key, value, entry.ts)
            else:
                self.down(entry.key, entry.result, entry.ts)
        except RecordError as err:
            ctx.record_failed(entry.msg, err)
        finally:
            ctx.current = before

    def _failure(self, entry: _Entry) -> ProcessingError:
        exc: BaseException = entry.result
        tried = f" after {entry.attempts} attempts" if entry.attempts > 1 else ""
        self.ctx.count(f"async_failures.{self.name}")
        err = ProcessingError(f"the call failed{tried}: {type(exc).__name__}: {exc}", None, self.name,
                              fix="the record is in the dead-letter topic with its origin: produce it again once "
                                  "the service it calls answers (or give the step a Retry; on_error=fail stops "
                                  "the service instead)")
        err.__cause__ = exc
        return err

    def _on_watermark(self, watermark: int) -> None:
        """A watermark came in: it goes out after every record before it."""
        self.marker = watermark
        if self.step.ordered:
            if self.items:
                self.items.append(watermark)
            else:
                self.ctx.advance_output(self.name, watermark)
            return
        last = self.segments[-1]
        if len(self.segments) == 1 and not last.pending:
            self.ctx.advance_output(self.name, watermark)
        else:
            last.watermark = watermark
            self.segments.append(_Segment())

    def _tick(self, now_ms: int) -> None:
        """An idle input makes the step's output idle too, once nothing is in flight."""
        self.ctx.output_idle(self.name, self.upstream.idle and not self.pending)

    # -- checkpoint and restore --------------------------------------------------------------

    def unemitted(self) -> Iterable[_Entry]:
        if self.step.ordered:
            return (e for e in self.items if not isinstance(e, int))
        return (e for seg in self.segments for e in seg.pending.values())

    def _persist(self) -> None:
        """Checkpoint step 1's share: the records in flight that the store does not hold yet."""
        for entry in self.unemitted():
            if entry.stored:
                continue
            try:
                key = b"" if entry.key is None else self.key_bytes(entry.key)
            except Exception:  # noqa: BLE001 - a key its serde cannot write: placed by no key on a rescale
                key = b""
            entry.skey = keyed(INFLIGHT, key) + entry.seq.to_bytes(8, "big")
            msg = entry.msg
            raw = [msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), msg.timestamp()[1],
                   [list(h) for h in record_headers(msg) or ()]]
            self.store.put(entry.skey, {"seq": entry.seq, "k": entry.key, "v": entry.value, "ts": entry.ts,
                                        "w": entry.wm, "o": entry.origin, "r": raw})
            entry.stored = True

    def _restore(self) -> None:
        """The task starts (its clock restored): the records its store holds in flight are
        called again, in order, with the watermarks that came between them."""
        self.marker = self.ctx.output_watermark(self.name)
        stored = sorted(self.store.iter_range(INFLIGHT, prefix_end(INFLIGHT)), key=lambda kv: kv[1]["seq"])
        for skey, value in stored:
            if value["w"] > self.marker:
                self._on_watermark(value["w"])
            t, p, o, k, v, ts, headers = value["r"]
            msg = Record(t, p, o, k, v, ts, [(name, data) for name, data in headers])
            entry = _Entry(value["seq"], value["k"], value["v"], value["ts"], msg, value["o"], value["w"])
            entry.stored, entry.skey = True, skey
            self._enter(entry)
        if self.upstream.watermark > self.marker:
            self._on_watermark(self.upstream.watermark)

    def in_flight(self) -> int:
        return self.pending

    def close(self) -> None:
        """The task stops: its calls are cancelled and their results dropped (a restarted task
        calls again what its last checkpoint stored)."""
        self.closed = True
        for entry in self.unemitted():
            if entry.cancel is not None:
                entry.cancel()
        if isinstance(self.fn, AsyncFunction) and self._open is not None:
            self.calls.submit(self.fn.close(), lambda ok, result: None)


def build_async(step: S.AsyncStep, ctx: TaskContext, down: S.Push) -> S.Push:
    return AsyncOperator(step, ctx, down).push
