"""State stays bounded (P20): a window's entries and timers leave the store when it fires.

Three hundred thousand records over ten thousand keys, with increasing event time, go through a
one-minute tumbling event-time window. At every checkpoint the window store holds exactly
the open windows' entries (one accumulator per key and open window; with no allowed lateness
their timers are kept in memory, one per entry), so its size is bounded by keys x open
windows whatever the input length; and every window that closed has the right count.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from typing import Any

from framework import IntSerde, Pipeline, TestDriver, Topic, TumblingWindows, WatermarkStrategy

MIN = 60_000
RECORDS = 300_000
KEYS = 10_000
STEP_MS = 6  # 10,000 records per minute of event time: 30 windows
JITTER_MS = 1_000  # disorder, within the bound
BOUND_MS = 2_000
CHECKPOINT_EVERY = 10_000


def pipeline() -> Pipeline:
    p = Pipeline("bounded")
    src = p.source(Topic("in", value_serde=IntSerde()),
                   watermarks=WatermarkStrategy.bounded_out_of_orderness(BOUND_MS))
    src.window(TumblingWindows(MIN)).count(name="w").to(Topic("counts"))
    return p


def records(seed: int = 20) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    keys = [f"key-{i}" for i in range(KEYS)]
    return [(keys[rng.randrange(KEYS)], i * STEP_MS + rng.randrange(JITTER_MS)) for i in range(RECORDS)]


def test_the_window_store_holds_only_open_windows_and_closed_ones_are_right() -> None:
    data = records()
    d = TestDriver(pipeline(), auto_checkpoint=False)
    open_windows: dict[int, set[str]] = defaultdict(set)  # start -> keys with state, not yet fired
    peak = 0
    for i, (key, ts) in enumerate(data):
        d.pipe("in", 1, key=key, timestamp=ts)
        open_windows[ts - ts % MIN].add(key)
        if i % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1:
            d.checkpoint()
            wm = d.watermark("w")
            for start in [s for s in open_windows if s + MIN - 1 <= wm]:
                del open_windows[start]
            entries = sum(len(keys) for keys in open_windows.values())
            assert len(open_windows) <= 2  # the bound is far below a minute
            assert d.state_sizes()["w"] == entries  # an accumulator each
            assert len(d.timers("w")) == entries  # and a timer in memory
            peak = max(peak, entries)
    assert peak <= 2 * KEYS
    d.checkpoint()
    d.advance_watermark(10**12)
    d.checkpoint()
    assert d.state_sizes()["w"] == 0 and d.timers("w") == []
    got: Counter[tuple[Any, int]] = Counter()
    for r in d.output("counts"):
        assert r.timestamp == r.value["end"] - 1
        got[(r.key, r.value["start"])] += r.value["value"]
    assert got == Counter((key, ts - ts % MIN) for key, ts in data)
    assert d.metrics().get("late_records.w", 0) == 0
