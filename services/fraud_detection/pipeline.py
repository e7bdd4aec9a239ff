"""Fraud detection: per card, a small transaction followed within a minute by a large one.

Reads ``fraud-detection-transactions`` (key: the card id; value: Avro
``fraud_detection.Transaction`` with ``card``, ``timestamp`` in ms and ``amount``). Event
time is the ``timestamp``; transactions arrive out of order by at most ``BOUND_MS``.

The ``detector`` process function follows Flink's fraud-detection walkthrough: per card it
keeps, in value state, the last transaction if it was small (amount under ``SMALL``), with
an event-time timer ``WITHIN_MS`` after it that forgets it. The card's next transaction
(in arrival order) clears the flag; if that transaction is large (amount over ``LARGE``)
and at most ``WITHIN_MS`` after the small one in event time, it writes Avro
``fraud_detection.Alert`` (``card``, ``small_at``, ``small_amount``, ``large_at``,
``large_amount``) to ``fraud-detection-alerts``, keyed by card. So a small transaction
followed by another small one and then a large one raises no alert (the flag moves to the
second small one, which the large one then follows). Pending timers are state: they
survive restarts and fire once. A record that does not decode goes to the dead-letter
topic ``fraud-detection-dead-letter``.

``build_pipeline(suffix)`` appends ``suffix`` to the service and topic names (tests and
demos use a fresh one). Run it with ``fw run services.fraud_detection.pipeline:pipeline``.
"""

from __future__ import annotations

from typing import Any

from framework import (
    AvroSerde,
    Pipeline,
    ProcessContext,
    ProcessFunction,
    StringSerde,
    Topic,
    WatermarkStrategy,
    load_schema,
)

SERVICE = "fraud-detection"
INPUT = f"{SERVICE}-transactions"
OUTPUT = f"{SERVICE}-alerts"
SMALL = 1.00  # a transaction under this is "small" (a card thief testing the card)
LARGE = 500.00  # a transaction over this is "large"
WITHIN_MS = 60_000  # the large one must come at most this long after the small one
BOUND_MS = 5_000  # a transaction arrives at most this much after a later one


def is_alert(small: dict[str, Any] | None, transaction: dict[str, Any]) -> bool:
    """Whether ``transaction`` following the card's pending ``small`` one raises an alert."""
    return (small is not None and transaction["amount"] > LARGE
            and 0 <= transaction["timestamp"] - small["at"] <= WITHIN_MS)


class FraudDetector(ProcessFunction):
    """Per card: flag a small transaction for ``WITHIN_MS``; a large one next alerts."""

    def open(self, ctx: ProcessContext) -> None:
        self.small = ctx.value_state("small")  # {"at", "amount"} of the pending small one, or None

    def process(self, key: Any, value: Any, ctx: ProcessContext) -> None:
        small = self.small.get()
        if small is not None:
            if is_alert(small, value):
                ctx.emit({"card": key, "small_at": small["at"], "small_amount": small["amount"],
                          "large_at": value["timestamp"], "large_amount": value["amount"]})
            # Any next transaction ends the pattern, as in Flink's walkthrough.
            ctx.delete_event_timer(small["at"] + WITHIN_MS)
            self.small.clear()
        if value["amount"] < SMALL:
            self.small.set({"at": value["timestamp"], "amount": value["amount"]})
            ctx.register_event_timer(value["timestamp"] + WITHIN_MS)

    def on_timer(self, timestamp: int, key: Any, ctx: ProcessContext) -> None:
        small = self.small.get()
        if small is not None and small["at"] + WITHIN_MS <= timestamp:
            self.small.clear()  # a minute passed: a large transaction now is no longer suspect


def build_pipeline(suffix: str = "") -> Pipeline:
    """The fraud-detection pipeline; ``suffix`` is appended to the service and topic names."""
    p = Pipeline(f"{SERVICE}{suffix}")
    transactions = p.source(
        Topic(f"{INPUT}{suffix}", key_serde=StringSerde(),
              value_serde=AvroSerde(load_schema("fraud_detection.Transaction"))),
        watermarks=WatermarkStrategy.bounded_out_of_orderness(BOUND_MS, timestamp="timestamp"),
        name="transactions",
    )
    (
        transactions.process(FraudDetector(), name="detector")
        .to(Topic(f"{OUTPUT}{suffix}", key_serde=StringSerde(),
                  value_serde=AvroSerde(load_schema("fraud_detection.Alert"))), name="to-alerts")
    )
    return p


pipeline = build_pipeline()
