"""Allowed lateness and the late output (P16), timers of process functions, joins, union,
connected streams over shared keyed state, and the fire-alarm example."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework import (
    NO_WATERMARK,
    CoProcessFunction,
    JsonSerde,
    Pipeline,
    ProcessFunction,
    SessionWindows,
    SlidingWindows,
    Stream,
    TestDriver,
    Topic,
    TumblingWindows,
    WatermarkStrategy,
)

SEC, MIN = 1000, 60_000
FAR = 10**12


def bounded(bound_ms: int = 0) -> WatermarkStrategy:
    return WatermarkStrategy.bounded_out_of_orderness(bound_ms, timestamp="ts")


def windows_of(d: TestDriver, topic: str = "out") -> list[tuple[Any, int, int, Any, int]]:
    return [(r.key, r.value["start"], r.value["end"], r.value["value"], r.timestamp) for r in d.output(topic)]


# --- allowed lateness (P16) -----------------------------------------------------------------------


def late_pipeline(windows: Any, lateness_ms: int) -> Pipeline:
    p = Pipeline("late")
    s = p.source(Topic("in"), watermarks=bounded())
    s.window(windows, allowed_lateness_ms=lateness_ms, late="late").count(name="w").to(Topic("out"))
    return p


def test_allowed_lateness_re_emits_the_window_and_later_records_go_to_the_late_topic() -> None:
    d = TestDriver(late_pipeline(TumblingWindows(MIN), 30 * SEC))
    for ts in [10 * SEC, 20 * SEC]:
        d.pipe("in", {"ts": ts}, key="a")
    d.advance_watermark(MIN - 1)
    assert windows_of(d) == [("a", 0, MIN, 2, MIN - 1)]
    d.pipe("in", {"ts": 30 * SEC}, key="a")  # late, within the lateness: an updated result
    d.advance_watermark(MIN - 1 + 30 * SEC - 1)  # one short of the cleanup time
    d.pipe("in", {"ts": 40 * SEC}, key="a")
    assert windows_of(d) == [("a", 0, MIN, n, MIN - 1) for n in (2, 3, 4)]
    assert d.metrics().get("late_records.w", 0) == 0
    d.advance_watermark(MIN - 1 + 30 * SEC)  # cleanup: the window's state and timers are gone
    assert d.timers("w") == [] and d.state_sizes()["w"] == 0
    d.pipe("in", {"ts": 50 * SEC, "n": 5}, key="a")
    assert len(d.output("out")) == 3  # the emitted result is not silently changed
    assert [(r.key, r.value, r.timestamp) for r in d.output("late")] == [("a", {"ts": 50 * SEC, "n": 5}, 50 * SEC)]
    assert d.metrics()["late_records.w"] == 1


def test_without_allowed_lateness_a_record_for_a_fired_window_is_late_and_counted() -> None:
    d = TestDriver(late_pipeline(TumblingWindows(MIN), 0))
    d.pipe("in", {"ts": 5 * SEC}, key="a")
    d.pipe("in", {"ts": MIN}, key="a")  # watermark MIN - 1: [0, MIN) fires
    d.pipe("in", {"ts": MIN - 1}, key="a")  # its window's end - 1 is the watermark: late
    d.pipe("in", {"ts": MIN - 1}, key="b")  # a key without state is late just the same
    assert windows_of(d) == [("a", 0, MIN, 1, MIN - 1)]
    assert [r.key for r in d.output("late")] == ["a", "b"]
    assert d.metrics()["late_records.w"] == 2


def test_a_sliding_window_record_joins_only_the_windows_not_yet_cleaned_up() -> None:
    d = TestDriver(late_pipeline(SlidingWindows(3 * MIN, MIN), 30 * SEC))
    d.pipe("in", {"ts": 150 * SEC}, key="a")  # in [0, 3), [1, 4), [2, 5) minutes
    d.advance_watermark(3 * MIN - 1 + 30 * SEC)  # [0, 3) cleaned up, [1, 4) and [2, 5) open
    d.pipe("in", {"ts": 150 * SEC}, key="a")
    assert d.metrics().get("late_records.w", 0) == 0
    d.advance_watermark(FAR)
    assert sorted(windows_of(d)) == [("a", 0, 3 * MIN, 1, 3 * MIN - 1), ("a", MIN, 4 * MIN, 2, 4 * MIN - 1),
                                     ("a", 2 * MIN, 5 * MIN, 2, 5 * MIN - 1)]


def test_a_late_record_merges_into_a_fired_session_within_the_lateness() -> None:
    d = TestDriver(late_pipeline(SessionWindows(10 * SEC), MIN))
    for ts in [0, 5 * SEC]:
        d.pipe("in", {"ts": ts}, key="a")
    d.advance_watermark(15 * SEC - 1)
    d.pipe("in", {"ts": 12 * SEC}, key="a")  # extends the fired session past the watermark
    assert windows_of(d) == [("a", 0, 15 * SEC, 2, 15 * SEC - 1)]
    d.advance_watermark(22 * SEC - 1)  # the extended session fires at its new end
    d.pipe("in", {"ts": 3 * SEC}, key="a")  # inside it: re-emitted at once
    assert windows_of(d) == [("a", 0, 15 * SEC, 2, 15 * SEC - 1), ("a", 0, 22 * SEC, 3, 22 * SEC - 1),
                             ("a", 0, 22 * SEC, 4, 22 * SEC - 1)]
    d.advance_watermark(22 * SEC - 1 + MIN)
    d.pipe("in", {"ts": 1 * SEC}, key="a")  # its own session [1 s, 11 s) is past cleanup too
    assert len(d.output("out")) == 3 and d.metrics()["late_records.w"] == 1
    assert d.state_sizes()["w"] == 0


class WithWatermark(ProcessFunction):
    """Forwards a window result with its step's watermark at that moment."""

    def process(self, key: Any, value: Any, ctx: Any) -> None:
        ctx.emit({**value, "wm": ctx.watermark})


