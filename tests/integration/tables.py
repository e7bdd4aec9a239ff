"""The history of ``pipelines.enriched_orders`` and the joins it must give: orders and their
customers' updates (some deletes) on one event-time line with disorder within the watermark
bound, and a last update and order per partition far ahead, so every real order is released."""

from __future__ import annotations

import json
import random
from bisect import bisect_right
from collections import Counter
from typing import Any

from framework.engine.partitioner import partition_for

PARTITIONS, BOUND_MS, START = 3, 400, 1_700_000_000_000
Event = tuple[str, str, int, Any]  # (topic kind, key, event time, order id | customer tier | None)


def events(orders: int, customers: int, seed: int) -> list[Event]:
    """One event line: about one customer update per four orders, one update in eight a delete."""
    rng = random.Random(seed)
    now, i = START, 0
    out: list[Event] = []
    while i < orders:
        now += rng.randint(0, 40)
        ts = now - rng.randint(0, BOUND_MS)
        key = f"c{rng.randrange(customers)}"
        if rng.random() < 0.2:
            out.append(("customer", key, ts, None if rng.random() < 0.125 else rng.choice(["gold", "silver", "new"])))
        else:
            out.append(("order", key, ts, i))
            i += 1
    far = now + 10 * BOUND_MS
    for p in range(PARTITIONS):  # every partition's two watermarks pass every real order
        key = next(f"end{j}" for j in range(1000) if partition_for(f"end{j}".encode(), PARTITIONS) == p)
        out += [("customer", key, far, "end"), ("order", key, far, -1 - p)]
    return out


def history(suffix: str, evs: list[Event]) -> dict[str, list[tuple[Any, ...]]]:
    """The two topics' records, each in its key's partition, with its event time as the Kafka
    timestamp too (a delete has no value to carry it)."""
    out: dict[str, list[tuple[Any, ...]]] = {f"eno-customers-{suffix}": [], f"eno-orders-{suffix}": []}
    for kind, key, ts, v in evs:
        k = key.encode()
        if kind == "customer":
            value = None if v is None else json.dumps({"tier": v, "ts": ts}).encode()
            out[f"eno-customers-{suffix}"].append((partition_for(k, PARTITIONS), k, value, None, ts))
        else:
            out[f"eno-orders-{suffix}"].append((partition_for(k, PARTITIONS), k, json.dumps({"id": v, "ts": ts}).encode(),
                                                None, ts))
    return out


def expected(evs: list[Event]) -> Counter[tuple[str, int, Any]]:
    """Each real order with its customer's tier as of its time: the newest update at or before
    it, of equal times the later one in the topic."""
    updates: dict[str, list[tuple[int, int, Any]]] = {}
    for seq, (kind, key, ts, tier) in enumerate(evs):
        if kind == "customer":
            updates.setdefault(key, []).append((ts, seq, tier))
    for versions in updates.values():
        versions.sort(key=lambda u: (u[0], u[1]))
    out: Counter[tuple[str, int, Any]] = Counter()
    for kind, key, ts, oid in evs:
        if kind != "order" or oid < 0:
            continue
        versions = updates.get(key, [])
        i = bisect_right(versions, ts, key=lambda u: u[0])
        out[(key, oid, versions[i - 1][2] if i else None)] += 1
    return out


def global_history(suffix: str, evs: list[Event]) -> dict[str, list[tuple[Any, ...]]]:
    """The same line for ``pipelines.priced_orders``: the customers' updates as products (by
    sku, in 3 partitions), the orders keyed by one of 17 users in 4 partitions, each naming its
    sku; the far-ahead orders left out (the products' last updates release everything)."""
    out: dict[str, list[tuple[Any, ...]]] = {f"gto-products-{suffix}": [], f"gto-orders-{suffix}": []}
    for kind, key, ts, v in evs:
        if kind == "customer":
            value = None if v is None else json.dumps({"tier": v, "ts": ts}).encode()
            out[f"gto-products-{suffix}"].append((partition_for(key.encode(), PARTITIONS), key.encode(), value, None, ts))
        elif v >= 0:
            user = f"u{v % 17}".encode()
            out[f"gto-orders-{suffix}"].append((partition_for(user, 4), user,
                                                json.dumps({"id": v, "sku": key, "ts": ts}).encode(), None, ts))
    return out


def two_tables_history(suffix: str, evs: list[Event]) -> dict[str, list[tuple[Any, ...]]]:
    """The line as two tables for ``pipelines.joined_tables``: the customers' updates, and
    each order as its customer's account balance (the order id)."""
    out: dict[str, list[tuple[Any, ...]]] = {f"tt-accounts-{suffix}": [], f"tt-customers-{suffix}": []}
    for kind, key, ts, v in evs:
        k = key.encode()
        if kind == "customer":
            value = None if v is None else json.dumps({"tier": v}).encode()
            out[f"tt-customers-{suffix}"].append((partition_for(k, PARTITIONS), k, value, None, ts))
        else:
            out[f"tt-accounts-{suffix}"].append((partition_for(k, PARTITIONS), k, json.dumps({"bal": v}).encode(),
                                                 None, ts))
    return out


def joined_at(evs: list[Event], key: str, t: int) -> list[Any] | None:
    """The outer join of the two tables of ``two_tables_history`` for ``key`` at time ``t``."""
    rows: dict[str, tuple[int, int, Any]] = {}
    for seq, (kind, k, ts, v) in enumerate(evs):
        if k == key and ts <= t and (kind not in rows or (ts, seq) >= rows[kind][:2]):
            rows[kind] = (ts, seq, v)
    bal = rows["order"][2] if "order" in rows else None
    tier = rows["customer"][2] if "customer" in rows else None
    return None if bal is None and tier is None else [bal, tier]
