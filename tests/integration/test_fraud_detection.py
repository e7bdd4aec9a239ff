"""The fraud-detection service on a real Kafka broker: `fw run` in its own process, exactly once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from framework.kafka.io import produce_values, read_committed
from framework.testing.kafka import ServiceRun
from services.fraud_detection.pipeline import INPUT, OUTPUT

BUILDER = "services.fraud_detection.pipeline:build_pipeline"
T0 = 1_700_000_000_000
SECOND = 1_000
POISON = b"\xff not avro"


def pay(card: str, at: int, amount: float) -> tuple[str, dict[str, Any], int]:
    """A record to produce: (key, value, timestamp)."""
    return card, {"card": card, "timestamp": T0 + at, "amount": amount}, T0 + at


def test_fraud_alerts_on_a_real_broker(kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    # One partition: the far-ahead last transaction moves the watermark past every timer.
    with ServiceRun(BUILDER, kafka_bootstrap, tmp_path, suffix=f"-{unique}", partitions=1) as run:
        source = run.topic(INPUT).name
        produce_values(kafka_bootstrap, source, [(b"a", POISON, T0)])  # dead-lettered, not fatal
        run.produce(INPUT, [
            pay("a", 0, 0.5),
            pay("a", 30 * SECOND, 600.0),  # 30 s after a small one: alert
            pay("b", 0, 0.5),
            pay("b", 61 * SECOND, 900.0),  # 61 s after: too late
            pay("c", 0, 0.5),
            pay("c", 10 * SECOND, 20.0),  # ends the pattern
            pay("c", 20 * SECOND, 700.0),
            pay("end", 10 * 60 * SECOND, 1.0),
        ])
        found = run.read_by_key(OUTPUT, count=1)
        dead = read_committed(kafka_bootstrap, run.pipeline.dead_letter.name, 1, 60.0)

    assert found == {"a": [{"card": "a", "small_at": T0, "small_amount": 0.5,
                            "large_at": T0 + 30 * SECOND, "large_amount": 600.0}]}
    assert dead == [(b"a", POISON)]
