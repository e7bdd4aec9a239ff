"""Watermarks between two services: a sink ``Topic(..., watermarks=True)`` writes control
records that a downstream service reads with ``WatermarkStrategy.from_upstream()``."""

from __future__ import annotations

from framework import (
    JsonSerde,
    Pipeline,
    StringSerde,
    TestDriver,
    Topic,
    TumblingWindows,
    WatermarkStrategy,
)
from framework.engine.partitioner import partition_for

MIN = 60_000


def _upstream() -> Pipeline:
    p = Pipeline("enrich")
    src = p.source(Topic("clicks"), watermarks=WatermarkStrategy.bounded_out_of_orderness(1_000, timestamp="ts"))
    src.map(lambda v: {**v, "enriched": True}).to(Topic("enriched", partitions=2, watermarks=True))
    return p


def _downstream() -> Pipeline:
    p = Pipeline("count-clicks")
    src = p.source(Topic("enriched", key_serde=StringSerde(), value_serde=JsonSerde()),
                   watermarks=WatermarkStrategy.from_upstream(timestamp="ts"))
    src.window(TumblingWindows(MIN)).count(name="per-minute").to(Topic("clicks-per-minute"))
    return p


def _forward(up: TestDriver, down: TestDriver, topic: str, seen: dict[int, int]) -> None:
    """Copy what the upstream driver committed to ``topic`` into the downstream one, raw,
    partition by partition (as the downstream consumer would read it)."""
    for p, part in enumerate(up.topics.log(topic)):
        for m in part[seen.get(p, 0):]:
            down.pipe_raw(topic, m.value(), key=m.key(), timestamp=m.timestamp()[1], headers=m.headers(),
                          partition=p)
        seen[p] = len(part)


def test_windows_downstream_fire_on_the_upstream_watermarks_and_skip_control_records() -> None:
    up, down = TestDriver(_upstream(), partitions=2), TestDriver(_downstream(), partitions=2)
    seen: dict[int, int] = {}
    users = [f"user-{i}" for i in range(8)]
    clicks = [(users[i % 8], i * 10_000) for i in range(40)]  # 400 s of clicks, one every 10 s
    for user, ts in clicks:
        up.pipe("clicks", {"user": user, "ts": ts}, key=user)
    _forward(up, down, "enriched", seen)

    by_partition: dict[int, int] = {}
    for user, ts in clicks:
        p = partition_for(user.encode(), 2)
        by_partition[p] = max(by_partition.get(p, ts), ts)
    assert len(by_partition) == 2, "the test needs clicks on both upstream partitions"
    # Downstream, the minimum over both upstream tasks' watermarks (max ts - bound - 1) decides.
    low = min(by_partition.values()) - 1_000 - 1
    expected: dict[tuple[str, int], int] = {}
    for user, ts in clicks:
        start = ts - ts % MIN
        if start + MIN - 1 <= low:
            expected[(user, start)] = expected.get((user, start), 0) + 1
    fired = {(r.key, r.value["start"]): r.value["value"] for r in down.output("clicks-per-minute")}
    assert expected and fired == expected
    assert all(down.watermark("per-minute", partition=p) == low for p in range(2))
    # Control records travel in the topic but are neither outputs nor records downstream.
    assert all(r.value is not None for r in up.output("enriched"))
    assert down.metrics()["dead_letters"] == 0
