"""Window operators: the logic of a window step for one task (no I/O).

State layout in the step's store (keys are ``framework.state.keys`` layouts):

- time windows: one accumulator per (key, window start) under ``win``;
- sessions: the key's open sessions ``[[start, end, acc], ...]`` under ``sessions``;
- count and global windows: the key's pending ``[count, acc or elements, min ts, max ts]``;
- timers: the step's ``TimerService`` (``FIRE`` at ``end − 1``, ``CLEAN`` at ``end − 1 + L``;
  a session's timers may be earlier, and re-arm at its end when they find it extended).
  Without allowed lateness (L = 0) every window in the store is one that has not fired (a
  fired window is purged at once), so its timer follows from it: the timers are then kept in
  memory only, registered again from the windows when the task starts, and none is written
  to the store or the changelog.

Lateness is Flink's, per window: a record joins each window whose cleanup time
``end − 1 + L`` is after the watermark; joining a window that already fired re-emits it;
a record with no such window goes to the late output. State is purged at cleanup time.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from framework.errors import TimestampError
from framework.operators.aggregate import require_key
from framework.operators.basic import user_error
from framework.state.keys import LEN, keyed, prefix_end, split_keyed, state_prefix
from framework.time.timers import TimerService
from framework.time.watermarks import MAX_WATERMARK, NO_WATERMARK, checked
from framework.windows.definitions import (
    CountWindows,
    GlobalWindows,
    SessionWindows,
    Window,
    window_starts,
)

if TYPE_CHECKING:
    from framework.operators.context import TaskContext
    from framework.pipeline import steps as S

FIRE, CLEAN = 0, 1
_START = struct.Struct(">Q")
_BIAS = 2**63
_MISSING = object()


def build_window(step: S.WindowStep, ctx: TaskContext, down: S.Push) -> S.Push:
    spec = step.windows
    if isinstance(spec, SessionWindows):
        return _SessionOp(step, ctx, down).push
    if isinstance(spec, (CountWindows, GlobalWindows)):
        return _CountOp(step, ctx, down).push
    op = _TimeWindowOp(step, ctx, down)
    return op.push_tumbling if op.slide == op.size else op.push


class _WindowOp:
    """What every window operator shares: state, key serdes, clocks, timers, emission."""

    def __init__(self, step: S.WindowStep, ctx: TaskContext, down: S.Push, event: bool) -> None:
        self.name = step.name
        self.ctx = ctx
        self.down = down
        self.store = ctx.store(step.name)
        self.ks, self.kd = step.key_serde.serialize, step.key_serde.deserialize
        self.fn = step.function
        self.init, self.add_fn, self.of_acc = step.function.init, step.function.add, step.function.of_acc
        self.event = event
        self.lateness = step.allowed_lateness_ms if event else 0
        self.early = step.early_firing
        self.late = ctx.late_output(step)
        self.horizon = self.lateness  # how far after a record's time its windows may end (ms)
        # the latest event time ``_now`` accepts (kept by ``_extend``); -1 on processing time: none
        self.latest = MAX_WATERMARK - self.horizon if event else -1
        domain = "event" if event else "processing"
        # with no lateness, a window's only timer (FIRE at end − 1) follows from the window itself
        self.timers = TimerService(self.store, domain, durable=self.lateness > 0)
        if not self.timers.durable:
            ctx.memory_timers(step.name, domain, self.timers)
        if event:
            self.clock = ctx.clock_for(step.name)
            ctx.on_watermark(step.name, self._on_time)
        else:
            ctx.on_processing_time(step.name, self._on_time)

    def _derive_timers(self) -> None:
        """Timers kept in memory only: one at ``end − 1`` for each window in the store (with no
        allowed lateness none of them has fired), registered when the task starts."""
        if self.timers.durable:
            return
        register = self.timers.register
        for kb, end in self._window_ends():
            register(end - 1, kb, FIRE)

    def _window_ends(self) -> Iterator[tuple[bytes, int]]:
        """``(key bytes, end)`` of every window in the store."""
        raise NotImplementedError

    def _extend(self, ms: int) -> None:
        """A record's windows may end ``ms`` later than its time (their size, a session's gap)."""
        self.horizon += ms
        if self.event:
            self.latest = MAX_WATERMARK - self.horizon

    def _now(self, ts: int) -> tuple[int, int]:
        """(the record's window time, the operator's current watermark)."""
        if self.event:
            t = checked(ts, self.name) if type(ts) is not int or ts < 0 else ts
            if t > self.latest:  # its windows, timers and results would not fit
                raise TimestampError(
                    f"event time {t} is too close to the largest Kafka timestamp (2**63 - 1 ms): its windows "
                    f"would end (and be cleaned up) {self.horizon} ms later, beyond it", None, self.name,
                    fix="check the timestamps the producer writes (or the step's timestamp assigner)")
            return t, self.clock.watermark
        return self.ctx.now_ms(), NO_WATERMARK

    def _on_time(self, limit: int) -> None:
        fire = self.fire
        for ts, kb, ns in self.timers.due(limit):
            try:
                fire(ts, kb, ns)
            except Exception as exc:  # noqa: BLE001 - user code in the window function
                self.ctx.timer_failed(self.name, ts, kb, exc)

    def fire(self, ts: int, kb: bytes, ns: int) -> None:
        raise NotImplementedError

    def emit(self, key: Any, start: int, end: int, acc: Any, ts: int) -> None:
        of_acc = self.of_acc
        value = of_acc(acc) if of_acc is not None else self.fn.result(key, Window(start, end), acc)
        self.down(key, {"start": start, "end": end, "value": value}, ts)

    def emit_now(self, key: Any, start: int, end: int, acc: Any, ts: int) -> None:
        """Emission on a record's path: user errors are the record's."""
        try:
            of_acc = self.of_acc
            value = of_acc(acc) if of_acc is not None else self.fn.result(key, Window(start, end), acc)
        except Exception as exc:
            raise user_error(self.name, exc) from exc
        self.down(key, {"start": start, "end": end, "value": value}, ts)


class _TimeWindowOp(_WindowOp):
    """Tumbling and sliding windows, on event or processing time."""

    def __init__(self, step: S.WindowStep, ctx: TaskContext, down: S.Push) -> None:
        spec = step.windows
        super().__init__(step, ctx, down, spec.clock == "event")
        self.size, self.slide, self.offset = spec.size_ms, spec.slide_ms, spec.offset_ms
        self._extend(self.size)
        self.prefix = state_prefix("win")
        self._derive_timers()

    def _window_ends(self) -> Iterator[tuple[bytes, int]]:
        prefix, size = self.prefix, self.size
        for k, _ in self.store.iter_range(prefix, prefix_end(prefix)):
            kb, start = split_keyed(prefix, k)
            yield kb, _START.unpack(start)[0] - _BIAS + size

    def push(self, k: Any, v: Any, ts: int) -> None:
        if k is None:
            require_key(k, self.name)
        t, wm = self._now(ts)
        kb = self.ks(k)
        base = keyed(self.prefix, kb)
        size, lateness = self.size, self.lateness
        added = False
        for start in window_starts(t, size, self.slide, self.offset):
            end = start + size
            if end - 1 + lateness <= wm:
                continue
            added = True
            self._add_to(k, kb, base, start, end, v, wm)
        if not added:
            self.late(k, v, ts)

    def push_tumbling(self, k: Any, v: Any, ts: int) -> None:
        """``push`` for tumbling windows (slide = size): the record's one window, no loop; on
        event time a plain timestamp in range takes ``_now``'s common case inline."""
        if k is None:
            require_key(k, self.name)
        if type(ts) is int and 0 <= ts <= self.latest:
            t, wm = ts, self.clock.watermark
        else:
            t, wm = self._now(ts)
        start = t - (t - self.offset) % self.size
        end = start + self.size
        if end - 1 + self.lateness <= wm:
            self.late(k, v, ts)
            return
        kb = self.ks(k)
        self._add_to(k, kb, self.prefix + LEN.pack(len(kb)) + kb, start, end, v, wm)

    def _add_to(self, k: Any, kb: bytes, base: bytes, start: int, end: int, v: Any, wm: int) -> None:
        """Add the record to window ``[start, end)`` of its key (``base``: the key's state prefix)."""
        skey = base + _START.pack(start + _BIAS)
        store = self.store
        acc = store.get(skey, _MISSING)
        new = acc is _MISSING
        try:
            acc = self.add_fn(self.init() if new else acc, v)
        except Exception as exc:
            raise user_error(self.name, exc) from exc
        store.put(skey, acc)
        if end - 1 <= wm:  # fired already; within allowed lateness: an updated result
            self.emit_now(k, start, end, acc, end - 1)
        else:
            if new:
                self.timers.register(end - 1, kb, FIRE)
            if self.early:
                self.emit_now(k, start, end, acc, end - 1)
        if new and self.lateness:
            self.timers.register(end - 1 + self.lateness, kb, CLEAN)

    def fire(self, ts: int, kb: bytes, ns: int) -> None:
        end = ts + 1 if ns == FIRE else ts + 1 - self.lateness
        start = end - self.size
        skey = keyed(self.prefix, kb) + _START.pack(start + _BIAS)
        if ns == FIRE:
            acc = self.store.get(skey, _MISSING)
            if acc is not _MISSING:
                self.emit(self.kd(kb), start, end, acc, end - 1)
            if self.lateness:
                return
        self.store.delete(skey)


