"""The traffic service on a real Kafka broker: `fw run` in its own process, exactly once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from framework.kafka.io import produce_values, read_committed
from framework.testing.kafka import ServiceRun
from services.traffic.pipeline import ACCIDENTS, COUNTS, INPUT

BUILDER = "services.traffic.pipeline:build_pipeline"
T0 = 1_699_999_800_000  # a 5-minute boundary
SECOND = 1_000
MINUTE = 60_000
POISON = b"\xff not avro"


def crossing(intersection: str, at: int) -> tuple[str, dict[str, Any], int]:
    """A record to produce: (key, value, timestamp)."""
    return intersection, {"intersection": intersection, "timestamp": T0 + at, "vehicle": f"v{at}"}, T0 + at


def test_counts_and_accidents_on_a_real_broker(kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    # One partition: the far-ahead last crossing moves the watermark of every task past the windows.
    with ServiceRun(BUILDER, kafka_bootstrap, tmp_path, suffix=f"-{unique}", partitions=1) as run:
        produce_values(kafka_bootstrap, run.topic(INPUT).name, [(b"x", POISON, T0)])
        run.produce(INPUT, [
            *(crossing("x", i * 20 * SECOND) for i in range(12)),  # 12 in [0, 5) min
            crossing("x", 6 * MINUTE),  # then 2 in [5, 10)
            crossing("x", 7 * MINUTE),
            crossing("end", 60 * MINUTE),  # its own windows never close: not an output
        ])
        counts = run.read_by_key(COUNTS, count=2)
        accidents = run.read_by_key(ACCIDENTS, count=1)
        dead = read_committed(kafka_bootstrap, run.pipeline.dead_letter.name, 1, 60.0)

    assert counts == {"x": [{"start": T0, "end": T0 + 5 * MINUTE, "value": 12},
                            {"start": T0 + 5 * MINUTE, "end": T0 + 10 * MINUTE, "value": 2}]}
    # sliding windows [-5, 5) 12, [0, 10) 14, [5, 15) 2: fewer than half of 14
    assert accidents == {"x": [{"intersection": "x", "start": T0 + 5 * MINUTE, "end": T0 + 15 * MINUTE,
                                "vehicles": 2, "previous_vehicles": 14}]}
    assert dead == [(b"x", POISON)]