def simulate_lateness(rows: list[tuple[str, int]], size: int, slide: int, bound: int,
                      lateness: int) -> tuple[dict[tuple[str, int], list[int]], list[int]]:
    """Flink's rules, record by record: a record joins each window whose cleanup time
    ``end - 1 + L`` is after the watermark, re-emitting those already fired; a window fires
    when the watermark reaches ``end - 1``; the watermark is max timestamp - bound - 1."""
    wm, fired = NO_WATERMARK, set()
    counts: dict[tuple[str, int], int] = {}
    emitted: dict[tuple[str, int], list[int]] = defaultdict(list)
    late: list[int] = []

    def advance(to: int) -> None:
        for w in sorted(w for w in counts if w not in fired and w[1] + size - 1 <= to):
            fired.add(w)
            emitted[w].append(counts[w])
        for w in [w for w in counts if w[1] + size - 1 + lateness <= to]:
            del counts[w]
            fired.discard(w)

    for i, (k, ts) in enumerate(rows):
        starts = [s for s in range(ts - ts % slide - size + slide, ts + 1, slide) if s + size - 1 + lateness > wm]
        for s in starts:
            counts[(k, s)] = counts.get((k, s), 0) + 1
            if s + size - 1 <= wm:
                fired.add((k, s))
                emitted[(k, s)].append(counts[(k, s)])
        if not starts:
            late.append(i)
        wm = max(wm, ts - bound - 1)
        advance(wm)
    advance(FAR)
    return dict(emitted), late


@settings(deadline=None, max_examples=40)
@given(rows=st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 60)), min_size=1, max_size=60),
       bound=st.integers(0, 10), lateness=st.integers(0, 15), sliding=st.booleans())
