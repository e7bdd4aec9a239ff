"""Tables and the stream-table join (docs/tables.md) on the TestDriver: the value as of a
record's event time whatever the interleaving of the two topics, grace, history, deletes,
inner and left joins, latest-value joins without event time, checkpoints and restores."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framework import JsonSerde, Pipeline, StringSerde, TestDriver, Topic, WatermarkStrategy
from framework.engine.partitioner import partition_for
from framework.engine.record import Record
from framework.errors import PipelineError
from framework.operators.table import add_version, as_of
from framework.replay.plan import ReplayPlan, check_contract, stage_topics
from framework.replay.stage import run_locally
from tests.present import present

FAR = 10**12


def bounded(bound_ms: int = 0) -> WatermarkStrategy:
    return WatermarkStrategy.bounded_out_of_orderness(bound_ms, timestamp="ts")


def enrich(how: str = "inner", grace_ms: int | None = None, history_ms: int = 10**9, bound: int = 0,
           timed: bool = True) -> Pipeline:
    """Orders joined with their customer's name as of the order's time."""
    p = Pipeline("enrich")
    customers = p.table(Topic("customers"), history_ms=history_ms, watermarks=bounded(bound) if timed else None,
                        name="customers")
    orders = p.source(Topic("orders"), watermarks=bounded(bound) if timed else None)
    orders.join(customers, lambda o, c: [o["id"], None if c is None else c["name"]], how=how, grace_ms=grace_ms,
                name="enrich").to(Topic("out"))
    return p


def joined(d: TestDriver) -> list[tuple[Any, Any, Any, int]]:
    return sorted((r.key, r.value[0], r.value[1], r.timestamp) for r in d.output("out"))


# -- the versioned value -------------------------------------------------------------------


def test_as_of_is_the_newest_version_at_or_before_the_time() -> None:
    versions: list[list[Any]] = [[10, "a"], [20, None], [30, "c"]]
    assert [as_of(versions, t) for t in (9, 10, 19, 20, 29, 30, 99)] == [None, "a", "a", None, None, "c", "c"]
    assert as_of(None, 5) is None


def test_a_version_of_an_equal_time_wins_and_history_keeps_the_value_at_the_cutoff() -> None:
    v = add_version([[10, "a"], [20, "b"]], 20, "b2", cutoff=0)
    assert v == [[10, "a"], [20, "b2"]] and as_of(v, 20) == "b2"
    # the version valid at the cutoff (15: "a") stays; older ones go
    assert add_version([[5, "x"], [10, "a"]], 20, "b", cutoff=15) == [[10, "a"], [20, "b"]]
    # a delete stays while a lookup may meet it, then the key goes
    assert add_version([[10, "a"], [12, None]], 20, "b", cutoff=15) == [[12, None], [20, "b"]]
    assert add_version([], 12, None, cutoff=15) == []


# -- by event time, whatever the interleaving -------------------------------------------------

Update = tuple[str, str, int, Any]  # ("customer" | "order", key, ts, name or order id)


@st.composite
def histories(draw: Any) -> list[Update]:
    customers = draw(st.lists(st.tuples(st.just("customer"), st.sampled_from("xyz"), st.integers(0, 50),
                                        st.sampled_from(["ann", "bob", None])), max_size=15))
    orders = draw(st.lists(st.tuples(st.just("order"), st.sampled_from("xyz"), st.integers(0, 60)), max_size=15))
    return customers + [(kind, k, ts, i) for i, (kind, k, ts) in enumerate(orders)]


def expected_joins(history: list[Update], how: str) -> list[tuple[Any, Any, Any, int]]:
    """Brute force: each order with the customer's last update at or before its time (ties:
    the later update of the customers topic wins)."""
    out = []
    for kind, key, ts, oid in history:
        if kind != "order":
            continue
        name = None
        for k2, k, t, n in ((u[0], u[1], u[2], u[3]) for u in history):
            if k2 == "customer" and k == key and t <= ts:
                best = (t, n) if name is None or t >= name[0] else name
                name = best
        value = None if name is None else name[1]
        if value is not None or how == "left":
            out.append((key, oid, value, ts))
    return sorted(out)


def feed(d: TestDriver, updates: list[Update]) -> None:
    for kind, key, ts, v in updates:
        if kind == "customer":
            d.pipe("customers", None if v is None else {"name": v, "ts": ts}, key=key, timestamp=ts)
        else:
            d.pipe("orders", {"id": v, "ts": ts}, key=key, timestamp=ts)


@settings(deadline=None, max_examples=60)
@given(history=histories(), order=st.sampled_from(["table-first", "orders-first", "shuffled"]),
       how=st.sampled_from(["inner", "left"]), partitions=st.sampled_from([1, 3]), seed=st.integers(0, 10**6))
def test_each_order_joins_the_customer_as_of_its_time_however_the_topics_interleave(
        history: list[Update], order: str, how: str, partitions: int, seed: int) -> None:
    """Updates of one customer keep their order in the customers topic (as in Kafka); where the
    two topics' records fall relative to each other is what varies. The watermark bound covers
    the disorder, so nothing is late."""
    customers = [u for u in history if u[0] == "customer"]
    orders = [u for u in history if u[0] == "order"]
    if order == "table-first":
        updates = customers + orders
    elif order == "orders-first":
        updates = orders + customers
    else:
        rng = random.Random(seed)
        marks = sorted(rng.random() for _ in customers)
        updates, ci = [], 0
        picks = sorted([(m, "c") for m in marks] + [(rng.random(), "o") for _ in orders])
        oi = 0
        for _, side in picks:
            if side == "c":
                updates.append(customers[ci])
                ci += 1
            else:
                updates.append(orders[oi])
                oi += 1
    d = TestDriver(enrich(how, bound=100), partitions=partitions)
    feed(d, updates)
    d.advance_watermark(FAR)
    assert joined(d) == expected_joins(history, how)
    assert d.metrics().get("late_records.customers", 0) == 0


def test_an_order_waits_for_the_table_to_reach_its_time() -> None:
    d = TestDriver(enrich())
    d.pipe("customers", {"name": "ann", "ts": 10}, key="x", timestamp=10)
    d.pipe("orders", {"id": 1, "ts": 30}, key="x", timestamp=30)
    assert d.output("out") == []  # the table is at 10: an update at 20 may still come
    d.pipe("customers", {"name": "bea", "ts": 20}, key="x", timestamp=20)
    d.pipe("customers", {"name": "cid", "ts": 40}, key="x", timestamp=40)  # the table passes 30
    assert joined(d) == [("x", 1, "bea", 30)]
    assert d.state_sizes()["enrich"] == 0  # nothing held, no timer left


def test_an_order_the_table_has_passed_joins_at_once_though_the_orders_watermark_lags() -> None:
    """The orders' watermark (bound 100) is far behind; the table's is past the order: nothing
    can still change its row, so it joins now, and nothing is left waiting."""
    d = TestDriver(enrich(bound=100))
    d.pipe("customers", {"name": "ann", "ts": 10}, key="x", timestamp=10)
    d.pipe("customers", {"name": "bea", "ts": 300}, key="x", timestamp=300)  # the table: 199
    d.pipe("orders", {"id": 1, "ts": 150}, key="x", timestamp=150)  # the orders: 49
    assert joined(d) == [("x", 1, "ann", 150)]
    assert d.state_sizes()["enrich"] == 0


def test_grace_bounds_the_wait_by_the_streams_own_watermark() -> None:
    d = TestDriver(enrich(grace_ms=5))
    d.pipe("customers", {"name": "ann", "ts": 10}, key="x", timestamp=10)
    d.pipe("orders", {"id": 1, "ts": 30}, key="x", timestamp=30)
    d.pipe("orders", {"id": 2, "ts": 34}, key="y", timestamp=34)
    assert d.output("out") == []
    d.pipe("orders", {"id": 3, "ts": 35}, key="y", timestamp=35)  # the orders' watermark: 34
    assert d.output("out") == []
    d.pipe("orders", {"id": 4, "ts": 36}, key="y", timestamp=36)  # 35: 30 + grace
    assert joined(d) == [("x", 1, "ann", 30)]


def test_a_record_already_past_its_grace_joins_at_once_with_what_the_table_holds() -> None:
    """The orders' watermark is past order 2's time + grace when it arrives: it joins at once,
    with the table as it is then, not at the orders' next advance with a later state of it."""
    d = TestDriver(enrich(grace_ms=10))
    d.pipe("customers", {"name": "ann", "ts": 5}, key="x", timestamp=5)
    d.pipe("orders", {"id": 1, "ts": 100}, key="x", timestamp=100)  # the orders' watermark: 99
    d.pipe("orders", {"id": 2, "ts": 20}, key="x", timestamp=20)  # 20 + 10 <= 99
    d.pipe("orders", {"id": 3, "ts": 89}, key="x", timestamp=89)  # 89 + 10 = 99: its grace is over too
    assert [r.value for r in d.output("out")] == [[2, "ann"], [3, "ann"]]
    d.pipe("customers", {"name": "bea", "ts": 15}, key="x", timestamp=15)
    d.pipe("orders", {"id": 4, "ts": 200}, key="x", timestamp=200)  # 199: order 1's grace (110) is over
    assert [r.value for r in d.output("out")] == [[2, "ann"], [3, "ann"], [1, "bea"]]


