"""The fraud-detection demo for ``fw demo --service fraud-detection``.

Input: transactions of a few cards, in event-time order, a few seconds apart, about one in
ten small (under 1.00) and one in ten large (over 500.00). Check: the alerts per card
equal the rule applied directly to each card's transactions in order.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from framework.demos import InputRecord, OutputRecord, ServiceDemo
from services.fraud_detection.pipeline import INPUT, LARGE, OUTPUT, SMALL, WITHIN_MS

T0 = 1_700_000_000_000
CARDS = 5


def generate(records: int, seed: int) -> list[InputRecord]:
    """``records`` transactions of ``CARDS`` cards, 1 to 10 s apart."""
    rng = random.Random(seed)
    at, out = T0, []
    for _ in range(records):
        at += rng.randint(1_000, 10_000)
        card = f"card-{rng.randrange(CARDS)}"
        kind = rng.random()
        amount = (round(rng.uniform(0.01, 0.99), 2) if kind < 0.1
                  else round(rng.uniform(500.01, 2_000.0), 2) if kind < 0.2
                  else round(rng.uniform(1.0, 200.0), 2))
        out.append((card, {"card": card, "timestamp": at, "amount": amount}, at))
    return out


def expected(inputs: list[InputRecord]) -> dict[str, list[tuple[int, int]]]:
    """Per card, (small_at, large_at) of each alert: a transaction under SMALL immediately
    followed, on the same card, by one over LARGE at most WITHIN_MS later."""
    previous: dict[str, dict[str, Any]] = {}
    alerts: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for card, t, _ts in inputs:
        before = previous.get(card)
        if (before is not None and before["amount"] < SMALL and t["amount"] > LARGE
                and t["timestamp"] - before["timestamp"] <= WITHIN_MS):
            alerts[card].append((before["timestamp"], t["timestamp"]))
        previous[card] = t
    return dict(alerts)


def observe(outputs: Mapping[str, list[OutputRecord]]) -> dict[str, list[tuple[int, int]]]:
    alerts: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for card, alert in outputs[OUTPUT]:
        alerts[card].append((alert["small_at"], alert["large_at"]))
    return dict(alerts)


DEMO = ServiceDemo(source=INPUT, outputs=(OUTPUT,), generate=generate, expected=expected, observe=observe,
                   what="the alerts per card (small then large within a minute)", partitions=1)
