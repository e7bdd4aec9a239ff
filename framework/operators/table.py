"""Tables and the stream-table join by event time.

A table step keeps, per key, the key's versions: ``[timestamp, value]`` pairs in timestamp
order (a ``None`` value is a delete), in its store under the state ``table``. Versions
whose validity ended more than ``history_ms`` before the table's time (the later of its
watermark and the key's newest version) are dropped when the key is next updated; the
newest version at or before that time stays, since it is still the value there.

A join step reads the table's store (the same task: stream and table are co-partitioned).
On event time a stream record waits in the join's store until the table's watermark
reaches its timestamp (or the join's, the minimum of the stream's and the table's without
idle inputs, when the table's partition is idle): every table update at or before it that
is not late has arrived, so it joins the value as of its time whatever the order in which
the two topics were read. ``grace_ms`` bounds the wait: once the stream's
own watermark passes ``timestamp + grace_ms`` the record joins what the table holds. A
record whose grace the stream's watermark has passed already when it arrives joins at once,
with what the table holds then: its grace timer would be due already, but fire only at the
stream's next advance, with whatever the table had gained by then.
Without event time a record joins the table's latest value when it arrives.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from framework.operators.aggregate import require_key
from framework.operators.basic import user_error
from framework.state.keys import keyed, state_prefix
from framework.time.timers import TimerService
from framework.time.watermarks import NO_WATERMARK, checked

if TYPE_CHECKING:
    from framework.operators.context import TaskContext
    from framework.pipeline import steps as S

TABLE_STATE = "table"
HELD_STATE = "held"
TABLE_PREFIX = state_prefix(TABLE_STATE)


def as_of(versions: list[list[Any]] | None, ts: int) -> Any:
    """The value of a key's ``versions`` at ``ts``: the newest version at or before it
    (``None``: no version yet, or a delete)."""
    if not versions:
        return None
    i = bisect_right(versions, ts, key=_ts)
    return versions[i - 1][1] if i else None


def latest(versions: list[list[Any]] | None) -> Any:
    return versions[-1][1] if versions else None


def _ts(version: list[Any]) -> int:
    return version[0]


def add_version(versions: list[list[Any]], ts: int, value: Any, cutoff: int) -> list[list[Any]]:
    """``versions`` with ``[ts, value]`` in place (replacing a version of the same timestamp:
    the later update wins, and no lookup could see the earlier), without the versions no
    lookup at or after ``cutoff`` can see. A key whose only version is a delete at or before
    ``cutoff`` has nothing left to keep."""
    i = bisect_right(versions, ts, key=_ts)
    if i and versions[i - 1][0] == ts:
        versions[i - 1][1] = value
    else:
        versions.insert(i, [ts, value])
    keep = bisect_right(versions, cutoff, key=_ts) - 1  # the newest version at or before cutoff
    if keep > 0:
        del versions[:keep]
    if len(versions) == 1 and versions[0][1] is None and versions[0][0] <= cutoff:
        return []
    return versions


def put_version(store: Any, skey: bytes, ts: int, value: Any, history: int) -> bool:
    """Keep ``[ts, value]`` among the versions of ``skey`` (``add_version``); False, and
    nothing kept, when it is older than the key's history (more than ``history`` before its
    newest version: no lookup may see it, as Kafka Streams' versioned stores drop it). The
    history is the key's own, never the watermark's, so the same updates in the same order
    give the same versions wherever they are applied: live, rebuilt from the table's topic,
    or replayed."""
    versions = store.get(skey) or []
    newest = versions[-1][0] if versions else ts
    if ts < newest - history:
        return False
    versions = add_version(versions, ts, value, max(newest, ts) - history)
    store.put(skey, versions) if versions else store.delete(skey)
    return True


def build_table(step: S.Table, ctx: TaskContext, down: S.Push) -> S.Push:
    """Keep each update as a version of its key, then pass it on (the table's changes)."""
    store, name, ks, history = ctx.store(step.name), step.name, step.key_serde.serialize, step.history_ms
    clock, count = ctx.clock_for(name), ctx.count
    late_metric, expired_metric = f"late_records.{name}", f"expired_records.{name}"

    def push(k: Any, v: Any, ts: int) -> None:
        if k is None:
            require_key(k, name)
        ts = ts if type(ts) is int and ts >= 0 else checked(ts, name)
        if not put_version(store, keyed(TABLE_PREFIX, ks(k)), ts, v, history):
            count(expired_metric)
            return
        wm = clock.watermark
        if wm != NO_WATERMARK and ts <= wm:
            count(late_metric)  # kept: later lookups see it; records already joined do not change
        down(k, v, ts)

    return push


def rebuild_table(step: S.Table, source: S.Source, store: Any,
                  records: Iterable[tuple[int, bytes | None, bytes | None, int]]) -> None:
    """Apply records of a table's own topic (``(offset, key, value, Kafka timestamp)``) to its
    ``store`` as ``build_table`` does when the task reads them: the topic's serdes, the
    source's timestamps, ``put_version``. A restore of a table read from its topic (which has
    no changelog) runs this up to the group's committed offset. A record the task refused
    (it could not be decoded, had no key or no usable timestamp: a dead letter then) is
    skipped again."""
    t, wm = source.topic, source.watermarks
    kd, vd = t.key_serde.bind(t.name, True).deserialize, t.value_serde.bind(t.name, False).deserialize
    ks, history = step.key_serde.serialize, step.history_ms
    assign = None if wm is None else wm.assigner(source.name)
    for _offset, kb, vb, kafka_ts in records:
        if kb is None:
            continue
        try:
            k, v = kd(kb), (None if vb is None else vd(vb))
            ts = checked(kafka_ts if assign is None else assign(v, kafka_ts), step.name)
            skey = keyed(TABLE_PREFIX, ks(k))
        except Exception:  # noqa: BLE001, S112 - the task's dead letter: no version came of it
            continue
        put_version(store, skey, ts, v, history)


def _joiner(step: S.TableJoin | S.GlobalTableJoin, ctx: TaskContext, down: S.Push) -> Callable[..., None]:
    """``joined(key, value, row, ts)``: ``fn(value, row)`` downstream; an inner join counts
    and drops a record without a row (``unmatched.<step>``)."""
    name, fn, inner, count = step.name, step.fn, step.how == "inner", ctx.count
    unmatched = f"unmatched.{name}"

    def joined(k: Any, v: Any, row: Any, ts: int) -> None:
        if row is None and inner:
            count(unmatched)
            return
        try:
            out = fn(v, row)
        except Exception as exc:
            raise user_error(name, exc) from exc
        down(k, out, ts)

    return joined


class _Waiting:
    """A join's stream records waiting in its store until the table is known up to their
    time (``held`` state, ``event`` timers at their timestamps, ``grace`` timers at timestamp
    + ``grace_ms``); released in timestamp order, each joined with ``lookup(key bytes, value,
    timestamp)``."""

    def __init__(self, step: S.TableJoin | S.GlobalTableJoin, ctx: TaskContext,
                 lookup: Callable[[bytes, Any, int], Any], joined: Callable[..., None]) -> None:
        self.name, self.ctx, self.lookup, self.joined = step.name, ctx, lookup, joined
        self.store, self.kd = ctx.store(step.name), step.key_serde.deserialize
        self.prefix = state_prefix(HELD_STATE)
        self.at_time = TimerService(self.store, "event")
        self.grace = step.grace_ms
        self.by_grace = None if step.grace_ms is None else TimerService(self.store, "grace")

    def hold(self, kb: bytes, v: Any, ts: int) -> None:
        hkey = keyed(self.prefix, kb)
        self.store.put(hkey, [*(self.store.get(hkey) or ()), [ts, v]])
        self.at_time.register(ts, kb)
        if self.by_grace is not None:
            self.by_grace.register(ts + self.grace, kb)  # type: ignore[operator]

    def past_grace(self, ts: int, stream_watermark: int) -> bool:
        """Whether a record at ``ts`` is ``grace_ms`` or more behind the stream's watermark
        already (as a grace timer fires: at ``ts + grace_ms <= watermark``): it waits no more."""
        return self.grace is not None and ts + self.grace <= stream_watermark

    def release(self, kb: bytes, upto: int) -> None:
        """Join and emit ``kb``'s held records at or before ``upto``, in timestamp order."""
        store, hkey = self.store, keyed(self.prefix, kb)
        held = store.get(hkey)
        if not held:
            return
        due = [r for r in held if r[0] <= upto]
        if not due:
            return
        rest = [r for r in held if r[0] > upto]
        store.put(hkey, rest) if rest else store.delete(hkey)
        for ts in {r[0] for r in due}:  # released either way: neither timer is needed any more
            self.at_time.delete(ts, kb)
            if self.by_grace is not None:
                self.by_grace.delete(ts + self.grace, kb)  # type: ignore[operator]
        key = self.kd(kb)
        for ts, v in sorted(due, key=_ts):
            try:
                self.joined(key, v, self.lookup(kb, v, ts), ts)
            except Exception as exc:  # noqa: BLE001 - user code, outside a record
                self.ctx.timer_failed(self.name, ts, kb, exc.__cause__ or exc)

    def known_until(self, watermark: int) -> None:
        """The table is known up to ``watermark``: release what waited for it."""
        for t, kb, _ in self.at_time.due(watermark):
            self.release(kb, t)

    def stream_at(self, watermark: int) -> None:
        """The stream's own watermark: release what waited ``grace_ms`` past its time."""
        if self.by_grace is not None:
            for t, kb, _ in self.by_grace.due(watermark):
                self.release(kb, t - self.grace)  # type: ignore[operator]


def build_table_join(step: S.TableJoin, ctx: TaskContext, down: S.Push) -> dict[str, S.Push]:
    """The stream's records joined with the table's value as of their time."""
    name, table, ks = step.name, ctx.store(step.table), step.key_serde.serialize
    stream_parent, table_parent = step.parents
    joined = _joiner(step, ctx, down)

    def ignore(k: Any, v: Any, ts: int) -> None:
        """Table updates are in the table's store already; they release nothing by themselves
        (the watermarks do)."""

    if not step.by_event_time:
        def latest_push(k: Any, v: Any, ts: int) -> None:
            if k is None:
                require_key(k, name)
            joined(k, v, latest(table.get(keyed(TABLE_PREFIX, ks(k)))), ts)

        return {stream_parent: latest_push, table_parent: ignore}

    def lookup(kb: bytes, _v: Any, ts: int) -> Any:
        return as_of(table.get(keyed(TABLE_PREFIX, kb)), ts)

    waiting = _Waiting(step, ctx, lookup, joined)
    clock = ctx.clock_for(name)  # min(stream, table), without idle inputs: the stream's when the table idles
    table_clock = ctx.input_clock(name, table_parent)
    stream_clock = ctx.input_clock(name, stream_parent)

    def stream_push(k: Any, v: Any, ts: int) -> None:
        if k is None:
            require_key(k, name)
        ts = ts if type(ts) is int and ts >= 0 else checked(ts, name)
        kb = ks(k)
        # the table is known up to here already, or the record's grace is over already
        if ts <= table_clock.watermark or ts <= clock.watermark or waiting.past_grace(ts, stream_clock.watermark):
            joined(k, v, lookup(kb, v, ts), ts)
        else:
            waiting.hold(kb, v, ts)

    ctx.on_watermark(name, waiting.known_until)  # the table idle: the stream's watermark alone
    ctx.on_input_watermark(name, table_parent, waiting.known_until)  # the table up to a record's time
    if step.grace_ms is not None:
        ctx.on_input_watermark(name, stream_parent, waiting.stream_at)
    return {stream_parent: stream_push, table_parent: ignore}


def build_table_table_join(step: S.TableTableJoin, ctx: TaskContext, down: S.Push) -> dict[str, S.Push]:
    """Two tables joined on their key into a table whose value at any time is ``fn(left at
    that time, right at that time)``: an update of one side gives the joined value at its
    timestamp, and again at each version of the other side up to this side's next version and
    at that version (what an update arriving out of order changes). A time without a joined
    value gets a delete. So the joined table's versions are the same whatever the order in
    which the two sides' updates arrive."""
    name, ks, fn, how = step.name, step.key_serde.serialize, step.fn, step.how
    left_parent, right_parent = step.parents
    stores = (ctx.store(left_parent), ctx.store(right_parent))

    def combine(lv: Any, rv: Any) -> Any:
        if (lv is None and how != "outer") or (rv is None and how == "inner") or (lv is None and rv is None):
            return None
        try:
            return fn(lv, rv)
        except Exception as exc:
            raise user_error(name, exc) from exc

    def side(i: int) -> S.Push:
        mine_store, other_store = stores[i], stores[1 - i]

        def push(k: Any, v: Any, ts: int) -> None:
            skey = keyed(TABLE_PREFIX, ks(k))
            mine, other = mine_store.get(skey) or [], other_store.get(skey) or []
            nxt = bisect_right(mine, ts, key=_ts)
            until = mine[nxt][0] if nxt < len(mine) else None
            at = [ts] + [t for t, _ in other if t > ts and (until is None or t < until)]
            if until is not None:
                at.append(until)  # this side's next version: the joined value there, in case none was kept
            for t in at:
                sides = (as_of(mine, t), as_of(other, t))
                down(k, combine(*(sides if i == 0 else sides[::-1])), t)

        return push

    return {left_parent: side(0), right_parent: side(1)}


def build_global_join(step: S.GlobalTableJoin, ctx: TaskContext, down: S.Push) -> S.Push:
    """The stream's records joined with a global table's row for ``key(value)``, as of their
    time on event time (waiting for the global table's watermark), else its latest row."""
    name, key_fn = step.name, step.key
    table = ctx.global_table(step.table)
    rows, table_key = table.store, table.step.key_serde.serialize
    joined = _joiner(step, ctx, down)

    def row_key(v: Any) -> bytes:
        try:
            return keyed(TABLE_PREFIX, table_key(key_fn(v)))
        except Exception as exc:
            raise user_error(name, exc) from exc

    if not step.by_event_time:
        def latest_push(k: Any, v: Any, ts: int) -> None:
            joined(k, v, latest(rows.get(row_key(v))), ts)

        return latest_push

    def lookup(_kb: bytes, v: Any, ts: int) -> Any:
        return as_of(rows.get(row_key(v)), ts)

    waiting, ks = _Waiting(step, ctx, lookup, joined), step.key_serde.serialize
    clock = ctx.clock_for(name)  # the stream's

    def known_until() -> int:
        """Up to when the table is known: its watermark, or the stream's when it is idle."""
        return max(table.watermark, clock.watermark) if table.all_idle else table.watermark

    def push(k: Any, v: Any, ts: int) -> None:
        if k is None:
            require_key(k, name)
        ts = ts if type(ts) is int and ts >= 0 else checked(ts, name)
        if ts <= known_until() or waiting.past_grace(ts, clock.watermark):
            joined(k, v, lookup(b"", v, ts), ts)
        else:
            row_key(v)  # a key function that fails does so now, for this record
            waiting.hold(ks(k), v, ts)

    def on_table(wm: int) -> None:
        ctx.current = None  # between records: what is released has no record in hand
        waiting.known_until(wm)

    def on_stream(wm: int) -> None:
        if table.all_idle:
            waiting.known_until(wm)
        waiting.stream_at(wm)

    ctx.on_global_watermark(step.table, name, on_table)
    ctx.on_watermark(name, on_stream)
    ctx.on_processing_time(name, lambda _now: waiting.known_until(known_until()))  # after a restart: ahead already
    return push