def test_a_late_table_update_counts_and_serves_later_records_only() -> None:
    d = TestDriver(enrich(how="left"))
    d.pipe("customers", {"name": "ann", "ts": 50}, key="x", timestamp=50)
    d.pipe("orders", {"id": 1, "ts": 40}, key="x", timestamp=40)
    d.advance_watermark(60)
    d.pipe("customers", {"name": "old", "ts": 30}, key="x", timestamp=30)  # behind the table's watermark
    d.pipe("orders", {"id": 2, "ts": 45}, key="x", timestamp=45)  # behind the join's watermark: joined now
    assert joined(d) == [("x", 1, None, 40), ("x", 2, "old", 45)]
    assert d.metrics()["late_records.customers"] == 1


def test_a_tombstone_deletes_the_row_from_its_time_on() -> None:
    d = TestDriver(enrich(how="left"))
    d.pipe("customers", {"name": "ann", "ts": 10}, key="x", timestamp=10)
    d.pipe("customers", None, key="x", timestamp=20)
    for i, ts in enumerate((15, 25)):
        d.pipe("orders", {"id": i, "ts": ts}, key="x", timestamp=ts)
    d.advance_watermark(FAR)
    assert joined(d) == [("x", 0, "ann", 15), ("x", 1, None, 25)]


