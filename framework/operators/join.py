"""Two-input keyed joins on event time: interval join and window join (Flink semantics).

Both keep each side's records per key in the step's store and purge them with event-time
timers, so state stays bounded; a record at or behind the step's watermark is late:
counted (``late_records.<step>``) and not joined.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from framework.operators.aggregate import require_key
from framework.operators.basic import user_error
from framework.state.keys import keyed, state_prefix
from framework.time.timers import TimerService
from framework.time.watermarks import checked
from framework.windows.definitions import window_starts

if TYPE_CHECKING:
    from framework.operators.context import TaskContext
    from framework.pipeline import steps as S

_START = struct.Struct(">Q")
_BIAS = 2**63


def build_interval_join(step: S.IntervalJoin, ctx: TaskContext, down: S.Push) -> dict[str, S.Push]:
    """Left ``l`` and right ``r`` of a key join when ``l.ts + lower <= r.ts <= l.ts + upper``."""
    store, name, ks = ctx.store(step.name), step.name, step.key_serde.serialize
    clock, late, fn = ctx.clock_for(name), ctx.late_output(step), step.fn
    timers = TimerService(store, "event")
    prefixes = (state_prefix("left"), state_prefix("right"))
    # Per side: the other side's matching range relative to our timestamp, and how long we are kept.
    ranges = ((step.lower_ms, step.upper_ms), (-step.upper_ms, -step.lower_ms))
    keep = (max(step.upper_ms, 0), max(-step.lower_ms, 0))

    def side(i: int) -> S.Push:
        mine, other = prefixes[i], prefixes[1 - i]
        lo, hi = ranges[i]
        hold = keep[i]

        def push(k: Any, v: Any, ts: int) -> None:
            if k is None:
                require_key(k, name)
            ts = ts if type(ts) is int and ts >= 0 else checked(ts, name)
            # Late at <= W, as in windows: W has purged the records kept until W (a left one at
            # W - upper), which a record at W would still match, so it could join only some of
            # its partners. Flink's IntervalJoinOperator accepts it and silently misses them.
            if ts <= clock.watermark:
                late(k, v, ts)
                return
            kb = ks(k)
            skey = keyed(mine, kb)
            store.put(skey, [*(store.get(skey) or ()), (ts, v)])
            for ots, ov in store.get(keyed(other, kb)) or ():
                if ts + lo <= ots <= ts + hi:
                    try:
                        out = fn(v, ov) if i == 0 else fn(ov, v)
                    except Exception as exc:
                        raise user_error(name, exc) from exc
                    down(k, out, max(ts, ots))
            timers.register(ts + hold, kb, i)

        return push

    def on_watermark(wm: int) -> None:
        for t, kb, i in timers.due(wm):
            skey = keyed(prefixes[i], kb)
            kept = [(ts, v) for ts, v in store.get(skey) or () if ts + keep[i] > t]
            store.put(skey, kept) if kept else store.delete(skey)

    ctx.on_watermark(name, on_watermark)
    left, right = step.parents
    return {left: side(0), right: side(1)}


def build_window_join(step: S.WindowJoin, ctx: TaskContext, down: S.Push) -> dict[str, S.Push]:
    """Per key and window, ``fn(l, r)`` for each pair when the window fires."""
    store, name, spec = ctx.store(step.name), step.name, step.windows
    ks, kd = step.key_serde.serialize, step.key_serde.deserialize
    clock, late, fn = ctx.clock_for(name), ctx.late_output(step), step.fn
    timers = TimerService(store, "event")
    prefix = state_prefix("wjoin")
    size, slide, offset = spec.size_ms, spec.slide_ms, spec.offset_ms

    def side(i: int) -> S.Push:
        def push(k: Any, v: Any, ts: int) -> None:
            if k is None:
                require_key(k, name)
            ts = ts if type(ts) is int and ts >= 0 else checked(ts, name)
            wm, kb, added = clock.watermark, ks(k), False
            for start in window_starts(ts, size, slide, offset):
                if start + size - 1 <= wm:
                    continue
                added = True
                skey = keyed(prefix, kb) + _START.pack(start + _BIAS)
                sides: tuple[list[Any], list[Any]] = store.get(skey) or ([], [])
                sides[i].append(v)
                store.put(skey, sides)
                timers.register(start + size - 1, kb)
            if not added:
                late(k, v, ts)

        return push

    def on_watermark(wm: int) -> None:
        for t, kb, _ in timers.due(wm):
            skey = keyed(prefix, kb) + _START.pack(t + 1 - size + _BIAS)
            sides = store.get(skey)
            store.delete(skey)
            if not sides:
                continue
            key = kd(kb)
            for lv in sides[0]:
                for rv in sides[1]:
                    try:
                        out = fn(lv, rv)
                    except Exception as exc:  # noqa: BLE001 - user code, outside a record
                        ctx.timer_failed(name, t, kb, exc)
                        continue
                    down(key, out, t)

    ctx.on_watermark(name, on_watermark)
    left, right = step.parents
    return {left: side(0), right: side(1)}