def test_every_window_result_sequence_and_late_record_follows_the_lateness_rules(
        rows: list[tuple[str, int]], bound: int, lateness: int, sliding: bool) -> None:
    """Arbitrary disorder: per window, the emitted counts in order (first firing, then one
    update per record within the lateness), and the records sent to the late topic."""
    size, slide = (10, 5) if sliding else (10, 10)
    p = Pipeline("late")
    s = p.source(Topic("in"), watermarks=bounded(bound))
    windows = SlidingWindows(size, slide) if sliding else TumblingWindows(size)
    (s.window(windows, allowed_lateness_ms=lateness, late="late").count(name="w")
     .process(WithWatermark()).to(Topic("out")))
    d = TestDriver(p)
    for i, (k, ts) in enumerate(rows):
        d.pipe("in", {"i": i, "ts": ts}, key=k)
    d.advance_watermark(FAR)
    emitted, late = simulate_lateness(rows, size, slide, bound, lateness)
    got: dict[tuple[str, int], list[int]] = defaultdict(list)
    for r in d.output("out"):
        start, end = r.value["start"], r.value["end"]
        assert (end, r.timestamp) == (start + size, start + size - 1)
        assert r.value["wm"] >= end - 1  # P15: never before the watermark passed end - 1
        got[(r.key, start)].append(r.value["value"])
    assert dict(got) == emitted
    assert [r.value["i"] for r in d.output("late")] == late
    assert d.metrics().get("late_records.w", 0) == len(late)
    assert d.state_sizes()["w"] == 0


# --- timers ---------------------------------------------------------------------------------------


class Timers(ProcessFunction):
    """``{"set": [...], "del": [...], "pt": [...]}`` registers and deletes event-time timers
    (and registers processing-time ones); each firing is emitted under one key, so the output
    keeps the task's firing order."""

    def process(self, key: Any, value: Any, ctx: Any) -> None:
        for ts in value.get("set", ()):
            ctx.register_event_timer(ts)
        for ts in value.get("del", ()):
            ctx.delete_event_timer(ts)
        for ts in value.get("pt", ()):
            ctx.register_processing_timer(ts)

    def on_timer(self, timestamp: int, key: Any, ctx: Any) -> None:
        ctx.emit({"ts": timestamp, "key": key, "domain": ctx.time_domain, "wm": ctx.watermark,
                  "now": ctx.processing_time}, key="fired")


def timer_pipeline() -> Pipeline:
    p = Pipeline("timers")
    p.source(Topic("in"), watermarks=WatermarkStrategy.monotonous()).process(Timers(), name="t").to(Topic("out"))
    return p


def fired(d: TestDriver) -> list[tuple[int, str]]:
    return [(r.value["ts"], r.value["key"]) for r in d.output("out")]


def test_event_timers_fire_in_timestamp_then_key_order_and_deleted_ones_never() -> None:
    rng = random.Random(5)
    d = TestDriver(timer_pipeline())
    live: set[tuple[int, str]] = set()
    for _ in range(40):
        key = rng.choice("edcba")
        sets = [rng.randrange(100, 1000) for _ in range(3)]
        dels = [rng.choice(sets)] if rng.random() < 0.3 else []
        d.pipe("in", {"set": sets, "del": dels}, key=key, timestamp=0)
        live |= {(ts, key) for ts in sets}
        live -= {(ts, key) for ts in dels}
    assert d.timers("t") == sorted(live)
    for wm in [99, 300, 301, 650, 2000]:
        before = len(fired(d))
        d.advance_watermark(wm)
        assert fired(d)[before:] == sorted(t for t in live if t[0] <= wm and t not in fired(d)[:before])
        assert all(r.value["wm"] >= r.value["ts"] and r.value["domain"] == "event" for r in d.output("out"))
    assert fired(d) == sorted(live)  # each once, in (timestamp, key) order
    assert d.timers("t") == []