def test_the_test_driver_reads_a_tables_value_as_of_a_time() -> None:
    d = TestDriver(enrich(how="left"), partitions=3)
    d.pipe("customers", {"name": "ann", "ts": 10}, key="x", timestamp=10)
    d.pipe("customers", None, key="x", timestamp=20)
    assert [d.table("customers", "x", as_of=t) for t in (9, 10, 19, 20)] == [None, {"name": "ann", "ts": 10},
                                                                             {"name": "ann", "ts": 10}, None]
    assert d.table("customers", "x") is None and d.table("customers", "nobody") is None
    g = TestDriver(priced(), partitions=2)
    g.pipe("products", {"price": 5, "ts": 10}, key="a")
    assert g.table("products", "a") == {"price": 5, "ts": 10}
    with pytest.raises(PipelineError, match=r"^no table 'priced'; tables: \['products'\]$"):
        g.table("priced", "a")


def test_an_inner_join_counts_what_it_drops() -> None:
    d = TestDriver(enrich(how="inner"))
    d.pipe("orders", {"id": 1, "ts": 5}, key="x", timestamp=5)
    d.advance_watermark(FAR)
    assert d.output("out") == [] and d.metrics()["unmatched.enrich"] == 1


def test_history_keeps_what_a_late_record_can_still_see_and_no_more() -> None:
    d = TestDriver(enrich(how="left", history_ms=100))
    for ts, name in ((0, "a"), (50, "b"), (300, "c"), (500, "d")):  # at 500: what was valid from 400 on stays
        d.pipe("customers", {"name": name, "ts": ts}, key="x", timestamp=ts)
    d.pipe("customers", {"name": "old", "ts": 380}, key="x", timestamp=380)  # older than 500 - 100: dropped
    for i, ts in enumerate((250, 350, 450, 600)):
        d.pipe("orders", {"id": i, "ts": ts}, key="x", timestamp=ts)
    d.advance_watermark(FAR)
    assert joined(d) == [("x", 0, None, 250), ("x", 1, "c", 350), ("x", 2, "c", 450), ("x", 3, "d", 600)]
    assert d.metrics()["expired_records.customers"] == 1


def test_history_ms_bounds_the_versions_kept_per_key() -> None:
    d = TestDriver(enrich(history_ms=100))
    for ts in range(0, 1000, 10):
        d.pipe("customers", {"name": str(ts), "ts": ts}, key="x", timestamp=ts)
    rows = [v for k, v in d.dump()["customers"].items() if b"table" in k]
    assert len(rows) == 1 and [t for t, _ in rows[0]] == list(range(890, 1000, 10))


