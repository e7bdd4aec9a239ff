"""Event-time results are a function of the timestamped input only (P1, P2, P3).

Random keyed records, with an arrival order whose disorder stays within the bound B, go
through tumbling, sliding and session windows, directly and behind a ``key_by``
repartition, and windows of window results behind a second one; count windows (which
follow arrival order) check replay. Whatever the arrival permutation, the number of partitions, the checkpoint
points (which set the batches the repartitioned steps see), wall-clock pauses, and crashes
at any point, the committed results equal a plain-Python recomputation over the whole
input: the same windows and values, per key in the same order.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from framework import (
    CountWindows,
    Pipeline,
    SessionWindows,
    SlidingWindows,
    TestDriver,
    Topic,
    TumblingWindows,
    WatermarkStrategy,
)

KEYS = ["k0", "k1", "k2", "k3", "k4"]
GROUPS = ["g0", "g1", "g2"]
TUMBLE = 100
SLIDE_SIZE, SLIDE_STEP = 150, 50
# Timestamps are even and the gap odd, so no record lands exactly on a session's end:
# such a record would merge with the session (Flink's windows touch-merge) only if it came
# before the session fired, and P2 holds only for inputs without that tie.
GAP = 41
FAR = 10**12

Record = dict[str, Any]
Result = tuple[int, int, Any, int]  # start, end, value, timestamp


# --- the pipeline -------------------------------------------------------------------------------


def pipeline(bound_ms: int) -> Pipeline:
    p = Pipeline("determinism")
    s = p.source(Topic("in"), watermarks=WatermarkStrategy.bounded_out_of_orderness(bound_ms, timestamp="ts"))
    s.window(TumblingWindows(TUMBLE)).sum(lambda v: v["x"], name="tumble").to(Topic("tumble"))
    s.window(SlidingWindows(SLIDE_SIZE, SLIDE_STEP)).count(name="slide").to(Topic("slide"))
    s.window(SessionWindows(GAP)).sum(lambda v: v["x"], name="session").to(Topic("session"))
    s.window(CountWindows(3)).sum(lambda v: v["x"], name="count3").to(Topic("count3"))  # arrival order
    by_group = s.key_by(lambda v: v["g"], name="regroup")
    per_group = by_group.window(TumblingWindows(TUMBLE)).count(name="tumble-g")
    per_group.to(Topic("tumble-g"))
    (by_group.window(SessionWindows(GAP))
     .apply(lambda k, w, els: sorted(e["id"] for e in els), name="session-g").to(Topic("session-g")))
    # A second hop: window results (timestamped end - 1) are windowed again downstream.
    (per_group.key_by(lambda r: "all", name="regroup-all")
     .window(TumblingWindows(2 * TUMBLE)).sum(lambda r: r["value"], name="total").to(Topic("total")))
    return p


WINDOW_STEPS = ["tumble", "slide", "session", "count3", "tumble-g", "session-g", "total"]


# --- the model: each window computed from the whole input at once ------------------------------


def by_key(records: Iterable[Record], key: str) -> dict[str, list[Record]]:
    out: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        out[r[key]].append(r)
    return out


def time_windows(records: list[Record], key: str, size: int, slide: int,
                 value: Callable[[list[Record]], Any]) -> dict[str, list[Result]]:
    out: dict[str, list[Result]] = {}
    for k, recs in by_key(records, key).items():
        members: dict[int, list[Record]] = defaultdict(list)
        for r in recs:
            for start in range(r["ts"] - r["ts"] % slide - size + slide, r["ts"] + 1, slide):
                if start <= r["ts"] < start + size:
                    members[start].append(r)
        out[k] = [(s, s + size, value(members[s]), s + size - 1) for s in sorted(members)]
    return out


def sessions(records: list[Record], key: str, value: Callable[[list[Record]], Any]) -> dict[str, list[Result]]:
    out: dict[str, list[Result]] = {}
    for k, recs in by_key(records, key).items():
        groups: list[list[Record]] = []
        for r in sorted(recs, key=lambda r: r["ts"]):
            if groups and r["ts"] <= groups[-1][-1]["ts"] + GAP:
                groups[-1].append(r)
            else:
                groups.append([r])
        out[k] = [(g[0]["ts"], g[-1]["ts"] + GAP, value(g), g[-1]["ts"] + GAP - 1) for g in groups]
    return out


def count_windows(records: list[Record], key: str, n: int, value: Callable[[list[Record]], Any]
                  ) -> dict[str, list[Result]]:
    """Every ``n`` records of a key in arrival order: bounds from their timestamps, stamped
    with the last one's."""
    out: dict[str, list[Result]] = {}
    for k, recs in by_key(records, key).items():
        groups = [recs[i:i + n] for i in range(0, len(recs) - n + 1, n)]
        ts = [[r["ts"] for r in g] for g in groups]
        out[k] = [(min(t), max(t) + 1, value(g), t[-1]) for g, t in zip(groups, ts, strict=True)]
    return {k: v for k, v in out.items() if v}


def model(records: list[Record]) -> dict[str, dict[str, list[Result]]]:
    """``records`` in arrival order (only count windows depend on it)."""
    total = lambda rs: sum(r["x"] for r in rs)
    everything = [{**r, "all": "all"} for r in records]
    return {
        "tumble": time_windows(records, "k", TUMBLE, TUMBLE, total),
        "slide": time_windows(records, "k", SLIDE_SIZE, SLIDE_STEP, len),
        "session": sessions(records, "k", total),
        "count3": count_windows(records, "k", 3, total),
        "tumble-g": time_windows(records, "g", TUMBLE, TUMBLE, len),
        "session-g": sessions(records, "g", lambda rs: sorted(r["id"] for r in rs)),
        "total": time_windows(everything, "all", 2 * TUMBLE, 2 * TUMBLE, len),
    }


