"""Pipelines the integration tests run as real `fw run` processes.

Topic and group names carry ``FW_TEST_SUFFIX`` so every test has its own.
"""

from __future__ import annotations

import os

from framework.pipeline import Pipeline, Topic
from framework.serde import AvroSerde, JsonSerde, StringSerde, load_schema


def _suffix() -> str:
    return os.environ["FW_TEST_SUFFIX"]


def parity(n: int) -> str:
    return "even" if n % 2 == 0 else "odd"


def even_odd() -> Pipeline:
    """Even/odd running sums through a repartition topic, per-source-key counts, and an echo."""
    s = _suffix()
    p = Pipeline(f"eo-{s}")
    numbers = p.source(Topic(f"numbers-{s}", key_serde=StringSerde(), value_serde=JsonSerde(), partitions=4))
    numbers.key_by(parity, name="parity").sum(name="sums").to(Topic(f"sums-{s}"))
    numbers.count(name="counts").to(Topic(f"counts-{s}"))
    numbers.to(Topic(f"seen-{s}"))
    return p


def avro_numbers() -> Pipeline:
    """Avro numbers (schemas/number.avsc) → echo and per-key count; bad Avro → dead letters."""
    s = _suffix()
    p = Pipeline(f"avro-{s}")
    numbers = p.source(Topic(f"avro-numbers-{s}", value_serde=AvroSerde(load_schema("demo.Number")),
                             partitions=4))
    numbers.map(lambda r: r["n"]).to(Topic(f"avro-seen-{s}"))
    numbers.count(name="counts").to(Topic(f"avro-counts-{s}"))
    return p


# -- two_drivers: the same pipeline through the TestDriver and the Kafka runtime ------------

from typing import Any  # noqa: E402 - this section was appended; the imports above are untouched

from framework.operators.process import ProcessContext  # noqa: E402
from framework.pipeline import ProcessFunction  # noqa: E402

SMALL_BELOW = 10  # an amount < 10 is "small"
LARGE_ABOVE = 500  # an amount > 500 is "large"


def amount_band(amount: int) -> str:
    return "small" if amount < SMALL_BELOW else "large" if amount > LARGE_ABOVE else "medium"


class LargeAfterSmall(ProcessFunction):
    """Per user (the source key): a small amount immediately followed by a large one is an
    alert, numbered per user. Value state: the pending small amount, and the alert count."""

    def open(self, ctx: ProcessContext) -> None:
        self.small = ctx.value_state("small")
        self.alerts = ctx.value_state("alerts", 0)

    def process(self, key: Any, value: Any, ctx: ProcessContext) -> None:
        amount = value["amount"]
        small = self.small.get()
        if small is not None and amount > LARGE_ABOVE:
            n = self.alerts.get() + 1
            self.alerts.set(n)
            ctx.emit({"user": key, "alert": n, "small": small, "large": amount})
        if amount < SMALL_BELOW:
            self.small.set(amount)
        elif small is not None:
            self.small.clear()


def two_drivers() -> Pipeline:
    """Transactions {"user", "amount"} keyed by user (FW_TEST_PARTITIONS partitions):

    - ``alerts`` (a ProcessFunction on the source key) -> ``td-alerts-<suffix>``;
    - filter (drop multiples of 13) -> map (add the band) ->
      key_by user -> aggregate (sum, count) -> ``td-totals-<suffix>``, and
      key_by band -> aggregate (sum, count) -> ``td-bands-<suffix>``.
    """
    s = _suffix()
    n = int(os.environ["FW_TEST_PARTITIONS"])
    p = Pipeline(f"td-{s}", partitions=n)
    tx = p.source(Topic(f"td-tx-{s}", key_serde=StringSerde(), value_serde=JsonSerde(), partitions=n),
                  name="tx")
    tx.process(LargeAfterSmall(), name="alerts").to(Topic(f"td-alerts-{s}"), name="to-alerts")
    kept = tx.filter(lambda t: t["amount"] % 13 != 0, name="not-13") \
             .map(lambda t: {**t, "band": amount_band(t["amount"])}, name="band")

    def add(acc: tuple[int, int], t: dict[str, Any]) -> tuple[int, int]:
        return acc[0] + t["amount"], acc[1] + 1

    kept.key_by(lambda t: t["user"], name="by-user") \
        .aggregate(lambda: (0, 0), add, name="totals").to(Topic(f"td-totals-{s}"), name="to-totals")
    kept.key_by(lambda t: t["band"], name="by-band") \
        .aggregate(lambda: (0, 0), add, name="bands").to(Topic(f"td-bands-{s}"), name="to-bands")
    return p