# -- without event time --------------------------------------------------------------------


def test_without_event_time_a_record_joins_the_latest_value_on_arrival() -> None:
    d = TestDriver(enrich(how="left", timed=False))
    d.pipe("orders", {"id": 1}, key="x", timestamp=5)
    d.pipe("customers", {"name": "ann"}, key="x", timestamp=100)
    d.pipe("orders", {"id": 2}, key="x", timestamp=6)  # older than the row, joins it all the same
    d.pipe("customers", None, key="x", timestamp=101)
    d.pipe("orders", {"id": 3}, key="x", timestamp=7)
    assert [r.value for r in d.output("out")] == [[1, None], [2, "ann"], [3, None]]


# -- state: checkpoints, restores, as_table --------------------------------------------------


def test_held_records_and_versions_survive_a_crash_and_a_lost_state_directory() -> None:
    p = enrich()
    d = TestDriver(p, partitions=2)
    d.pipe("customers", {"name": "ann", "ts": 10}, key="x", timestamp=10)
    d.pipe("orders", {"id": 1, "ts": 30}, key="x", timestamp=30)
    d.checkpoint()
    d.crash(lose_local_state=True)
    d.restart()
    d.pipe("customers", {"name": "bea", "ts": 20}, key="x", timestamp=20)
    d.advance_watermark(FAR)
    assert joined(d) == [("x", 1, "bea", 30)]


def test_a_table_read_from_its_topic_has_no_changelog_and_is_rebuilt_from_the_topic_up_to_the_commit() -> None:
    """Its topic is its changelog: nothing else is written, and a lost state directory is
    rebuilt from the topic as far as the group committed; what came after is processed again."""
    def feed(d: TestDriver) -> None:
        for i, ts in enumerate((10, 40, 20, 70)):
            d.pipe("customers", {"name": f"n{i}", "ts": ts}, key="x", timestamp=ts)
        d.pipe("customers", None, key="y", timestamp=15)
        d.pipe_raw("customers", b"{not json", key=b'"z"', timestamp=5)  # a dead letter, no version
        d.checkpoint()
        d.pipe("customers", {"name": "late", "ts": 30}, key="x", timestamp=30)  # after the checkpoint

    calm, crashed = TestDriver(enrich(), partitions=2), TestDriver(enrich(), partitions=2)
    feed(calm)
    feed(crashed)
    assert not [t for t in crashed.topics.logs if t.endswith("-changelog") and "customers" in t]
    crashed.crash(lose_local_state=True)
    for d in (calm, crashed):
        d.pipe("orders", {"id": 1, "ts": 35}, key="x", timestamp=35)
        d.advance_watermark(FAR)
    assert crashed.dump(partition_for(b'"x"', 2))["customers"] == calm.dump(partition_for(b'"x"', 2))["customers"]
    assert joined(crashed) == joined(calm) == [("x", 1, "late", 35)]
    assert [r.key for r in crashed.output("enrich-dead-letter")] == [b'"z"']  # once: it was committed


def test_a_table_of_an_aggregate_keeps_a_changelog() -> None:
    p = Pipeline("agg")
    p.source(Topic("in")).key_by(lambda v: v).count(name="counts").as_table(name="t").to_stream().to(Topic("out"))
    assert p.table_source("t") is None and "agg-t-changelog" in [p.changelog_topic(s) for s in p.changelogged_stores()]
    assert enrich().table_source("customers") is not None
    assert "enrich-customers-changelog" not in [enrich().changelog_topic(s) for s in enrich().changelogged_stores()]


def test_an_aggregate_as_a_table_joins_like_a_topic() -> None:
    p = Pipeline("spend")
    payments = p.source(Topic("payments"), watermarks=bounded())
    totals = payments.sum(lambda v: v["amount"], name="totals").as_table(name="spent")
    orders = p.source(Topic("orders"), watermarks=bounded())
    orders.join(totals, lambda o, spent: [o["id"], spent], how="left", name="with_spent").to(Topic("out"))
    d = TestDriver(p)
    d.pipe("payments", {"amount": 5, "ts": 10}, key="x", timestamp=10)
    d.pipe("payments", {"amount": 7, "ts": 20}, key="x", timestamp=20)
    d.pipe("orders", {"id": 1, "ts": 15}, key="x", timestamp=15)
    d.pipe("orders", {"id": 2, "ts": 25}, key="x", timestamp=25)
    d.advance_watermark(FAR)
    assert sorted(r.value for r in d.output("out")) == [[1, 5], [2, 12]]


