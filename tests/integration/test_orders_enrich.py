"""The orders-enrich service on a real Kafka broker: `fw run` in its own process, exactly once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from framework.kafka.io import produce_values, read_committed
from framework.testing.kafka import ServiceRun
from services.orders_enrich.pipeline import CUSTOMERS, ORDERS, OUTPUT

BUILDER = "services.orders_enrich.pipeline:build_pipeline"
T0 = 1_700_000_000_000
POISON = b"\xff not avro"


def customer(customer_id: str, at: int, tier: str | None) -> tuple[str, dict[str, Any] | None, int]:
    """A record to produce: (key, value, timestamp); ``tier`` None: a delete."""
    value = None if tier is None else {"customer_id": customer_id, "name": customer_id.upper(), "tier": tier,
                                       "timestamp": T0 + at}
    return customer_id, value, T0 + at


def order(order_id: str, customer_id: str, at: int) -> tuple[str, dict[str, Any], int]:
    return customer_id, {"order_id": order_id, "customer_id": customer_id, "amount": 100,
                         "timestamp": T0 + at}, T0 + at


def test_orders_enrich_on_a_real_broker(kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    # One partition: the far-ahead last customer record moves every task's customers'
    # watermark past the orders, which all wait for it (they lie within the grace).
    with ServiceRun(BUILDER, kafka_bootstrap, tmp_path, suffix=f"-{unique}", partitions=1) as run:
        produce_values(kafka_bootstrap, run.topic(ORDERS).name, [(b"c-1", POISON, T0)])
        run.produce(ORDERS, [order("o-1", "c-1", 10_000), order("o-2", "c-1", 30_000),
                             order("o-3", "c-2", 30_000)])
        run.produce(CUSTOMERS, [customer("c-1", 0, "new"), customer("c-2", 5_000, "gold"),
                                customer("c-1", 20_000, "silver"), customer("c-2", 25_000, None),
                                customer("end", 600_000, "new")])
        enriched = run.read_by_key(OUTPUT, count=3)
        dead = read_committed(kafka_bootstrap, run.pipeline.dead_letter.name, 1, 60.0)

    assert {k: [(e["order_id"], e["name"], e["tier"]) for e in v] for k, v in enriched.items()} == {
        "c-1": [("o-1", "C-1", "new"), ("o-2", "C-1", "silver")],
        "c-2": [("o-3", None, None)],
    }
    assert dead == [(b"c-1", POISON)]
