"""Orders enriched with customers: each order joined with its customer's record as of the
order's time.

Reads two topics keyed alike, by the customer id, so a customer's orders and records meet in
one task:

- ``orders-enrich-customers``, read as a table (Avro ``orders_enrich.Customer``:
  ``customer_id``, ``name``, ``tier``, ``timestamp`` in ms). Each record is the customer's
  value from its ``timestamp`` on; a record without a value (a tombstone) deletes the
  customer from its Kafka timestamp on. The ``customers`` store keeps each customer's
  versions over ``HISTORY_MS``.
- ``orders-enrich-orders``, a stream (Avro ``orders_enrich.Order``: ``order_id``,
  ``customer_id``, ``amount`` in cents, ``timestamp`` in ms).

Both have event time from ``timestamp``, out of order by at most ``BOUND_MS``. The
``enrich`` join gives each order the customer's record **as of the order's time**: the
newest version at or before it, whichever of the two topics was read first. An order waits
in the join's store until the customers' watermark reaches its time, at most ``GRACE_MS``
of order time (a customers partition that stays silent that long no longer holds its orders
back). It is a left join: an order of a customer without a record then (none yet, or
deleted) still goes out, with ``name`` and ``tier`` null. The result, Avro
``orders_enrich.Enriched`` keyed by the customer id, goes to ``orders-enrich-enriched`` with
the order's timestamp. A record that does not decode goes to ``orders-enrich-dead-letter``.
docs/tables.md says what the table keeps and what "as of" means on each engine.

``build_pipeline(suffix)`` appends ``suffix`` to the service and topic names (tests and
demos use a fresh one). Run it with ``fw run services.orders_enrich.pipeline:pipeline``.
"""

from __future__ import annotations

from typing import Any

from framework import AvroSerde, Pipeline, StringSerde, Topic, WatermarkStrategy, load_schema

SERVICE = "orders-enrich"
CUSTOMERS = f"{SERVICE}-customers"
ORDERS = f"{SERVICE}-orders"
OUTPUT = f"{SERVICE}-enriched"
BOUND_MS = 5_000  # a record arrives at most this much after a later one of its topic
GRACE_MS = 3_600_000  # an order waits at most this much order time for the customers' table
HISTORY_MS = 7 * 86_400_000  # customers' versions kept for lookups this far back


def enriched(order: dict[str, Any], customer: dict[str, Any] | None) -> dict[str, Any]:
    """The ``Enriched`` record of an order and its customer's record then (``None``: none)."""
    return {**order, "name": None if customer is None else customer["name"],
            "tier": None if customer is None else customer["tier"]}


def build_pipeline(suffix: str = "") -> Pipeline:
    """The orders-enrich pipeline; ``suffix`` is appended to the service and topic names."""
    p = Pipeline(f"{SERVICE}{suffix}")
    watermarks = WatermarkStrategy.bounded_out_of_orderness(BOUND_MS, timestamp="timestamp")
    customers = p.table(
        Topic(f"{CUSTOMERS}{suffix}", key_serde=StringSerde(),
              value_serde=AvroSerde(load_schema("orders_enrich.Customer"))),
        history_ms=HISTORY_MS, watermarks=watermarks, name="customers",
    )
    orders = p.source(
        Topic(f"{ORDERS}{suffix}", key_serde=StringSerde(),
              value_serde=AvroSerde(load_schema("orders_enrich.Order"))),
        watermarks=watermarks, name="orders",
    )
    (
        orders.join(customers, enriched, how="left", grace_ms=GRACE_MS, name="enrich")
        .to(Topic(f"{OUTPUT}{suffix}", key_serde=StringSerde(),
                  value_serde=AvroSerde(load_schema("orders_enrich.Enriched"))), name="to-enriched")
    )
    return p


pipeline = build_pipeline()