def test_a_table_reads_as_a_stream_of_its_changes() -> None:
    p = Pipeline("changes")
    p.table(Topic("customers"), name="customers").to_stream().map(lambda v: v is None).to(Topic("out"))
    d = TestDriver(p)
    d.pipe("customers", {"name": "ann"}, key="x")
    d.pipe("customers", None, key="x")
    assert [r.value for r in d.output("out")] == [False, True]


# -- table-table joins -----------------------------------------------------------------------

Side = tuple[str, str, int, Any]  # ("accounts" | "customers", key, ts, value or None)


@st.composite
def two_tables(draw: Any) -> list[Side]:
    """Updates of two tables, each key's updates of one table in distinct times (so "the later
    update" needs no tie rule), interleaved at random."""
    out = []
    for table in ("accounts", "customers"):
        for key in "xy":
            times = draw(st.lists(st.integers(0, 40), unique=True, max_size=6))
            out += [(table, key, t, draw(st.sampled_from([None, 1, 2, 3]))) for t in times]
    return draw(st.permutations(out))


def joined_versions(d: TestDriver, store: str) -> dict[bytes, Any]:
    return {k: v for task in d.tasks for k, v in d.dump(task.partition)[store].items() if b"table" in k}


@settings(deadline=None, max_examples=60)
@given(updates=two_tables(), how=st.sampled_from(["inner", "left", "outer"]))
def test_a_table_join_is_at_every_time_the_join_of_the_two_rows_then_whatever_the_arrival_order(
        updates: list[Side], how: str) -> None:
    p = Pipeline("tt")
    accounts = p.table(Topic("accounts"), name="accounts")
    customers = p.table(Topic("customers"), name="customers")
    joined = accounts.join(customers, lambda a, c: [a, c], how=how, name="joined")
    joined.to_stream().to(Topic("out"))
    results = []
    for order in (updates, sorted(updates, key=lambda u: u[2])):
        d = TestDriver(p)
        for table, key, ts, v in order:
            d.pipe(table, None if v is None else {"v": v}, key=key, timestamp=ts)
        results.append(joined_versions(d, "joined"))
        outputs: dict[str, list[tuple[int, Any]]] = {}
        for r in d.output("out"):
            outputs.setdefault(r.key, []).append((r.timestamp, r.value))
        for key in "xy":
            def row(table: str, t: int, key: str = key) -> Any:
                best = max((u for u in updates if u[0] == table and u[1] == key and u[2] <= t),
                           key=lambda u: u[2], default=None)
                return None if best is None or best[3] is None else {"v": best[3]}

            for t in range(42):
                a, c = row("accounts", t), row("customers", t)
                missing = (a is None and how != "outer") or (c is None and how == "inner") or (a is None and c is None)
                mine = outputs.get(key, [])
                latest_at = max((ts for ts, _ in mine if ts <= t), default=None)  # the last emitted wins
                value = None if latest_at is None else [v for ts, v in mine if ts == latest_at][-1]
                assert value == (None if missing else [a, c]), (key, t, mine)
    assert results[0] == results[1]  # the joined table's versions, whatever the arrival order


def test_a_table_join_is_refused_for_tables_keyed_otherwise() -> None:
    p = Pipeline("bad")
    a = p.table(Topic("accounts"), name="accounts")
    c = p.table(Topic("customers", key_serde=JsonSerde()), name="customers")
    with pytest.raises(PipelineError, match=r"^table 'accounts' is keyed with StringSerde\(encoding='utf-8'\), "
                                            r"table 'customers' with JsonSerde\(\)"):
        a.join(c, lambda x, y: x)


# -- global tables ---------------------------------------------------------------------------


def priced(how: str = "left", idle_ms: int | None = None, timed: bool = True, bound: int = 0,
           grace_ms: int | None = None, history_ms: int = 10**9) -> Pipeline:
    """Orders (keyed by user) priced from a global table of products, by the order's sku."""
    wm = WatermarkStrategy.bounded_out_of_orderness(bound, timestamp="ts", idle_timeout_ms=idle_ms)
    p = Pipeline("shop")
    products = p.global_table(Topic("products"), history_ms=history_ms, watermarks=wm if timed else None,
                              name="products")
    orders = p.source(Topic("orders"), watermarks=wm if timed else None)
    orders.join(products, lambda o, pr: [o["id"], pr and pr["price"]], key=lambda o: o["sku"], how=how,
                grace_ms=grace_ms, name="priced").to(Topic("out"))
    return p


