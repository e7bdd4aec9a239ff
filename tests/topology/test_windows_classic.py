"""The classic window examples (PROPERTIES.md) through the TestDriver, with literal results.

Each example checks the values, the window bounds and the result timestamps. Event-time
windows are followed by a probe process function that records the step's watermark when a
result reaches it: a result whose ``end - 1`` is above that watermark fired early (P15).
"""

from __future__ import annotations

from typing import Any

from framework import (
    CountTrigger,
    CountWindows,
    GlobalWindows,
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

MIN = 60_000


class Probe(ProcessFunction):
    """Forwards each window result with the watermark its step had when it arrived."""

    def process(self, key: Any, value: Any, ctx: Any) -> None:
        ctx.emit({**value, "wm": ctx.watermark})


def event_source(p: Pipeline, bound_ms: int = 0) -> Stream:
    return p.source(Topic("in"), watermarks=WatermarkStrategy.bounded_out_of_orderness(bound_ms, timestamp="ts"))


def results(d: TestDriver, topic: str = "out") -> list[tuple[Any, int, int, Any, int]]:
    """``(key, start, end, value, timestamp)`` of every result, in output order."""
    return [(r.key, r.value["start"], r.value["end"], r.value["value"], r.timestamp) for r in d.output(topic)]


def assert_fired_on_time(d: TestDriver, topic: str = "out") -> None:
    """P15: every result carries ``end - 1`` and its step's watermark had reached it."""
    out = d.output(topic)
    assert out, "nothing fired"
    for r in out:
        assert r.timestamp == r.value["end"] - 1
        assert r.value["wm"] >= r.value["end"] - 1, f"fired before the watermark passed end - 1: {r.value}"


# --- count windows ------------------------------------------------------------------------------


def test_count_tumbling_window_of_4_fires_every_4_records() -> None:
    p = Pipeline("classic")
    p.source(Topic("in")).window(CountWindows(4)).apply(lambda k, w, els: els).to(Topic("out"))
    d = TestDriver(p)
    for i in range(1, 11):
        d.pipe("in", i, key="all", timestamp=100 * i)
    # A count window's bounds are its records' min timestamp and max + 1; it carries the
    # timestamp of the record that completed it. Records 9 and 10 wait for two more.
    assert results(d) == [("all", 100, 401, [1, 2, 3, 4], 400), ("all", 500, 801, [5, 6, 7, 8], 800)]
    d.pipe("in", 11, key="all", timestamp=1100)
    d.pipe("in", 12, key="all", timestamp=1200)
    assert results(d)[-1] == ("all", 900, 1201, [9, 10, 11, 12], 1200)


def test_count_sliding_window_of_4_by_3_fires_every_3_records_over_the_last_4() -> None:
    p = Pipeline("classic")
    p.source(Topic("in")).window(CountWindows(4, slide=3)).apply(lambda k, w, els: els).to(Topic("out"))
    d = TestDriver(p)
    for i in range(1, 11):
        d.pipe("in", i, key="all", timestamp=100 * i)
    # Flink's countWindow(4, 3): the first firing has only the 3 records seen so far.
    assert results(d) == [
        ("all", 100, 301, [1, 2, 3], 300),
        ("all", 300, 601, [3, 4, 5, 6], 600),
        ("all", 600, 901, [6, 7, 8, 9], 900),
    ]


def test_count_sliding_window_aggregates_fold_only_the_last_4() -> None:
    p = Pipeline("classic")
    p.source(Topic("in")).window(CountWindows(4, slide=3)).sum().to(Topic("out"))
    d = TestDriver(p)
    for i in range(1, 13):
        d.pipe("in", i, key="all", timestamp=i)
    assert [r.value["value"] for r in d.output("out")] == [1 + 2 + 3, 3 + 4 + 5 + 6, 6 + 7 + 8 + 9, 9 + 10 + 11 + 12]


def test_keyed_count_tumbling_window_of_2_keyed_by_colour() -> None:
    p = Pipeline("classic")
    (p.source(Topic("in"))
     .key_by(lambda v: v["colour"], name="by-colour")
     .window(CountWindows(2)).apply(lambda k, w, els: [e["id"] for e in els])
     .to(Topic("out")))
    d = TestDriver(p, partitions=2)
    colours = ["red", "blue", "red", "green", "blue", "red", "red", "green", "blue"]
    for i, colour in enumerate(colours):
        d.pipe("in", {"colour": colour, "id": i}, timestamp=10 * i)
    got = sorted((k, v, ts) for k, _, _, v, ts in results(d))
    # Each colour fires on its own second, fourth... record; the third blue waits.
    assert got == [("blue", [1, 4], 40), ("green", [3, 7], 70), ("red", [0, 2], 20), ("red", [5, 6], 60)]


def test_global_window_per_key_with_count_trigger_5_fires_over_everything_so_far() -> None:
    p = Pipeline("classic")
    p.source(Topic("in")).window(GlobalWindows(CountTrigger(5))).apply(lambda k, w, els: els).to(Topic("out"))
    d = TestDriver(p)
    for i in range(1, 13):
        d.pipe("in", i, key="a", timestamp=i)
        d.pipe("in", -i, key="b", timestamp=i)
    by_key: dict[str, list[Any]] = {}
    for k, start, end, els, ts in results(d):
        by_key.setdefault(k, []).append((start, end, els, ts))
    # Not purging: the second firing sees all ten records.
    assert by_key == {
        "a": [(1, 6, [1, 2, 3, 4, 5], 5), (1, 11, list(range(1, 11)), 10)],
        "b": [(1, 6, [-1, -2, -3, -4, -5], 5), (1, 11, [-n for n in range(1, 11)], 10)],
    }


# --- time windows -------------------------------------------------------------------------------


def test_5_minute_tumbling_windows() -> None:
    p = Pipeline("classic")
    event_source(p).window(TumblingWindows(5 * MIN)).count().process(Probe()).to(Topic("out"))
    d = TestDriver(p)
    for ts in [30_000, 1 * MIN, 5 * MIN - 1, 5 * MIN, 7 * MIN, 12 * MIN]:
        d.pipe("in", {"ts": ts}, key="x")
    # The watermark is 12 min - 1 ms: [0, 5) and [5, 10) fired, [10, 15) waits.
    assert [r[:5] for r in results(d)] == [("x", 0, 5 * MIN, 3, 5 * MIN - 1), ("x", 5 * MIN, 10 * MIN, 2, 10 * MIN - 1)]
    d.advance_watermark(15 * MIN - 2)
    assert len(d.output("out")) == 2  # one millisecond short of the window's end - 1
    d.advance_watermark(15 * MIN - 1)
    assert results(d)[-1] == ("x", 10 * MIN, 15 * MIN, 1, 15 * MIN - 1)
    assert_fired_on_time(d)


def test_a_window_fires_exactly_when_the_watermark_reaches_its_end_minus_1() -> None:
    p = Pipeline("classic")
    event_source(p, bound_ms=10 * MIN).window(TumblingWindows(5 * MIN)).count().process(Probe()).to(Topic("out"))
    d = TestDriver(p)
    d.pipe("in", {"ts": 2 * MIN}, key="x")
    d.pipe("in", {"ts": 4 * MIN}, key="y")
    for wm in range(0, 5 * MIN - 1, 20_000):
        d.advance_watermark(wm)
        assert d.output("out") == []
    d.advance_watermark(5 * MIN - 1)
    assert sorted(results(d)) == [("x", 0, 5 * MIN, 1, 5 * MIN - 1), ("y", 0, 5 * MIN, 1, 5 * MIN - 1)]
    assert_fired_on_time(d)


def test_5_minute_windows_sliding_by_1_minute() -> None:
    p = Pipeline("classic")
    event_source(p).window(SlidingWindows(5 * MIN, 1 * MIN)).count().process(Probe()).to(Topic("out"))
    d = TestDriver(p)
    base = 60 * MIN
    for ts in [base + 90_000, base + 210_000, base + 390_000]:  # 1:30, 3:30, 6:30 past the hour
        d.pipe("in", {"ts": ts}, key="x")
    d.advance_watermark(base + 20 * MIN)
    # Each record is in the five windows that start in the five minutes up to it.
    expected = {-3: 1, -2: 1, -1: 2, 0: 2, 1: 2, 2: 2, 3: 2, 4: 1, 5: 1, 6: 1}
    assert results(d) == [("x", base + m * MIN, base + (m + 5) * MIN, n, base + (m + 5) * MIN - 1)
                          for m, n in expected.items()]
    assert_fired_on_time(d)


def test_session_windows_with_a_6_minute_gap_close_after_the_gap_and_merge_on_a_bridge() -> None:
    p = Pipeline("classic")
    (event_source(p, bound_ms=10 * MIN)
     .window(SessionWindows(6 * MIN)).apply(lambda k, w, els: sorted(e["ts"] // 1000 for e in els))
     .process(Probe()).to(Topic("out")))
    d = TestDriver(p)
    arrivals: list[tuple[str, list[float]]] = [("u", [0, 2, 10, 12, 5]), ("touch", [0, 6]), ("apart", [0, 6.001]),
                                               ("u", [30])]
    for key, minutes in arrivals:
        for m in minutes:
            d.pipe("in", {"ts": int(m * MIN)}, key=key)
    # The record at 5 min arrives after [0, 8) and [10, 18) formed; its [5, 11) bridges them.
    # The watermark is now 20 min - 1 ms: every session but the one at 30 min has fired.
    assert "u" in {k for k, *_ in results(d)}
    d.advance_watermark(36 * MIN - 2)
    assert (30 * MIN) not in {start for _, start, *_ in results(d)}
    d.advance_watermark(36 * MIN - 1)
    assert sorted(results(d)) == sorted([
        ("u", 0, 18 * MIN, [0, 120, 300, 600, 720], 18 * MIN - 1),
        ("u", 30 * MIN, 36 * MIN, [1800], 36 * MIN - 1),
        # Sessions [0, 6) and [6, 12) touch and merge, as Flink's TimeWindow.intersects says.
        ("touch", 0, 12 * MIN, [0, 360], 12 * MIN - 1),
        ("apart", 0, 6 * MIN, [0], 6 * MIN - 1),
        ("apart", 6 * MIN + 60, 12 * MIN + 60, [360], 12 * MIN + 59),
    ])
    assert_fired_on_time(d)


def test_a_session_fires_when_the_watermark_passes_its_last_record_plus_the_gap() -> None:
    p = Pipeline("classic")
    event_source(p, bound_ms=MIN).window(SessionWindows(6 * MIN)).count().process(Probe()).to(Topic("out"))
    d = TestDriver(p)
    d.pipe("in", {"ts": 0}, key="u")
    d.pipe("in", {"ts": 4 * MIN}, key="u")
    d.pipe("in", {"ts": 11 * MIN - 1}, key="other")  # watermark: 10 min - 2 ms, one short
    assert d.output("out") == []
    d.pipe("in", {"ts": 11 * MIN}, key="other")  # watermark: 10 min - 1 ms
    assert results(d) == [("u", 0, 10 * MIN, 2, 10 * MIN - 1)]
    assert_fired_on_time(d)