def test_processing_timers_fire_when_the_wall_clock_reaches_them() -> None:
    d = TestDriver(timer_pipeline(), wall_clock_ms=1_000)
    d.pipe("in", {"pt": [2_000, 1_500, 1_500]}, key="b")
    d.pipe("in", {"pt": [1_500]}, key="a")
    assert d.timers("t", domain="processing") == [(1_500, "a"), (1_500, "b"), (2_000, "b")]
    d.advance_watermark(FAR)  # event time does not fire processing-time timers
    d.advance_wall_clock(499)
    assert fired(d) == []
    d.advance_wall_clock(1)
    assert fired(d) == [(1_500, "a"), (1_500, "b")]
    d.advance_wall_clock(10_000)
    assert fired(d) == [(1_500, "a"), (1_500, "b"), (2_000, "b")]
    assert [(r.value["domain"], r.value["now"]) for r in d.output("out")] == [
        ("processing", 1_500), ("processing", 1_500), ("processing", 11_500)]


def test_a_timer_survives_a_crash_and_fires_exactly_once() -> None:
    d = TestDriver(timer_pipeline(), auto_checkpoint=False)
    d.pipe("in", {"set": [500]}, key="a", timestamp=100)
    d.checkpoint()
    d.crash()  # the timer comes back from the changelog
    assert d.timers("t") == [(500, "a")]
    d.advance_watermark(500)
    d.crash()  # the firing was not committed: it is lost, and the timer is back
    assert fired(d) == [] and d.timers("t") == [(500, "a")]
    d.advance_watermark(600)
    d.checkpoint()
    d.crash()
    d.advance_watermark(FAR)
    d.checkpoint()
    assert fired(d) == [(500, "a")]
    assert d.timers("t") == []


def test_a_timer_registered_by_a_replayed_record_fires_once_after_a_crash() -> None:
    """The record that registers the timer is itself replayed after the crash."""
    d = TestDriver(timer_pipeline(), auto_checkpoint=False)
    d.pipe("in", {"set": [50]}, key="a", timestamp=10)
    d.checkpoint()
    d.pipe("in", {"set": [500]}, key="b", timestamp=100)
    d.pipe("in", {}, key="c", timestamp=700)  # the watermark passes 500: fires, uncommitted
    d.crash()
    d.checkpoint()
    d.advance_watermark(FAR)
    d.checkpoint()
    assert fired(d) == [(50, "a"), (500, "b")]


# --- interval join and window join ---------------------------------------------------------------


def two_sources(p: Pipeline, bound: int) -> tuple[Stream, Stream]:
    return p.source(Topic("left"), watermarks=bounded(bound)), p.source(Topic("right"), watermarks=bounded(bound))


Side = tuple[str, str, int, int]  # side, key, ts, id


@st.composite
def two_sided(draw: st.DrawFn) -> tuple[int, list[Side]]:
    """Records of both sides, arriving in an order whose disorder stays within the bound."""
    bound = draw(st.integers(0, 30))
    rows = draw(st.lists(st.tuples(st.sampled_from(["left", "right"]), st.sampled_from("xyz"),
                                   st.integers(0, 200), st.integers(0, bound)), min_size=1, max_size=50))
    arrival = sorted(enumerate(rows), key=lambda r: (r[1][2] + r[1][3], r[0]))
    return bound, [(side, k, ts, i) for i, (side, k, ts, _) in arrival]


def pipe_sides(d: TestDriver, records: list[Side]) -> None:
    for side, k, ts, i in records:
        d.pipe(side, {"id": i, "ts": ts}, key=k)


def pairs(d: TestDriver, step: str) -> Counter[tuple[str, int, int, int]]:
    return Counter((r.key, r.value[0], r.value[1], r.timestamp) for r in d.output("out"))