@settings(deadline=None, max_examples=40)
@given(history=histories(), order=st.sampled_from(["table-first", "orders-first"]), partitions=st.sampled_from([1, 3]))
def test_a_global_table_joins_by_the_records_key_as_of_its_time_in_every_task(
        history: list[Update], order: str, partitions: int) -> None:
    """The same brute force as the co-partitioned join, with the table keyed by sku and the
    orders keyed by an unrelated user: every task sees every product. The watermark bound
    covers the disorder, so nothing is late."""
    p = priced(bound=100)
    d = TestDriver(p, partitions=partitions)
    customers = [u for u in history if u[0] == "customer"]
    orders = [u for u in history if u[0] == "order"]
    for kind, key, ts, v in (customers + orders if order == "table-first" else orders + customers):
        if kind == "customer":
            d.pipe("products", None if v is None else {"price": v, "ts": ts}, key=key, timestamp=ts)
        else:
            d.pipe("orders", {"id": v, "sku": key, "ts": ts}, key=f"user{v % 5}", timestamp=ts)
    d.advance_watermark(FAR)
    got = sorted((r.value[0], r.value[1]) for r in d.output("out"))
    assert got == sorted((oid, name) for _, oid, name, _ in expected_joins(history, "left"))


def test_a_global_table_is_read_whole_again_after_its_store_is_lost() -> None:
    d = TestDriver(priced(), partitions=2)
    d.pipe("products", {"price": 5, "ts": 10}, key="a", partition=0)
    d.pipe("products", {"price": 7, "ts": 10}, key="b", partition=1)
    d.pipe("orders", {"id": 1, "sku": "b", "ts": 30}, key="u1")  # waits: the table is at 9
    d.checkpoint()
    d.crash(lose_local_state=True)
    d.pipe("products", {"price": 8, "ts": 40}, key="b", partition=1)
    d.pipe("products", {"price": 6, "ts": 40}, key="a", partition=0)  # both partitions past 30
    assert [r.value for r in d.output("out")] == [[1, 7]]


def test_an_idle_global_table_lets_the_stream_watermark_release_records() -> None:
    d = TestDriver(priced(idle_ms=1_000), partitions=1)
    d.pipe("products", {"price": 5, "ts": 10}, key="a")
    d.pipe("orders", {"id": 1, "sku": "a", "ts": 30}, key="u1")
    assert d.output("out") == []
    d.advance_wall_clock(1_000)  # the products topic is idle: the orders' watermark (29) decides
    d.pipe("orders", {"id": 2, "sku": "a", "ts": 31}, key="u1")
    assert [r.value for r in d.output("out")] == [[1, 5]]


def test_a_global_join_record_already_past_its_grace_joins_at_once_with_what_the_table_holds() -> None:
    d = TestDriver(priced(grace_ms=10), partitions=1)
    d.pipe("products", {"price": 5, "ts": 5}, key="a")
    d.pipe("orders", {"id": 1, "sku": "a", "ts": 100}, key="u1")  # the orders' watermark: 99
    d.pipe("orders", {"id": 2, "sku": "a", "ts": 20}, key="u1")  # 20 + 10 <= 99: joins now
    assert [r.value for r in d.output("out")] == [[2, 5]]
    d.pipe("products", {"price": 7, "ts": 15}, key="a")
    d.pipe("orders", {"id": 3, "sku": "a", "ts": 200}, key="u1")  # 199: order 1's grace is over
    assert [r.value for r in d.output("out")] == [[2, 5], [1, 7]]


