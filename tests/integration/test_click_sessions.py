"""The click-sessions service on a real Kafka broker: `fw run` in its own process, exactly once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from framework.kafka.io import produce_values, read_committed
from framework.testing.kafka import ServiceRun
from services.click_sessions.pipeline import INPUT, OUTPUT

BUILDER = "services.click_sessions.pipeline:build_pipeline"
T0 = 1_700_000_000_000
MINUTE = 60_000
POISON = b"\xff not avro"


def click(user: str, at: int) -> tuple[str, dict[str, Any], int]:
    """A record to produce: (key, value, timestamp)."""
    return user, {"user": user, "timestamp": T0 + at, "page": "/"}, T0 + at


def test_click_sessions_on_a_real_broker(kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    # One partition: the far-ahead last click moves the watermark of every task past the sessions.
    with ServiceRun(BUILDER, kafka_bootstrap, tmp_path, suffix=f"-{unique}", partitions=1) as run:
        produce_values(kafka_bootstrap, run.topic(INPUT).name, [(b"ann", POISON, T0)])
        run.produce(INPUT, [
            click("ann", 0),
            click("bob", 5 * MINUTE),
            click("ann", 20 * MINUTE),
            click("bob", 40 * MINUTE),  # 35 min after bob's first click: a second session
            click("end", 5 * 60 * MINUTE),  # its own session never closes: not an output
        ])
        found = run.read_by_key(OUTPUT, count=3)
        dead = read_committed(kafka_bootstrap, run.pipeline.dead_letter.name, 1, 60.0)

    assert found == {
        "ann": [{"start": T0, "end": T0 + 50 * MINUTE, "value": {"clicks": 2, "duration_ms": 20 * MINUTE}}],
        "bob": [{"start": T0 + 5 * MINUTE, "end": T0 + 35 * MINUTE, "value": {"clicks": 1, "duration_ms": 0}},
                {"start": T0 + 40 * MINUTE, "end": T0 + 70 * MINUTE, "value": {"clicks": 1, "duration_ms": 0}}],
    }
    assert dead == [(b"ann", POISON)]