def observed(d: TestDriver) -> dict[str, dict[str, list[Result]]]:
    """Each output topic's results per key, in the order they were emitted."""
    out: dict[str, dict[str, list[Result]]] = {}
    for topic in WINDOW_STEPS:
        per: dict[str, list[Result]] = defaultdict(list)
        for r in d.output(topic):
            per[r.key].append((r.value["start"], r.value["end"], r.value["value"], r.timestamp))
        out[topic] = dict(per)
    return out


# --- inputs -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    bound_ms: int
    records: list[Record]  # in arrival order

    def __repr__(self) -> str:
        return f"Scenario(bound_ms={self.bound_ms}, records={[(r['k'], r['g'], r['ts']) for r in self.records]})"


@st.composite
def scenarios(draw: st.DrawFn, max_records: int = 80) -> Scenario:
    """Records with even timestamps; each arrives ``jitter <= bound`` after its timestamp's
    turn, so nothing that came before it is more than ``bound`` ahead: nothing is late."""
    bound = draw(st.integers(0, 400))
    span = draw(st.integers(10, 1000))  # dense inputs merge sessions, sparse ones close many windows
    rows = draw(st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(GROUPS), st.integers(0, span),
                                   st.integers(-5, 5), st.integers(0, bound)),
                         min_size=10, max_size=max_records))
    records = [{"id": i, "k": k, "g": g, "ts": 2 * t, "x": x, "arrival": 2 * t + j}
               for i, (k, g, t, x, j) in enumerate(rows)]
    records.sort(key=lambda r: (r["arrival"], r["id"]))
    return Scenario(bound, records)


def pipe(d: TestDriver, r: Record) -> None:
    d.pipe("in", {k: r[k] for k in ("id", "k", "g", "ts", "x")}, key=r["k"])


def finish(d: TestDriver) -> None:
    """Commit, let every window fire, and carry the results across the repartition hop."""
    d.checkpoint()
    d.advance_watermark(FAR)
    for _ in range(4):  # two repartition hops, each one checkpoint away
        d.checkpoint()
        d.run()


def assert_matches_model(d: TestDriver, s: Scenario) -> None:
    assert observed(d) == model(s.records)
    assert not any(name.startswith("late_records") and n for name, n in d.metrics().items())
    sizes = d.state_sizes()
    # Every time window fired and was purged; a count window keeps only its unfinished records.
    assert all(sizes[step] == 0 for step in WINDOW_STEPS if step != "count3"), sizes
    assert sizes["count3"] == sum(len(rs) % 3 > 0 for rs in by_key(s.records, "k").values())


# --- the properties -----------------------------------------------------------------------------


@settings(deadline=None, max_examples=40)
@given(s=scenarios(), partitions=st.sampled_from([1, 2, 4]))
def test_results_do_not_depend_on_arrival_order_within_the_bound_nor_on_partitions(
        s: Scenario, partitions: int) -> None:
    d = TestDriver(pipeline(s.bound_ms), partitions=partitions)
    for r in s.records:
        pipe(d, r)
    finish(d)
    assert_matches_model(d, s)


ACTIONS = st.sampled_from(["none"] * 6 + ["checkpoint", "checkpoint", "crash", "pause"])


@settings(deadline=None, max_examples=40)
@given(s=scenarios(), partitions=st.sampled_from([1, 2, 4]), data=st.data())
def test_results_do_not_depend_on_checkpoints_pauses_or_crashes(s: Scenario, partitions: int,
                                                                 data: st.DataObject) -> None:
    actions = data.draw(st.lists(ACTIONS, min_size=len(s.records) + 1, max_size=len(s.records) + 1))
    d = TestDriver(pipeline(s.bound_ms), partitions=partitions, auto_checkpoint=False)
    for r, action in zip(s.records, actions, strict=False):
        pipe(d, r)
        if action == "checkpoint":
            d.checkpoint()
        elif action == "crash":
            d.crash()
        elif action == "pause":  # wall-clock time passes: event-time results must not care
            d.advance_wall_clock(data.draw(st.integers(1, 10_000)))
    if actions[-1] == "crash":  # the last checkpoint may be far back: replay everything after it
        d.crash()
    finish(d)
    assert_matches_model(d, s)


@settings(deadline=None, max_examples=15)
@given(s=scenarios(max_records=40), data=st.data())
def test_a_crash_after_windows_fired_replays_to_the_same_results(s: Scenario, data: st.DataObject) -> None:
    """Firing by the final watermark, lost to a crash before its checkpoint, happens again."""
    d = TestDriver(pipeline(s.bound_ms), partitions=data.draw(st.sampled_from([1, 2, 4])), auto_checkpoint=False)
    cut = data.draw(st.integers(0, len(s.records)))
    for i, r in enumerate(s.records):
        if i == cut:
            d.checkpoint()
        pipe(d, r)
    d.advance_watermark(FAR)
    d.checkpoint()  # upstream results and watermarks committed; the repartitioned side not yet run
    d.run()
    d.crash()
    finish(d)
    assert_matches_model(d, s)