def test_a_global_table_counts_late_and_expired_updates_as_a_table_does() -> None:
    """The same updates of one key, to a table and to a global table with the same history:
    the same versions kept, the same counts."""
    updates = [(500, 5), (450, 4), (499, 3), (300, 2), (400, 1), (600, 6)]  # watermark bound 0
    table, global_table = TestDriver(enrich(history_ms=100)), TestDriver(priced(history_ms=100), partitions=1)
    for ts, n in updates:
        table.pipe("customers", {"name": n, "ts": ts}, key="a", timestamp=ts)
        global_table.pipe("products", {"price": n, "ts": ts}, key="a")
    # late: 450, 499 and 400 (behind 499); expired: 300 (older than 500 - 100), kept otherwise
    assert table.metrics()["late_records.customers"] == 3 and table.metrics()["expired_records.customers"] == 1
    assert global_table.metrics()["late_records.products"] == 3
    assert global_table.metrics()["expired_records.products"] == 1
    for t in (399, 400, 450, 499, 500, 600):
        row = table.table("customers", "a", as_of=t)
        assert global_table.table("products", "a", as_of=t) == (row and {"price": row["name"], "ts": row["ts"]})


def test_a_global_tables_record_it_cannot_decode_is_one_error_line_and_the_table_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    d = TestDriver(priced(timed=False), partitions=1)
    d.pipe_raw("products", b"{not json", key=b"a")
    d.pipe("products", {"price": 5}, key="a")
    d.pipe("orders", {"id": 1, "sku": "a"}, key="u1")
    assert [r.value for r in d.output("out")] == [[1, 5]]
    assert d.metrics()["skipped_records.products"] == 1
    [line] = [r.getMessage() for r in caplog.records if r.name == "framework.globals"]
    assert line.startswith("global table products skips products[0]@0: cannot decode it (")
    assert line.endswith("Fix: write the topic with the table's serdes (the record stays in the topic; the table "
                         "goes on without it)")


def test_without_event_time_a_global_table_joins_its_latest_row() -> None:
    d = TestDriver(priced(how="inner", timed=False), partitions=2)
    d.pipe("orders", {"id": 1, "sku": "a"}, key="u1")
    d.pipe("products", {"price": 5}, key="a")
    d.pipe("orders", {"id": 2, "sku": "a"}, key="u2")
    assert [r.value for r in d.output("out")] == [[2, 5]] and d.metrics()["unmatched.priced"] == 1


def test_a_global_join_needs_its_key_and_a_latest_row_join_is_not_replayed() -> None:
    p = Pipeline("bad")
    products = p.global_table(Topic("products"), name="products")
    with pytest.raises(PipelineError, match=r"^a join with global table 'products' needs key=lambda value"):
        p.source(Topic("orders")).join(products, lambda o, pr: o)
    assert [str(i) for i in check_contract(priced(timed=False))] == [
        ("step 'priced': it joins the latest row of global table 'products', which depends on when the table's "
         "updates arrived")]
    assert check_contract(priced()) == []


@settings(deadline=None, max_examples=25)
@given(history=histories(), partitions=st.sampled_from([1, 3]))
def test_a_replay_reads_the_global_table_whole_and_joins_as_a_live_member_started_on_the_history(
        history: list[Update], partitions: int) -> None:
    """The in-process replay (the Spark job's tasks, without Spark) against the TestDriver
    fed the table first, as a member reads it whole before it processes anything."""
    p = priced(bound=100)
    serde = JsonSerde()
    products: dict[tuple[str, int], list[Record]] = {}
    orders: dict[tuple[str, int], list[Record]] = {}
    d = TestDriver(p, partitions=partitions)
    for kind, key, ts, v in sorted(history, key=lambda u: u[0] != "customer"):
        if kind == "customer":
            value = None if v is None else {"price": v, "ts": ts}
            part = products.setdefault(("products", 0), [])
            part.append(Record("products", 0, len(part), key.encode(), None if value is None else serde.serialize(value),
                               ts))
            d.pipe("products", value, key=key, timestamp=ts, partition=0)
        else:
            user = f"user{v % 5}"
            q = partition_for(user.encode(), partitions)
            part = orders.setdefault(("orders", q), [])
            value = {"id": v, "sku": key, "ts": ts}
            part.append(Record("orders", q, len(part), user.encode(), serde.serialize(value), ts))
            d.pipe("orders", value, key=user, timestamp=ts)
    plan = ReplayPlan(target="", service=p.name, run_id="t", bootstrap_servers="", partitions=partitions,
                      ranges={"orders": {q: [0, len(orders.get(("orders", q), []))] for q in range(partitions)}},
                      stages=stage_topics(p), output="topic",
                      global_ranges={"products": {0: [0, len(products.get(("products", 0), []))]}})
    rows = run_locally(p, plan, {("orders", q): orders.get(("orders", q), []) for q in range(partitions)},
                       global_records=products)
    replayed = sorted(tuple(serde.deserialize(present(r.value))) for r in rows["out"] if r.topic == "out")
    assert replayed == sorted(tuple(r.value) for r in d.output("out"))


