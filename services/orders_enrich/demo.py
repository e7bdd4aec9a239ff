"""The orders-enrich demo for ``fw demo --service orders-enrich``.

Input, on two topics: orders of a few customers, and about one customer record per four
orders (sign-ups, tier changes, and one in eight a delete), on one event-time line of about
half an hour whatever the number of records, each topic out of order by at most
``BOUND_MS``. Customer records come before, after and between their customers' orders. The
half hour is shorter than ``GRACE_MS``, so every order waits for the customers' table
rather than its grace, and its result does not depend on which topic the service read first.

Check: a brute-force as-of join over the generated input, each order with its customer's
newest record at or before the order's time (of two at the same time, the later one in the
customers topic; none, or a delete: null), equals the service's output, restricted to the
orders the final customers' watermark released (at most the last record's time -
``BOUND_MS`` - 1); every such order is joined exactly once.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from framework.demos import OutputRecord, ServiceDemo, TopicRecord
from services.orders_enrich.pipeline import BOUND_MS, CUSTOMERS, GRACE_MS, ORDERS, OUTPUT

T0 = 1_700_000_000_000
SPAN_MS = 30 * 60_000  # the input's event time, however many records
NAMES = ["Ann", "Bob", "Cyd", "Dee", "Eve", "Fay", "Gus", "Hal"]
TIERS = ["new", "silver", "gold"]
Joined = tuple[str, str | None, str | None]  # customer, name, tier
assert SPAN_MS < GRACE_MS, "a grace that ends inside the demo would make its result depend on timing"


def generate(records: int, seed: int) -> list[TopicRecord]:
    """``records`` orders and customer records together, in produce order per topic."""
    rng = random.Random(seed)
    step = max(2, 2 * SPAN_MS // records)  # the line advances step / 2 ms per record on average
    now, out = T0, []
    for n in range(records):
        now += rng.randrange(step)
        ts = now - rng.randint(0, BOUND_MS)
        i = rng.randrange(len(NAMES))
        customer = f"c-{i}"
        if rng.random() < 0.2:
            value = None if rng.random() < 0.125 else {
                "customer_id": customer, "name": NAMES[i], "tier": rng.choice(TIERS), "timestamp": ts}
            out.append((CUSTOMERS, customer, value, ts))
        else:
            out.append((ORDERS, customer, {"order_id": f"o-{n}", "customer_id": customer,
                                           "amount": rng.randint(100, 50_000), "timestamp": ts}, ts))
    return out


def as_of(updates: list[tuple[int, Any]], ts: int) -> Any:
    """Brute force: the value of the last update (in topic order) of those with the newest
    time at or before ``ts``; ``None`` for none."""
    best: tuple[int, Any] | None = None
    for at, value in updates:
        if at <= ts and (best is None or at >= best[0]):
            best = (at, value)
    return None if best is None else best[1]


def expected(inputs: list[TopicRecord]) -> dict[str, list[Joined]]:
    """Per order id the service released, its customer, name and tier as of its time."""
    updates: dict[str, list[tuple[int, Any]]] = defaultdict(list)
    for topic, customer, value, ts in inputs:
        if topic == CUSTOMERS:
            updates[customer].append((ts, value))
    released_until = max(ts for topic, _, _, ts in inputs if topic == CUSTOMERS) - BOUND_MS - 1
    out: dict[str, list[Joined]] = {}
    for topic, customer, order, ts in inputs:
        if topic == ORDERS and ts <= released_until:
            row = as_of(updates[customer], ts)
            out[order["order_id"]] = [(customer, row and row["name"], row and row["tier"])]
    return out


def observe(outputs: Mapping[str, list[OutputRecord]]) -> dict[str, list[Joined]]:
    found: dict[str, list[Joined]] = defaultdict(list)
    for customer, e in outputs[OUTPUT]:
        found[e["order_id"]].append((customer, e["name"], e["tier"]))
    return dict(found)


DEMO = ServiceDemo(source=(ORDERS, CUSTOMERS), outputs=(OUTPUT,), generate=generate, expected=expected,
                   observe=observe, what="each order's customer, name and tier as of the order's time",
                   partitions=1)