class _SessionOp(_WindowOp):
    """Session windows: per key a list of sessions, merged when a record bridges them."""

    def __init__(self, step: S.WindowStep, ctx: TaskContext, down: S.Push) -> None:
        spec = step.windows
        super().__init__(step, ctx, down, spec.clock == "event")
        self.gap = spec.gap_ms
        self._extend(self.gap)  # a session grows by at most one gap per record
        self.prefix = state_prefix("sessions")
        merge = step.function.merge
        if merge is None:
            raise ValueError("session windows need a merge function")
        self.merge = merge
        self._derive_timers()

    def _window_ends(self) -> Iterator[tuple[bytes, int]]:
        prefix = self.prefix
        for k, sessions in self.store.iter_range(prefix, prefix_end(prefix)):
            kb = split_keyed(prefix, k)[0]
            for s in sessions:
                yield kb, s[1]

    def push(self, k: Any, v: Any, ts: int) -> None:
        if k is None:
            require_key(k, self.name)
        if type(ts) is int and 0 <= ts <= self.latest:  # ``_now``'s common case, inline
            t, wm = ts, self.clock.watermark
        else:
            t, wm = self._now(ts)
        kb = self.ks(k)
        skey = self.prefix + LEN.pack(len(kb)) + kb
        store = self.store
        sessions: list[list[Any]] | None = store.get(skey)
        start, end = lo, hi = t, t + self.gap
        keep: list[list[Any]] = []
        absorbed: list[list[Any]] = []
        if sessions:
            for s in sessions:  # the sessions the record's [t, t + gap] touches merge with it
                if s[0] <= hi and s[1] >= lo:
                    absorbed.append(s)
                    if s[0] < start:  # noqa: PLR1730 - no min()/max() call per session on the record's path
                        start = s[0]
                    if s[1] > end:  # noqa: PLR1730
                        end = s[1]
                else:
                    keep.append(s)
        lateness = self.lateness
        if end - 1 + lateness <= wm:
            self.late(k, v, ts)
            return
        # Timers are lazy: every session has a pending FIRE timer at or before its end − 1
        # (until it fired) and a CLEAN timer at or before its end − 1 + L. A merged session
        # ends no earlier than what it absorbed, so it inherits their timers; a timer that
        # finds its session extended re-arms at the new end (``fire``). Extending a session,
        # the common case, then costs no timer writes.
        acc: Any = _MISSING
        pending_fire = False
        try:
            for s in absorbed:
                pending_fire = pending_fire or s[1] - 1 > wm
                acc = s[2] if acc is _MISSING else self.merge(acc, s[2])
            acc = self.add_fn(self.init() if acc is _MISSING else acc, v)
        except Exception as exc:
            raise user_error(self.name, exc) from exc
        keep.append([start, end, acc])
        if len(keep) > 1:
            keep.sort(key=_start)
        store.put(skey, keep)
        if lateness and not absorbed:
            self.timers.register(end - 1 + lateness, kb, CLEAN)
        if end - 1 <= wm:
            self.emit_now(k, start, end, acc, end - 1)
            return
        if not pending_fire:
            self.timers.register(end - 1, kb, FIRE)
        if self.early:
            self.emit_now(k, start, end, acc, end - 1)

    def fire(self, ts: int, kb: bytes, ns: int) -> None:
        skey = keyed(self.prefix, kb)
        sessions: list[list[Any]] = self.store.get(skey) or []
        lateness = self.lateness
        delay = 0 if ns == FIRE else lateness  # a session's timer is due at its end − 1 + delay
        kept = []
        for s in sessions:
            due = s[1] - 1 + delay
            if due > ts:  # the session grew since this timer was set: re-arm at its end
                self.timers.register(due, kb, ns)
            elif due == ts:
                if ns == FIRE:
                    self.emit(self.kd(kb), s[0], s[1], s[2], s[1] - 1)
                    if not lateness:
                        continue
                else:
                    continue  # cleanup: purge
            kept.append(s)
        if len(kept) == len(sessions):
            return
        if kept:
            self.store.put(skey, kept)
        else:
            self.store.delete(skey)