def _records(topic: str, rows: list[tuple[str, dict[str, Any]]]) -> list[Record]:
    """``rows`` as one partition of ``topic``, in offset order, each at its ``ts``."""
    serde = JsonSerde()
    return [Record(topic, 0, i, k.encode(), serde.serialize(v), v["ts"]) for i, (k, v) in enumerate(rows)]


@pytest.mark.parametrize("kind", ["table", "global table"])
def test_a_replay_joins_a_record_past_its_grace_at_once_as_the_test_driver_does(kind: str) -> None:
    """The in-process replay (the Spark job's tasks, without Spark) reads the table's two
    updates before the orders (a global table whole first, a table merged by timestamp); order 2
    is past its grace when it arrives and joins the table as it is then, on both engines."""
    p = enrich(grace_ms=10) if kind == "table" else priced(grace_ms=10)
    table, field = ("customers", "name") if kind == "table" else ("products", "price")
    updates: list[tuple[str, dict[str, Any]]] = [("x", {field: "A", "ts": 5}), ("x", {field: "B", "ts": 15})]
    orders: list[tuple[str, dict[str, Any]]] = [("x" if kind == "table" else "u1", {"id": i, "sku": "x", "ts": ts})
                                                for i, ts in ((1, 100), (2, 20))]
    d = TestDriver(p, partitions=1)
    for topic, records in ((table, updates), ("orders", orders)):
        for k, v in records:
            d.pipe(topic, v, key=k, timestamp=v["ts"])
    sources = {("orders", 0): _records("orders", orders)}
    ranges = {"orders": {0: [0, 2]}}
    if kind == "table":
        sources[("customers", 0)] = _records("customers", updates)
        ranges["customers"] = {0: [0, 2]}
    plan = ReplayPlan(target="", service=p.name, run_id="t", bootstrap_servers="", partitions=1, ranges=ranges,
                      stages=stage_topics(p), output="topic",
                      global_ranges={} if kind == "table" else {"products": {0: [0, 2]}})
    rows = run_locally(p, plan, sources, global_records=None if kind == "table" else {
        ("products", 0): _records("products", updates)})
    replayed = [JsonSerde().deserialize(present(r.value)) for r in rows["out"] if r.topic == "out"]
    assert replayed == [r.value for r in d.output("out")] == [[2, "B"]]


# -- definition errors ---------------------------------------------------------------------


def test_a_stream_keyed_otherwise_than_the_table_is_refused_with_the_fix() -> None:
    p = Pipeline("bad")
    customers = p.table(Topic("customers"), name="customers")
    orders = p.source(Topic("orders")).key_by(lambda o: o["customer"], name="by_customer")
    with pytest.raises(PipelineError) as err:
        orders.join(customers, lambda o, c: o)
    assert str(err.value) == (
        "stream 'by_customer' is keyed with KeySerde(), table 'customers' with StringSerde(encoding='utf-8'): "
        "equal keys would reach different partitions and never meet. Fix: key the stream with the table's key "
        "serde (.key_by(fn, key_serde=StringSerde(encoding='utf-8')))")
    orders2 = p.source(Topic("orders2")).key_by(lambda o: o["customer"], key_serde=StringSerde(), name="by2")
    orders2.join(customers, lambda o, c: o)  # accepted


def test_an_event_time_stream_needs_a_table_with_watermarks() -> None:
    p = Pipeline("bad")
    customers = p.table(Topic("customers"), name="customers")
    orders = p.source(Topic("orders"), watermarks=bounded())
    with pytest.raises(PipelineError, match=r"table 'customers' \(customers\) has none.*pass watermarks="):
        orders.join(customers, lambda o, c: o)


@pytest.mark.parametrize("kwargs, message", [
    ({"how": "outer"}, "join how='outer': use 'inner' or 'left'"),
    ({"grace_ms": -1}, "grace_ms must be an int >= 0 or None, got -1"),
])
def test_join_arguments_are_checked(kwargs: dict[str, Any], message: str) -> None:
    p = Pipeline("bad")
    customers = p.table(Topic("customers", value_serde=JsonSerde()), name="customers")
    with pytest.raises(PipelineError) as err:
        p.source(Topic("orders")).join(customers, lambda o, c: o, **kwargs)
    assert str(err.value) == message
