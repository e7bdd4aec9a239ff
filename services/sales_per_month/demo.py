"""The sales-per-month demo for ``fw demo --service sales-per-month``.

Input: sales of a few products at random times from January to April 2026 (not in time
order: the buckets have no watermark), keyed by order id. Check: the last output of each
``"YYYY-MM product"`` key (its amount and count) equals a direct sum over the input per
calendar month (UTC) and product.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Mapping
from datetime import UTC, datetime

from framework.demos import InputRecord, OutputRecord, ServiceDemo
from services.sales_per_month.pipeline import INPUT, OUTPUT

START = 1_767_225_600_000  # 2026-01-01T00:00:00Z
END = 1_777_593_600_000  # 2026-05-01T00:00:00Z
PRODUCTS = {"widget": "tools", "hammer": "tools", "gadget": "toys", "kite": "toys", "tea": "food"}


def generate(records: int, seed: int) -> list[InputRecord]:
    rng = random.Random(seed)
    names = sorted(PRODUCTS)
    out: list[InputRecord] = []
    for n in range(records):
        product, at = rng.choice(names), rng.randrange(START, END)
        out.append((f"o-{n}", {"product": product, "category": PRODUCTS[product],
                               "amount": rng.randint(100, 50_000), "timestamp": at}, at))
    return out


def expected(inputs: list[InputRecord]) -> dict[str, tuple[int, int]]:
    """Per "YYYY-MM product": (amount, sales), summed directly."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for _order, sale, _ts in inputs:
        when = datetime.fromtimestamp(sale["timestamp"] // 1000, tz=UTC)
        bucket = totals[f"{when.year:04d}-{when.month:02d} {sale['product']}"]
        bucket[0] += sale["amount"]
        bucket[1] += 1
    return {key: (amount, sales) for key, (amount, sales) in totals.items()}


def observe(outputs: Mapping[str, list[OutputRecord]]) -> dict[str, tuple[int, int]]:
    # A key's records are in one partition, in order: the last is the bucket's total.
    return {key: (m["amount"], m["sales"]) for key, m in outputs[OUTPUT]}


DEMO = ServiceDemo(source=INPUT, outputs=(OUTPUT,), generate=generate, expected=expected, observe=observe,
                   what="the amount and sales per calendar month and product", consumed_per_record=2)
