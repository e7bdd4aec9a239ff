"""docs/state-format.md is enough to read a service's state: a small reader written only from
that document (MessagePack and the byte layouts, no framework code) decodes the changelogs
of a pipeline with aggregates, windows, sessions, count windows, a process function with
every kind of state and timers, an interval join and the task clock, into exactly the
entries the service itself restores."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import msgpack

from framework import (
    CountWindows,
    JsonSerde,
    Pipeline,
    ProcessContext,
    ProcessFunction,
    SessionWindows,
    Topic,
    TumblingWindows,
    WatermarkStrategy,
)
from framework.testing import TestDriver

# --- the reader, from docs/state-format.md only ---------------------------------------------------


class Marker:
    def __init__(self, code: int) -> None:
        self.code = code


def _ext(code: int, payload: bytes) -> Any:
    if code in (1, 2, 3, 8) and not payload:
        return Marker(code)
    text = payload.decode()
    parse: dict[int, Callable[[str], Any]] = {4: datetime.fromisoformat, 5: date.fromisoformat, 6: Decimal, 7: int}
    return parse[code](text)


def _array(items: list[Any]) -> Any:
    if items and isinstance(items[0], Marker):
        code, rest = items[0].code, items[1:]
        if code == 1:
            return tuple(rest)
        if code == 2:
            return set(rest)
        if code == 3:
            return frozenset(rest)
        return ("registered", rest[0], rest[1])
    return items


def read_value(data: bytes) -> Any:
    assert data[0] == 0x01, "state format version 1"
    return msgpack.unpackb(data[1:], ext_hook=_ext, list_hook=_array, strict_map_key=False)


def read_key(key: bytes) -> tuple[Any, ...]:
    """("meta", name) | ("timer", domain, ts, record key, namespace) | ("state", name, record key, suffix)"""
    if key[0] == 0x00:
        return ("meta", key[1:].decode())
    n = key[0]
    name, rest = key[1:1 + n].decode(), key[1 + n:]
    if name.startswith("__timers."):
        return ("timer", name.removeprefix("__timers."), int.from_bytes(rest[:8], "big") - 2**63, rest[8:-1],
                rest[-1])
    if not rest:
        return ("state", name, None, b"")
    length = int.from_bytes(rest[:4], "big")
    return ("state", name, rest[4:4 + length], rest[4 + length:])


def read_changelog(records: list[tuple[bytes, bytes | None]]) -> dict[bytes, Any]:
    """The latest value of every key; a null value deletes it."""
    latest: dict[bytes, Any] = {}
    for key, value in records:
        if value is None:
            latest.pop(key, None)
        else:
            latest[key] = read_value(value)
    return latest


def win_start(suffix: bytes) -> int:
    return int.from_bytes(suffix, "big") - 2**63


# --- a real changelog ------------------------------------------------------------------------------


class Profile(ProcessFunction):
    def open(self, ctx: ProcessContext) -> None:
        self.total = ctx.value_state("total", 0)
        self.recent = ctx.list_state("recent")
        self.kinds = ctx.map_state("kinds")

    def process(self, key: Any, value: Any, ctx: ProcessContext) -> None:
        self.total.set(self.total.get() + value["amount"])
        self.recent.add((value["ts"], Decimal(value["amount"]) / 4))
        self.recent.update(self.recent.get()[-2:])
        self.kinds.put(value["kind"], {"n": (self.kinds.get(value["kind"]) or {"n": 0})["n"] + 1,
                                       "at": datetime(2026, 1, 1, 0, 0, value["ts"] % 60)})
        ctx.register_event_timer(value["ts"] + 10_000)

    def on_timer(self, timestamp: int, key: Any, ctx: ProcessContext) -> None:
        self.recent.clear()


def pipeline() -> Pipeline:
    p = Pipeline("fmt")
    events = p.source(Topic("events"), watermarks=WatermarkStrategy.bounded_out_of_orderness(100, timestamp="ts"))
    by_user = events.key_by(lambda e: e["user"], name="by-user")
    by_user.count(name="n").to(Topic("n", key_serde=JsonSerde()))
    by_user.window(TumblingWindows(1000), allowed_lateness_ms=500).aggregate(
        lambda: (0, 0), lambda acc, e: (acc[0] + 1, acc[1] + e["amount"]), merge=None, name="spend").to(
        Topic("spend", key_serde=JsonSerde()))
    by_user.window(SessionWindows(300)).count(name="sessions").to(Topic("sessions", key_serde=JsonSerde()))
    by_user.window(CountWindows(3, 2)).apply(lambda k, w, es: len(es), name="threes").to(
        Topic("threes", key_serde=JsonSerde()))
    by_user.process(Profile(), name="profile").to(Topic("profile", key_serde=JsonSerde()))
    views = by_user.filter(lambda e: e["kind"] == "view", name="views")
    buys = by_user.filter(lambda e: e["kind"] == "buy", name="buys")
    views.interval_join(buys, 0, 2000, lambda v, b: b["amount"], name="join").to(
        Topic("join", key_serde=JsonSerde()))
    return p


def events() -> list[dict[str, Any]]:
    rows, ts = [], 1_000
    for i in range(40):
        ts += 37 * (i % 5) + 11
        rows.append({"user": f"u{i % 3}", "kind": ["view", "buy", "view", "cart"][i % 4], "amount": i, "ts": ts})
    return rows


def run() -> TestDriver:
    d = TestDriver(pipeline(), partitions=2)
    for e in events():
        d.pipe("events", e, key=e["user"], partition=e["amount"] % 2)
    return d


def changelog(d: TestDriver, store: str, partition: int) -> dict[bytes, Any]:
    log = d.topics.log(d.pipeline.changelog_topic(store))[partition]
    return read_changelog([(m.key() or b"", m.value()) for m in log])


def test_the_reader_decodes_every_changelog_into_what_the_service_restores() -> None:
    d = run()
    for p in range(2):
        restored = d.dump(p)
        for store in d.pipeline.store_names():
            assert changelog(d, store, p) == restored[store], (store, p)


def test_the_layouts_mean_what_the_document_says() -> None:
    d = run()
    rows = events()
    latest = {p: {s: changelog(d, s, p) for s in d.pipeline.store_names()} for p in range(2)}
    entries = [(s, read_key(k), v) for p in range(2) for s, kv in latest[p].items() for k, v in kv.items()]

    # aggregates: state "acc" per record key (the key_by's JSON bytes)
    counts = {json.loads(rk): v for s, (kind, name, rk, _), v in
              ((s, k, v) for s, k, v in entries if k[0] == "state") if s == "n" and name == "acc"}
    assert counts == {u: sum(e["user"] == u for e in rows) for u in ("u0", "u1", "u2")}

    # signatures: one meta entry per stateful store and partition
    signatures = {(s, v["kind"]) for s, k, v in entries if k == ("meta", "step")}
    assert signatures == {("n", "aggregate"), ("spend", "window"), ("sessions", "window"), ("threes", "window"),
                          ("profile", "process"), ("join", "interval_join")}
    assert all(v["layout"] == 1 for s, k, v in entries if k == ("meta", "step"))
    assert next(v["windows"] for s, k, v in entries if k == ("meta", "step") and s == "spend") == {
        "type": "TumblingWindows", "size_ms": 1000, "offset_ms": 0, "clock": "event"}

    # windows: "win" + <start + 2^63>; the accumulator is the (count, sum) tuple; kept until
    # end - 1 + lateness (timer namespace 1), and those not fired yet wait at end - 1 (namespace 0)
    for p in range(2):
        spend = [(read_key(k), v) for k, v in latest[p]["spend"].items()]
        starts = {win_start(k[3]) for k, v in spend if k[0] == "state"}
        assert all(isinstance(v, tuple) and len(v) == 2 for k, v in spend if k[0] == "state")
        timers = {(k[2], k[4]) for k, v in spend if k[0] == "timer"}
        wm = d.watermark("spend", partition=p)
        assert timers == ({(s + 999 + 500, 1) for s in starts} | {(s + 999, 0) for s in starts if s + 999 > wm})
    assert any(latest[p]["spend"] for p in range(2))

    # sessions: a list of [start, end, count]
    for s, k, v in entries:
        if s == "sessions" and k[0] == "state":
            assert k[1] == "sessions" and all(isinstance(x, list) and x[1] - x[0] >= 300 for x in v)

    # count windows: (records so far, the last `size` (timestamp, value) tuples, lo, hi)
    for s, k, v in entries:
        if s == "threes" and k[0] == "state":
            _n, elements, _lo, _hi = v
            assert k[1] == "count" and len(elements) <= 3 and all(isinstance(e, tuple) for e in elements)

    # the process function: value, list and map state, and its event timers
    profile = {(k[1], json.loads(k[2]), k[3]): v for s, k, v in entries if s == "profile" and k[0] == "state"}
    assert {name for name, _, _ in profile} == {"total", "recent", "kinds"}
    assert profile[("total", "u1", b"")] == sum(e["amount"] for e in rows if e["user"] == "u1")
    assert all(isinstance(v, list) and isinstance(v[0][1], Decimal) for (n, _, _), v in profile.items()
               if n == "recent")
    assert isinstance(profile[("kinds", "u0", b"view")]["at"], datetime)
    event_timers = sorted((k[2], json.loads(k[3])) for s, k, v in entries if s == "profile" and k[0] == "timer")
    assert event_timers == d.timers("profile")
    assert all(k[1] == "event" and v == 1 for s, k, v in entries if s == "profile" and k[0] == "timer")

    # the interval join: each side's (timestamp, value) tuples
    sides = {k[1] for s, k, v in entries if s == "join" and k[0] == "state"}
    assert sides <= {"left", "right"} and sides

    # the task clock: inputs by topic, watermarks by step
    for p in range(2):
        [clock] = [v for k, v in latest[p]["_time"].items() if read_key(k) == ("state", "clock", None, b"")]
        assert set(clock["inputs"]) == {"events", "fmt-by-user-repartition"}
        assert clock["steps"]["spend"] == d.watermark("spend", partition=p)
        assert clock["inputs"]["events"]["wm"] == max(e["ts"] for e in rows if e["amount"] % 2 == p) - 101