@settings(deadline=None, max_examples=50)
@given(data=two_sided(), lower=st.integers(-40, 40), width=st.integers(0, 60), partitions=st.sampled_from([1, 3]))
def test_interval_join_pairs_equal_a_brute_force_join(data: tuple[int, list[Side]], lower: int, width: int,
                                                      partitions: int) -> None:
    bound, records = data
    upper = lower + width
    p = Pipeline("ij")
    left, right = two_sources(p, bound)
    left.interval_join(right, lower, upper, lambda l, r: [l["id"], r["id"]], name="join").to(Topic("out"))
    d = TestDriver(p, partitions=partitions)
    pipe_sides(d, records)
    d.advance_watermark(FAR)
    ls = [r for r in records if r[0] == "left"]
    rs = [r for r in records if r[0] == "right"]
    expected = Counter((lk, li, ri, max(lt, rt)) for _, lk, lt, li in ls for _, rk, rt, ri in rs
                       if lk == rk and lt + lower <= rt <= lt + upper)
    assert pairs(d, "join") == expected
    assert d.metrics().get("late_records.join", 0) == 0
    assert d.state_sizes()["join"] == 0  # both sides purged once the watermark passed them


def test_an_interval_join_record_at_or_behind_the_watermark_is_late_never_half_joined() -> None:
    """The left record at 100 is purged when the watermark reaches 100 + upper; a right
    record at exactly that watermark would match it, so it must count as late, not vanish."""
    p = Pipeline("ij")
    left, right = two_sources(p, 0)
    left.interval_join(right, 0, 10, lambda l, r: [l["id"], r["id"]], name="join").to(Topic("out"))
    d = TestDriver(p)
    d.pipe("left", {"id": 1, "ts": 100}, key="x")
    d.advance_watermark(110)
    d.pipe("right", {"id": 2, "ts": 110}, key="x")
    d.pipe("right", {"id": 3, "ts": 111}, key="x")  # on time, and outside the interval
    assert d.output("out") == []
    assert d.metrics()["late_records.join"] == 1


@settings(deadline=None, max_examples=40)
@given(data=two_sided(), sliding=st.booleans(), partitions=st.sampled_from([1, 3]))
def test_window_join_pairs_equal_a_brute_force_join(data: tuple[int, list[Side]], sliding: bool,
                                                    partitions: int) -> None:
    bound, records = data
    size, slide = (40, 20) if sliding else (40, 40)
    p = Pipeline("wj")
    left, right = two_sources(p, bound)
    windows = SlidingWindows(size, slide) if sliding else TumblingWindows(size)
    left.window_join(right, windows, lambda l, r: [l["id"], r["id"]], name="join").to(Topic("out"))
    d = TestDriver(p, partitions=partitions)
    pipe_sides(d, records)
    d.advance_watermark(FAR)

    def starts(ts: int) -> set[int]:
        return {s for s in range(ts - ts % slide - size + slide, ts + 1, slide)}

    expected = Counter((lk, li, ri, s + size - 1) for side, lk, lt, li in records if side == "left"
                       for side2, rk, rt, ri in records if side2 == "right" and rk == lk
                       for s in starts(lt) & starts(rt))
    assert pairs(d, "join") == expected
    assert d.metrics().get("late_records.join", 0) == 0
    assert d.state_sizes()["join"] == 0


# --- union and connected streams -----------------------------------------------------------------


