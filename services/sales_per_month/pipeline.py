"""Sales per month: per calendar month and product, the accumulated amount and number of sales.

Reads ``sales-per-month-sales`` (key: the order id; value: Avro ``sales_per_month.Sale``
with ``product``, ``category``, ``amount`` in cents and ``timestamp`` in ms). A sale's
month is the calendar month (``YYYY-MM``) of its event time, the ``timestamp`` field, in
UTC. Calendar months are not of fixed length, and the framework's time windows are
(tumbling windows of N ms), so the monthly buckets are keys, not windows: the ``by-month``
step re-keys every sale by ``"YYYY-MM product"`` through a repartition topic, and the
``monthly`` rolling aggregate keeps, per such key, ``month``, ``product``, ``category``
(of its latest sale), ``amount`` and ``sales``. After every sale it writes that bucket's
totals so far as Avro ``sales_per_month.Monthly`` to ``sales-per-month-monthly``, keyed by
``"YYYY-MM product"``; the latest record of a key is its month's total. Buckets never
close: a sale of an old month, however late, still updates its month (no lateness cut-off,
no watermark), and the store keeps one entry per month and product. State is in RocksDB
with a changelog topic; under exactly-once a restart neither loses nor double-counts a
sale. A record that does not decode goes to ``sales-per-month-dead-letter``.

``build_pipeline(suffix)`` appends ``suffix`` to the service and topic names (tests and
demos use a fresh one). Run it with ``fw run services.sales_per_month.pipeline:pipeline``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from framework import AvroSerde, Pipeline, StringSerde, Topic, load_schema

SERVICE = "sales-per-month"
INPUT = f"{SERVICE}-sales"
OUTPUT = f"{SERVICE}-monthly"


def month_of(timestamp_ms: int) -> str:
    """The calendar month of an event time in ms since the epoch, ``YYYY-MM`` in UTC."""
    return datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC).strftime("%Y-%m")


def bucket(sale: dict[str, Any]) -> str:
    """A sale's monthly bucket, the key of its totals: ``"YYYY-MM product"``."""
    return f"{month_of(sale['timestamp'])} {sale['product']}"


def no_sales() -> dict[str, Any]:
    """A bucket's totals before its first sale."""
    return {"month": "", "product": "", "category": "", "amount": 0, "sales": 0}


def add_sale(totals: dict[str, Any], sale: dict[str, Any]) -> dict[str, Any]:
    """The bucket's totals after one more sale (a new dict: state values are not mutated)."""
    return {"month": month_of(sale["timestamp"]), "product": sale["product"], "category": sale["category"],
            "amount": totals["amount"] + sale["amount"], "sales": totals["sales"] + 1}


def build_pipeline(suffix: str = "") -> Pipeline:
    """The sales-per-month pipeline; ``suffix`` is appended to the service and topic names."""
    p = Pipeline(f"{SERVICE}{suffix}")
    sales = p.source(
        Topic(f"{INPUT}{suffix}", key_serde=StringSerde(),
              value_serde=AvroSerde(load_schema("sales_per_month.Sale"))),
        name="sales",
    )
    (
        sales.key_by(bucket, name="by-month")
        .aggregate(no_sales, add_sale, name="monthly")
        .to(Topic(f"{OUTPUT}{suffix}", key_serde=StringSerde(),
                  value_serde=AvroSerde(load_schema("sales_per_month.Monthly"))), name="to-monthly")
    )
    return p


pipeline = build_pipeline()