def _start(session: list[Any]) -> int:
    return session[0]  # type: ignore[no-any-return]


class _CountOp:
    """Count windows (tumbling, sliding) and global windows with a count trigger.

    The result of a count window carries the timestamp of the record that completed it;
    its ``start``/``end`` are the smallest timestamp and the largest + 1 of its records.
    """

    def __init__(self, step: S.WindowStep, ctx: TaskContext, down: S.Push) -> None:
        spec = step.windows
        self.name, self.down, self.fn = step.name, down, step.function
        self.store = ctx.store(step.name)
        self.ks = step.key_serde.serialize
        self.prefix = state_prefix("count")
        if isinstance(spec, GlobalWindows):
            self.size, self.every, self.purge, self.keep_elements = None, spec.trigger.count, False, False
        else:
            slide = spec.slide
            self.size, self.every = spec.size, slide or spec.size
            self.purge, self.keep_elements = slide is None, slide is not None

    def push(self, k: Any, v: Any, ts: int) -> None:
        if k is None:
            require_key(k, self.name)
        skey = keyed(self.prefix, self.ks(k))
        st = self.store.get(skey)
        n, acc, lo, hi = st if st is not None else (0, None, ts, ts)
        n, lo, hi = n + 1, min(lo, ts), max(hi, ts)
        fn = self.fn
        try:
            if self.keep_elements:  # sliding: the last `size` elements, folded when firing
                assert self.size is not None  # count windows (global windows keep no elements)
                acc = [*(acc or ()), (ts, v)][-self.size:]
            else:
                acc = fn.add(fn.init() if st is None else acc, v)
            if n % self.every:
                self.store.put(skey, (n, acc, lo, hi))
                return
            if self.keep_elements:
                lo, hi = min(t for t, _ in acc), max(t for t, _ in acc)
                folded = fn.init()
                for _, e in acc:
                    folded = fn.add(folded, e)
                value = fn.result(k, Window(lo, hi + 1), folded)
            else:
                value = fn.result(k, Window(lo, hi + 1), acc)
        except Exception as exc:
            raise user_error(self.name, exc) from exc
        if self.purge:
            self.store.delete(skey)
        else:
            self.store.put(skey, (n, acc, lo, hi))
        self.down(k, {"start": lo, "end": hi + 1, "value": value}, ts)