def test_a_union_counts_the_records_of_both_sources_per_window() -> None:
    rng = random.Random(3)
    rows = [(rng.choice(["a", "b"]), rng.choice("xy"), t * 7 + rng.randrange(5)) for t in range(200)]
    p = Pipeline("union")
    a, b = p.source(Topic("a"), watermarks=bounded(10)), p.source(Topic("b"), watermarks=bounded(10))
    a.union(b).window(TumblingWindows(100)).count(name="w").to(Topic("out"))
    d = TestDriver(p, partitions=2)
    for topic, k, ts in rows:
        d.pipe(topic, {"ts": ts}, key=k)
    d.advance_watermark(FAR)
    assert Counter({(k, s): n for k, s, _, n, _ in windows_of(d)}) == Counter((k, ts // 100 * 100)
                                                                            for _, k, ts in rows)
    assert d.metrics().get("late_records.w", 0) == 0


class Blocklist(CoProcessFunction):
    """Control records (left) block a key for one minute of event time; data records (right)
    pass while their key is not blocked. Both sides share the key's state."""

    def open(self, ctx: Any) -> None:
        self.blocked_until = ctx.value_state("blocked_until")

    def process1(self, key: Any, value: Any, ctx: Any) -> None:
        until = ctx.timestamp + MIN
        self.blocked_until.set(until)
        ctx.register_event_timer(until)

    def process2(self, key: Any, value: Any, ctx: Any) -> None:
        if self.blocked_until.get() is None:
            ctx.emit(value["id"])

    def on_timer(self, timestamp: int, key: Any, ctx: Any) -> None:
        if self.blocked_until.get() == timestamp:  # a later block has its own timer
            self.blocked_until.clear()


def test_connected_streams_share_keyed_state_and_timers() -> None:
    rng = random.Random(9)
    rows = sorted((rng.randrange(0, 20 * MIN), rng.choice(["control", "data"]), rng.choice("pqrs"), i)
                  for i in range(300))
    p = Pipeline("co")
    control = p.source(Topic("control"), watermarks=WatermarkStrategy.monotonous(timestamp="ts"))
    data = p.source(Topic("data"), watermarks=WatermarkStrategy.monotonous(timestamp="ts"))
    control.connect(data).process(Blocklist(), name="co").to(Topic("out", value_serde=JsonSerde()))
    d = TestDriver(p, partitions=2)
    task = {k: i % 2 for i, k in enumerate("pqrs")}  # both sides of a key meet in one task
    for ts, topic, k, i in rows:
        d.pipe(topic, {"id": i, "ts": ts}, key=k, partition=task[k])
    # The model: data passes unless a block is pending; a block at t is pending until its
    # task's watermark (the minimum of both sources' max timestamp - 1) reaches t + 1 min.
    expected: dict[str, list[int]] = defaultdict(list)
    until: dict[str, int] = {}
    top = {(t, topic): NO_WATERMARK for t in (0, 1) for topic in ("control", "data")}
    for ts, topic, k, i in rows:
        if topic == "control":
            until[k] = ts + MIN
        elif k not in until:
            expected[k].append(i)
        top[(task[k], topic)] = ts - 1
        wm = min(top[(task[k], "control")], top[(task[k], "data")])
        until = {key: u for key, u in until.items() if task[key] != task[k] or u > wm}
    got: dict[str, list[int]] = defaultdict(list)
    for r in d.output("out"):
        got[r.key].append(r.value)
    assert dict(got) == dict(expected)


# --- the fire alarm -------------------------------------------------------------------------------

HOT = 50
WITHIN = 10 * MIN


class FireAlarm(ProcessFunction):
    """Per location: a high temperature is pending for 10 minutes (an event-time timer
    forgets it); smoke while one is pending raises an alert."""

    def open(self, ctx: Any) -> None:
        self.hot_at = ctx.value_state("hot_at")

    def process(self, key: Any, value: Any, ctx: Any) -> None:
        if value["kind"] == "temperature" and value["celsius"] > HOT:
            old = self.hot_at.get()
            if old is not None:
                ctx.delete_event_timer(old + WITHIN)
            self.hot_at.set(ctx.timestamp)
            ctx.register_event_timer(ctx.timestamp + WITHIN)
        elif value["kind"] == "smoke":
            hot_at = self.hot_at.get()
            if hot_at is not None and hot_at <= ctx.timestamp <= hot_at + WITHIN:
                ctx.emit({"hot_at": hot_at, "smoke_at": ctx.timestamp})

    def on_timer(self, timestamp: int, key: Any, ctx: Any) -> None:
        self.hot_at.clear()


def fire_alarm_pipeline() -> Pipeline:
    p = Pipeline("fire")
    events = p.source(Topic("sensors"), watermarks=WatermarkStrategy.monotonous(timestamp="ts"))
    events.process(FireAlarm(), name="alarm").to(Topic("alarms"))
    return p


Event = tuple[str, int, str, int]  # location, ts, kind, celsius


def expected_alarms(events: list[Event]) -> list[tuple[str, int, int]]:
    """In event-time order per location: smoke within 10 minutes after the latest high
    temperature alerts."""
    hot: dict[str, int] = {}
    out = []
    for loc, ts, kind, celsius in sorted(events, key=lambda e: e[1]):
        if kind == "temperature" and celsius > HOT:
            hot[loc] = ts
        elif kind == "smoke" and loc in hot and ts <= hot[loc] + WITHIN:
            out.append((loc, hot[loc], ts))
    return out


LOCATIONS = ["kitchen", "garage", "attic", "hall", "porch", "cellar", "a", "b", "c", "d"]


def run_fire_alarm(events: list[Event], partitions: int) -> TestDriver:
    """Events in timestamp order; each location on a known partition (``task``)."""
    d = TestDriver(fire_alarm_pipeline(), partitions=partitions)
    for loc, ts, kind, celsius in sorted(events, key=lambda e: e[1]):
        d.pipe("sensors", {"kind": kind, "celsius": celsius, "ts": ts}, key=loc, partition=task(loc, partitions))
    return d


def task(location: str, partitions: int) -> int:
    return LOCATIONS.index(location) % partitions


def test_fire_alarm_alerts_on_smoke_within_10_minutes_of_a_high_temperature() -> None:
    events = [
        ("kitchen", 0, "temperature", 70), ("kitchen", 5 * MIN, "smoke", 0),  # alert
        ("garage", 0, "temperature", 80), ("garage", 11 * MIN, "smoke", 0),  # too late
        ("attic", 0, "smoke", 0),  # no temperature at all
        ("hall", 0, "temperature", 30), ("hall", MIN, "smoke", 0),  # not hot
        ("porch", 0, "temperature", 90), ("porch", 10 * MIN, "smoke", 0),  # exactly 10 minutes
        ("cellar", 0, "temperature", 90), ("cellar", 8 * MIN, "temperature", 90),
        ("cellar", 15 * MIN, "smoke", 0),  # the newer high temperature still counts
    ]
    d = run_fire_alarm(events, partitions=2)
    got = sorted((r.key, r.value["hot_at"], r.value["smoke_at"]) for r in d.output("alarms"))
    assert got == sorted([("kitchen", 0, 5 * MIN), ("porch", 0, 10 * MIN), ("cellar", 8 * MIN, 15 * MIN)])
    assert got == sorted(expected_alarms(events))
    d.advance_watermark(FAR)
    assert d.timers("alarm") == []  # every pending high temperature expired
    assert d.state_sizes()["alarm"] == 0


@pytest.mark.parametrize("partitions", [1, 3])
def test_fire_alarm_equals_its_model_on_random_sensor_events(partitions: int) -> None:
    rng = random.Random(partitions)
    events = [(rng.choice(["a", "b", "c", "d"]), rng.randrange(0, 120 * MIN),
               rng.choice(["temperature", "temperature", "smoke"]), rng.randrange(0, 100)) for _ in range(400)]
    d = run_fire_alarm(events, partitions)
    got = Counter((r.key, r.value["hot_at"], r.value["smoke_at"]) for r in d.output("alarms"))
    expected = Counter(expected_alarms(events))
    assert got == expected and len(expected) > 5
    # Pending high temperatures are those whose 10 minutes their task's watermark has not passed.
    wm = {task(e[0], partitions): e[1] - 1 for e in sorted(events, key=lambda e: e[1])}
    hot: dict[str, int] = {}
    for loc, ts, kind, celsius in sorted(events, key=lambda e: e[1]):
        if kind == "temperature" and celsius > HOT:
            hot[loc] = ts
    assert d.timers("alarm") == sorted((t + WITHIN, loc) for loc, t in hot.items()
                                       if t + WITHIN > wm[task(loc, partitions)])

