"""The sales-per-month service on a real Kafka broker: `fw run` in its own process, exactly once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from framework.kafka.io import produce_values, read_committed
from framework.testing.kafka import ServiceRun
from services.sales_per_month.pipeline import INPUT, OUTPUT

BUILDER = "services.sales_per_month.pipeline:build_pipeline"
JAN_31 = 1_769_860_800_000  # 2026-01-31T12:00:00Z
FEB_1 = 1_769_904_000_000  # 2026-02-01T00:00:00Z
POISON = b"\xff not avro"


def sale(order: str, product: str, amount: int, at: int) -> tuple[str, dict[str, Any], int]:
    """A record to produce: (key, value, timestamp)."""
    return order, {"product": product, "category": "tools", "amount": amount, "timestamp": at}, at


def test_sales_per_month_on_a_real_broker(kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    with ServiceRun(BUILDER, kafka_bootstrap, tmp_path, suffix=f"-{unique}") as run:
        produce_values(kafka_bootstrap, run.topic(INPUT).name, [(b"o-0", POISON, JAN_31)])
        run.produce(INPUT, [
            sale("o-1", "widget", 1_250, JAN_31),
            sale("o-2", "widget", 300, FEB_1),
            sale("o-3", "widget", 700, FEB_1 + 1_000),
            sale("o-4", "gadget", 50, FEB_1 - 1),  # the last millisecond of January
        ])
        monthly = run.read_by_key(OUTPUT, count=4)
        dead = read_committed(kafka_bootstrap, run.pipeline.dead_letter.name, 1, 60.0)

    # o-2 and o-3 have different order ids, so they may sit in different source partitions
    # and reach their bucket in either order: the counts go 1, 2 and the last total is the sum.
    assert [m["sales"] for m in monthly["2026-02 widget"]] == [1, 2]
    assert monthly["2026-02 widget"][-1] == {"month": "2026-02", "product": "widget", "category": "tools",
                                             "amount": 1_000, "sales": 2}
    assert monthly["2026-01 widget"] == [{"month": "2026-01", "product": "widget", "category": "tools",
                                          "amount": 1_250, "sales": 1}]
    assert monthly["2026-01 gadget"] == [{"month": "2026-01", "product": "gadget", "category": "tools",
                                          "amount": 50, "sales": 1}]
    assert dead == [(b"o-0", POISON)]
