"""Pipelines the integration tests run as real `fw run` processes.

Topic and group names carry ``FW_TEST_SUFFIX`` so every test has its own.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable

from framework.pipeline import AsyncCall, AsyncFunction, Pipeline, Retry, Topic
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


PURCHASE = {"type": "record", "name": "Purchase", "namespace": "shop",
            "fields": [{"name": "user", "type": "string"}, {"name": "amount", "type": "long"}]}


def single_object_purchases() -> Pipeline:
    """Avro ``shop.Purchase`` in the single-object encoding (``so-purchases-<suffix>``, 1
    partition) echoed as JSON to ``so-seen-<suffix>``; records of other schemas, and bytes
    that are not single-object Avro, go to ``so-<suffix>-dead-letter``."""
    s = _suffix()
    p = Pipeline(f"so-{s}")
    purchases = p.source(Topic(f"so-purchases-{s}", value_serde=AvroSerde(PURCHASE, encoding="single-object"),
                               partitions=1), name="purchases")
    purchases.to(Topic(f"so-seen-{s}"), name="to-seen")
    return p


# -- two_drivers: the same pipeline through the TestDriver and the Kafka runtime ------------

from typing import Any  # this section was appended; the imports above are untouched

from framework.pipeline import ProcessContext, ProcessFunction

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


# -- event time: every window kind, a fire alarm, a fast and a slow upstream task -----------

from framework import (
    CountTrigger,
    CountWindows,
    GlobalWindows,
    SessionWindows,
    SlidingWindows,
    TumblingWindows,
    WatermarkStrategy,
)
from framework.pipeline import Stream

ET_BOUND_MS = 200  # out-of-orderness bound of the event-time sources
ET_GROUPS = 5  # readings are regrouped (key_by) into this many groups


def _reading_source(p: Pipeline, topic: str, partitions: int, bound_ms: int) -> Stream:
    """Values with an event timestamp ``ts``; a value with ``"flush"`` only moves the watermark."""
    src = p.source(Topic(topic, key_serde=StringSerde(), value_serde=JsonSerde(), partitions=partitions),
                   watermarks=WatermarkStrategy.bounded_out_of_orderness(bound_ms, timestamp="ts"), name="in")
    return src.filter(lambda r: not r.get("flush"), name="readings")


def _count_sum(acc: list[int], r: dict[str, Any]) -> list[int]:
    return [acc[0] + 1, acc[1] + r["v"]]


def _merge_count_sum(a: list[int], b: list[int]) -> list[int]:
    return [a[0] + b[0], a[1] + b[1]]


class OnTimeOnly(ProcessFunction):
    """Drops the records that are late at the source (timestamp <= the partition's watermark).

    What remains is never behind a watermark its upstream task has sent downstream, so the
    windows after a key_by see, in either driver, the same records before they fire."""

    def process(self, key: Any, value: Any, ctx: ProcessContext) -> None:
        if ctx.timestamp > ctx.watermark:
            ctx.emit(value)


def event_time_windows() -> Pipeline:
    """Readings {"sensor", "ts", "v"} keyed by sensor (4 partitions), into every window kind.

    On the source key: tumbling (count, sum; late records to a topic), sliding (sum, with
    allowed lateness), session (count, sum), count tumbling (max), count sliding (the values)
    and global with a count trigger (count). After ``key_by`` group (so watermarks cross a
    repartition topic): tumbling (the sorted values) and sliding (count), on the records that
    were on time at the source.
    """
    s = _suffix()
    p = Pipeline(f"etw-{s}", partitions=4)
    readings = _reading_source(p, f"etw-in-{s}", 4, ET_BOUND_MS)

    def out(name: str) -> Topic:
        return Topic(f"etw-{name}-{s}")

    readings.window(TumblingWindows(1_000), late=Topic(f"etw-late-{s}", key_serde=StringSerde())) \
        .aggregate(lambda: [0, 0], _count_sum, name="tumbling").to(out("tumbling"), name="to-tumbling")
    readings.window(SlidingWindows(2_000, 500), allowed_lateness_ms=ET_BOUND_MS) \
        .sum(lambda r: r["v"], name="sliding").to(out("sliding"), name="to-sliding")
    readings.window(SessionWindows(300)) \
        .aggregate(lambda: [0, 0], _count_sum, merge=_merge_count_sum, name="session") \
        .to(out("session"), name="to-session")
    readings.window(CountWindows(5)).reduce(lambda a, b: a if a["v"] >= b["v"] else b, name="count") \
        .to(out("count"), name="to-count")
    readings.window(CountWindows(6, slide=2)) \
        .apply(lambda k, w, els: [e["v"] for e in els], name="count-sliding") \
        .to(out("count-sliding"), name="to-count-sliding")
    readings.window(GlobalWindows(CountTrigger(7))).count(name="global").to(out("global"), name="to-global")
    grouped = readings.process(OnTimeOnly(), name="on-time") \
        .key_by(lambda r: f"g{int(r['sensor'][1:]) % ET_GROUPS}", name="by-group")
    grouped.window(TumblingWindows(2_000)) \
        .apply(lambda k, w, els: sorted(e["v"] for e in els), name="group-tumbling") \
        .to(out("group-tumbling"), name="to-group-tumbling")
    grouped.window(SlidingWindows(3_000, 1_000)).count(name="group-sliding") \
        .to(out("group-sliding"), name="to-group-sliding")
    return p


ALARM_WINDOW_MS = 10 * 60_000  # a high temperature is pending for 10 minutes of event time
HIGH_TEMPERATURE = 60
ALARM_BOUND_MS = 1_000


class FireAlarm(ProcessFunction):
    """Per location: a high temperature is pending until the watermark passes 10 minutes
    after it, when an event-time timer expires it and emits {"expired": location}; smoke
    while one is pending is an alert. Value state: the pending high temperature's time."""

    def open(self, ctx: ProcessContext) -> None:
        self.high = ctx.value_state("high")

    def process(self, key: Any, value: Any, ctx: ProcessContext) -> None:
        pending = self.high.get()
        if value["kind"] == "temperature" and value["celsius"] >= HIGH_TEMPERATURE:
            if pending is not None:
                ctx.delete_event_timer(pending + ALARM_WINDOW_MS)
            self.high.set(ctx.timestamp)
            ctx.register_event_timer(ctx.timestamp + ALARM_WINDOW_MS)
        elif value["kind"] == "smoke" and pending is not None:
            ctx.delete_event_timer(pending + ALARM_WINDOW_MS)
            self.high.clear()
            ctx.emit({"alert": key, "high": pending, "smoke": ctx.timestamp})

    def on_timer(self, timestamp: int, key: Any, ctx: ProcessContext) -> None:
        """Every firing is visible in the output, so a timer that fired twice would show."""
        ctx.emit({"expired": key, "high": self.high.get(), "at": timestamp})
        self.high.clear()


def fire_alarm() -> Pipeline:
    """Sensor events {"kind": "temperature"|"smoke"|"tick", "ts", "celsius"?} keyed by
    location (2 partitions) -> ``FireAlarm`` (step ``alarm``) -> ``fa-out-<suffix>``."""
    s = _suffix()
    p = Pipeline(f"fa-{s}", partitions=2)
    events = p.source(Topic(f"fa-in-{s}", key_serde=StringSerde(), value_serde=JsonSerde(), partitions=2),
                      watermarks=WatermarkStrategy.bounded_out_of_orderness(ALARM_BOUND_MS, timestamp="ts"),
                      name="in")
    events.filter(lambda e: e["kind"] != "tick", name="sensors").process(FireAlarm(), name="alarm") \
        .to(Topic(f"fa-out-{s}"), name="to-out")
    return p


def fast_and_slow() -> Pipeline:
    """Readings {"sensor", "group", "ts", "v"} (2 partitions) -> key_by group -> event-time
    tumbling windows (count, sum) -> ``fs-out-<suffix>``; late records -> ``fs-late-<suffix>``."""
    s = _suffix()
    p = Pipeline(f"fs-{s}", partitions=2)
    _reading_source(p, f"fs-in-{s}", 2, ET_BOUND_MS) \
        .key_by(lambda r: r["group"], name="by-group") \
        .window(TumblingWindows(1_000), late=f"fs-late-{s}") \
        .aggregate(lambda: [0, 0], _count_sum, name="windows").to(Topic(f"fs-out-{s}"), name="to-out")
    return p


# -- watermarks between two services ---------------------------------------------------------

CHAIN_BOUND_MS = 1_000
CHAIN_WINDOW_MS = 60_000


def chain_upstream() -> Pipeline:
    """Clicks {"user", "ts"} (2 partitions, watermarks bounded by 1 s) -> enriched, written to
    ``ch-mid-<suffix>`` (3 partitions) with the upstream tasks' watermarks in band."""
    s = _suffix()
    p = Pipeline(f"ch-up-{s}", partitions=2)
    src = p.source(Topic(f"ch-in-{s}", key_serde=StringSerde(), value_serde=JsonSerde(), partitions=2),
                   watermarks=WatermarkStrategy.bounded_out_of_orderness(CHAIN_BOUND_MS, timestamp="ts"),
                   name="in")
    src.map(lambda v: {**v, "enriched": True}, name="enrich") \
        .to(Topic(f"ch-mid-{s}", key_serde=StringSerde(), value_serde=JsonSerde(), partitions=3,
                  watermarks=True), name="to-mid")
    return p


def chain_downstream() -> Pipeline:
    """Another service: ``ch-mid-<suffix>`` with ``from_upstream`` watermarks -> clicks per user
    and minute (event time) -> ``ch-out-<suffix>``; late records -> ``ch-late-<suffix>``."""
    s = _suffix()
    p = Pipeline(f"ch-down-{s}", partitions=3)
    src = p.source(Topic(f"ch-mid-{s}", key_serde=StringSerde(), value_serde=JsonSerde(), partitions=3),
                   watermarks=WatermarkStrategy.from_upstream(timestamp="ts"), name="mid")
    src.window(TumblingWindows(CHAIN_WINDOW_MS), late=f"ch-late-{s}").count(name="per-minute") \
        .to(Topic(f"ch-out-{s}"), name="to-out")
    return p


# -- state safety: hostile internal records, recreated changelogs, upgrades -------------------


def word_counts() -> Pipeline:
    """Words {"w"} (2 partitions) -> key_by word (``by-word``) -> count (``counts``) ->
    ``wc-out-<suffix>``."""
    s = _suffix()
    p = Pipeline(f"wc-{s}", partitions=2)
    p.source(Topic(f"wc-in-{s}", partitions=2), name="in") \
        .key_by(lambda v: v["w"], name="by-word").count(name="counts").to(Topic(f"wc-out-{s}"), name="to-out")
    return p


UPGRADE_BOUND_MS = 0


def _upgrade(extra: bool) -> Pipeline:
    """Views {"user", "ts"} (2 partitions) -> key_by user -> views per user and second (event
    time) -> ``up-out-<suffix>``; late records -> ``up-late-<suffix>``. ``extra``: the next
    release, which also reads clicks into sessions per user; its steps come after the old
    ones, so their clocks are made first (the tasks compile the steps from the last)."""
    s = _suffix()
    p = Pipeline(f"up-{s}", partitions=2)
    wm = WatermarkStrategy.bounded_out_of_orderness(UPGRADE_BOUND_MS, timestamp="ts")
    views = p.source(Topic(f"up-views-{s}", key_serde=StringSerde(), value_serde=JsonSerde(), partitions=2),
                     watermarks=wm, name="views")
    views.key_by(lambda v: v["user"], name="by-user") \
        .window(TumblingWindows(1_000), late=Topic(f"up-late-{s}", key_serde=JsonSerde())) \
        .count(name="per-second").to(Topic(f"up-out-{s}", key_serde=JsonSerde()), name="to-out")
    if extra:
        clicks = p.source(Topic(f"up-clicks-{s}", key_serde=StringSerde(), value_serde=JsonSerde(), partitions=2),
                          watermarks=wm, name="clicks")
        clicks.key_by(lambda v: v["user"], name="clicks-by-user").window(SessionWindows(500)) \
            .count(name="click-sessions").to(Topic(f"up-sessions-{s}", key_serde=JsonSerde()), name="to-sessions")
    return p


def upgrade_v1() -> Pipeline:
    return _upgrade(extra=False)


def upgrade_v2() -> Pipeline:
    return _upgrade(extra=True)


# -- the services, with the test's suffix on their names (replay parity) ----------------------


def _service(package: str) -> Callable[[], Pipeline]:
    """``services/<package>``'s pipeline, built when called (the suffix is the test's)."""
    def build() -> Pipeline:
        return importlib.import_module(f"services.{package}.pipeline").build_pipeline(f"-{_suffix()}")
    return build


svc_even_odd = _service("even_odd")
svc_hashtags = _service("hashtags")
svc_sensors = _service("sensors")
svc_fire_alarm = _service("fire_alarm")
svc_fraud_detection = _service("fraud_detection")
svc_click_sessions = _service("click_sessions")
svc_traffic = _service("traffic")
svc_sales_per_month = _service("sales_per_month")
svc_orders_enrich = _service("orders_enrich")


# -- observability: metrics, health, readiness -----------------------------------------------

import time

OBSERVED_BOUND_MS = 100


def observed() -> Pipeline:
    """Readings {"ts", "v"} counted per key in one-second event-time windows; late records go
    to a topic; a value that is not JSON is a poison record (dead letter)."""
    s = _suffix()
    p = Pipeline(f"obs-{s}", partitions=2)
    src = p.source(Topic(f"obs-in-{s}", key_serde=StringSerde(), value_serde=JsonSerde(), partitions=2),
                   watermarks=WatermarkStrategy.bounded_out_of_orderness(OBSERVED_BOUND_MS, timestamp="ts"),
                   name="in")
    src.window(TumblingWindows(1_000), late=Topic(f"obs-late-{s}", key_serde=StringSerde())) \
        .count(name="per-second").to(Topic(f"obs-out-{s}"), name="to-out")
    return p


def _hold_while_missing(value: Any) -> Any:
    """A step stuck in user code: {"block": path} waits until that file exists."""
    if isinstance(value, dict) and "block" in value:
        while not os.path.exists(value["block"]):
            time.sleep(0.05)
    return value


def blocking() -> Pipeline:
    """An echo whose step can be held (``_hold_while_missing``): the loop stalls there."""
    s = _suffix()
    p = Pipeline(f"blk-{s}")
    p.source(Topic(f"blk-in-{s}", key_serde=StringSerde(), value_serde=JsonSerde(), partitions=1)) \
        .map(_hold_while_missing, name="hold").to(Topic(f"blk-out-{s}"))
    return p


# -- hostile input: every serde of the services, fed fuzzed bytes ---------------------------

from pathlib import Path

from framework.serde import BytesSerde, IntSerde, Serde, ValueSerde
from framework.serde.keys import KeySerde

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def hostile_serdes() -> dict[str, tuple[Serde, Serde]]:
    """``kind -> (key serde, value serde)``: the serdes the services read with (string keys;
    JSON, the framework's value encoding and ``key_by``'s key encoding; Avro with every schema
    in ``schemas/``) and the plain int and bytes serdes."""
    kinds: dict[str, tuple[Serde, Serde]] = {
        "string": (StringSerde(), StringSerde()), "int": (IntSerde(), IntSerde()),
        "bytes": (BytesSerde(), BytesSerde()), "json": (StringSerde(), JsonSerde()),
        "value": (KeySerde(), ValueSerde()),
    }
    for path in sorted(SCHEMAS.glob("*.avsc")):
        kinds[f"avro-{path.stem}"] = (StringSerde(), AvroSerde(load_schema(path)))
    return kinds


def hostile_echo() -> Pipeline:
    """Per serde kind, ``hx-<kind>-in-<suffix>`` (2 partitions) decoded and written again with
    the same serdes to ``hx-<kind>-out-<suffix>``; the string records are also counted per key
    (``hx-string-counts-<suffix>``). What does not decode, or encode again, is a dead letter."""
    s = _suffix()
    p = Pipeline(f"hx-{s}", partitions=2)
    for kind, (ks, vs) in hostile_serdes().items():
        src = p.source(Topic(f"hx-{kind}-in-{s}", key_serde=ks, value_serde=vs, partitions=2), name=f"{kind}-in")
        src.to(Topic(f"hx-{kind}-out-{s}", key_serde=ks, value_serde=vs), name=f"to-{kind}-out")
        if kind == "string":
            src.count(name="string-counts").to(Topic(f"hx-string-counts-{s}", key_serde=ks), name="to-string-counts")
    return p


def refused_echo() -> Pipeline:
    """Records the broker may refuse: raw bytes from ``rf-bytes-in-<suffix>`` written again to
    ``rf-bytes-out-<suffix>``; JSON from ``rf-json-in-<suffix>`` with its event time in ``ts``
    written again to ``rf-json-out-<suffix>`` (1 partition each)."""
    s = _suffix()
    p = Pipeline(f"rf-{s}", partitions=1)
    p.source(Topic(f"rf-bytes-in-{s}", key_serde=BytesSerde(), value_serde=BytesSerde(), partitions=1),
             name="bytes-in").to(Topic(f"rf-bytes-out-{s}", key_serde=BytesSerde(), value_serde=BytesSerde()),
                                 name="to-bytes-out")
    p.source(Topic(f"rf-json-in-{s}", key_serde=StringSerde(), value_serde=JsonSerde(), partitions=1),
             watermarks=WatermarkStrategy.bounded_out_of_orderness(0, timestamp="ts"), name="json-in") \
        .to(Topic(f"rf-json-out-{s}", key_serde=StringSerde(), value_serde=JsonSerde()), name="to-json-out")
    return p


# -- traced_orders: dead letters two repartition topics deep ----------------------------------

from dataclasses import dataclass  # this section was appended; the imports above are untouched


@dataclass
class TracedOrder:
    user: str
    amount: int


def _checked(order: TracedOrder) -> TracedOrder:
    if order.amount < 0:
        raise ValueError(f"negative amount {order.amount}")
    return order


def _banded(order: TracedOrder) -> TracedOrder:
    if order.amount == 13:
        raise ValueError("unlucky amount 13")
    return order


def traced_orders() -> Pipeline:
    """JSON orders (``to-orders-<suffix>``, 2 partitions) parsed into a dataclass, re-keyed by
    user (``check``: a negative amount raises), re-keyed again by amount band (``band``: an
    amount of 13 raises), counted per band to ``to-bands-<suffix>``: a failing record is a dead
    letter one or two repartition topics away from the record produced."""
    s = _suffix()
    p = Pipeline(f"to-{s}", partitions=2, types=[TracedOrder])
    p.source(Topic(f"to-orders-{s}", key_serde=StringSerde(), value_serde=JsonSerde(), partitions=2),
             name="orders") \
        .map(lambda d: TracedOrder(**d), name="parse") \
        .key_by(lambda o: o.user, name="by-user").map(_checked, name="check") \
        .key_by(lambda o: amount_band(o.amount), name="by-band").map(_banded, name="band") \
        .count(name="counts").to(Topic(f"to-bands-{s}"))
    return p


def _with_tier(order: dict[str, Any], customer: dict[str, Any] | None) -> dict[str, Any]:
    return {"id": order["id"], "tier": None if customer is None else customer["tier"]}


def enriched_orders() -> Pipeline:
    """Orders (``eno-orders-<suffix>``) joined with their customer's tier as of the order's
    time (table ``eno-customers-<suffix>``, deletes as tombstones), to ``eno-out-<suffix>``;
    3 partitions, event time from ``ts`` with a 500 ms bound (tests/integration/tables.py)."""
    s = _suffix()
    p = Pipeline(f"eno-{s}")
    wm = WatermarkStrategy.bounded_out_of_orderness(500, timestamp="ts")
    customers = p.table(Topic(f"eno-customers-{s}", partitions=3), watermarks=wm, name="customers")
    orders = p.source(Topic(f"eno-orders-{s}", partitions=3), watermarks=wm, name="orders")
    orders.join(customers, _with_tier, how="left", name="enrich").to(Topic(f"eno-out-{s}"))
    return p


def _priced(order: dict[str, Any], product: dict[str, Any] | None) -> dict[str, Any]:
    return {"id": order["id"], "price": None if product is None else product["tier"]}


def priced_orders() -> Pipeline:
    """Orders keyed by user (``gto-orders-<suffix>``, 4 partitions) joined with a global table
    of products (``gto-products-<suffix>``, 3 partitions) by each order's sku, as of the order's
    time, to ``gto-out-<suffix>`` (tests/integration/tables.py gives the history)."""
    s = _suffix()
    p = Pipeline(f"gto-{s}")
    wm = WatermarkStrategy.bounded_out_of_orderness(500, timestamp="ts")
    products = p.global_table(Topic(f"gto-products-{s}", partitions=3), watermarks=wm, name="products")
    orders = p.source(Topic(f"gto-orders-{s}", partitions=4), watermarks=wm, name="orders")
    orders.join(products, _priced, key=lambda o: o["sku"], how="left", name="priced").to(Topic(f"gto-out-{s}"))
    return p


def _rated(pay: dict[str, Any], rate: dict[str, Any] | None) -> list[Any]:
    return [pay["id"], None if rate is None else rate["rate"]]


def graced_rates() -> Pipeline:
    """Payments (``gr-pay-<suffix>``) joined by event time with a grace of 10 ms with a table
    of rates (``gr-rates-<suffix>``), to ``gr-out-<suffix>``, and with a global table of rates
    (``gr-fx-<suffix>``) by the payment's ``cur``, to ``gr-gout-<suffix>``; one partition each,
    timestamps from ``ts`` with a 0 ms bound."""
    s = _suffix()
    p = Pipeline(f"gr-{s}")
    wm = WatermarkStrategy.bounded_out_of_orderness(0, timestamp="ts")
    rates = p.table(Topic(f"gr-rates-{s}", partitions=1), watermarks=wm, name="rates")
    fx = p.global_table(Topic(f"gr-fx-{s}", partitions=1), watermarks=wm, name="fx")
    pay = p.source(Topic(f"gr-pay-{s}", partitions=1), watermarks=wm, name="pay")
    pay.join(rates, _rated, how="left", grace_ms=10, name="rated").to(Topic(f"gr-out-{s}"))
    pay.join(fx, _rated, key=lambda v: v["cur"], how="left", grace_ms=10, name="fx-rated") \
        .to(Topic(f"gr-gout-{s}"))
    return p


def _both(account: dict[str, Any] | None, customer: dict[str, Any] | None) -> list[Any]:
    return [None if account is None else account["bal"], None if customer is None else customer["tier"]]


def joined_tables() -> Pipeline:
    """Two tables (``tt-accounts-<suffix>``, ``tt-customers-<suffix>``, 3 partitions) joined
    (outer) on their key; the joined table's changes to ``tt-out-<suffix>``."""
    s = _suffix()
    p = Pipeline(f"tt-{s}")
    accounts = p.table(Topic(f"tt-accounts-{s}", partitions=3), name="accounts")
    customers = p.table(Topic(f"tt-customers-{s}", partitions=3), name="customers")
    accounts.join(customers, _both, how="outer", name="joined").to_stream().to(Topic(f"tt-out-{s}"))
    return p


# -- a release that renames a stateful step, and services whose names share a prefix -----------


def _count_and_sum(acc: list[int], n: int) -> list[int]:
    return [acc[0] + 1, acc[1] + n]


def _rolling(step: str) -> Pipeline:
    """Numbers keyed by text (2 partitions) -> a rolling [count, sum] per key in store ``step``
    -> ``roll-out-<suffix>``."""
    s = _suffix()
    p = Pipeline(f"roll-{s}", partitions=2)
    p.source(Topic(f"roll-in-{s}", key_serde=StringSerde(), value_serde=JsonSerde(), partitions=2), name="in") \
        .aggregate(lambda: [0, 0], _count_and_sum, name=step).to(Topic(f"roll-out-{s}"), name="to-out")
    return p


def rolling_v1() -> Pipeline:
    return _rolling("running")


def rolling_v2() -> Pipeline:
    """The next release: the step renamed ``totals``."""
    return _rolling("totals")


def _counting(name: str, dead_letter: str | None = None) -> Pipeline:
    p = Pipeline(name, partitions=2, dead_letter=dead_letter)
    p.source(Topic(f"{name}-in", key_serde=StringSerde(), value_serde=JsonSerde(), partitions=2), name="in") \
        .count(name="counts").to(Topic(f"{name}-out"), name="to-out")
    return p


def prefix_short() -> Pipeline:
    """``sh-<suffix>``, counting per key; its input and output topics carry its name (the
    user's topics, which its reset must not touch)."""
    return _counting(f"sh-{_suffix()}")


def prefix_long() -> Pipeline:
    """``sh-<suffix>-enrich``: its changelog ``sh-<suffix>-enrich-counts-changelog`` reads as
    store ``enrich-counts`` of ``sh-<suffix>``. Its dead letters go elsewhere, so only its
    consumer group tells that it exists."""
    return _counting(f"sh-{_suffix()}-enrich", dead_letter=f"shx-dead-{_suffix()}")


# -- savepoints: a rolling aggregate and event-time windows after a repartition ---------------


def _add_reading(acc: list[int], r: dict[str, Any]) -> list[int]:
    return [acc[0] + 1, acc[1] + r["v"]]


def _savepointed(release: str) -> Pipeline:
    """Readings {"g", "ts", "v"} keyed by user (``sp-in-<suffix>``, 2 partitions, event time
    from ``ts``, bound 0): a rolling [count, sum] per user (``totals``) -> ``sp-totals-<suffix>``;
    key_by group (``by-group``) -> one-second tumbling windows counted (``per-second``) ->
    ``sp-windows-<suffix>``. ``release``: ``v1``; ``added``, which also counts per user in a new
    step (``counts`` -> ``sp-counts-<suffix>``); ``dropped``, without ``totals``."""
    s = _suffix()
    p = Pipeline(f"sp-{s}", partitions=2)
    wm = WatermarkStrategy.bounded_out_of_orderness(0, timestamp="ts")
    src = p.source(Topic(f"sp-in-{s}", key_serde=StringSerde(), value_serde=JsonSerde(), partitions=2),
                   watermarks=wm, name="in")
    if release != "dropped":
        src.aggregate(lambda: [0, 0], _add_reading, name="totals").to(Topic(f"sp-totals-{s}"), name="to-totals")
    src.key_by(lambda r: r["g"], name="by-group").window(TumblingWindows(1_000)).count(name="per-second") \
        .to(Topic(f"sp-windows-{s}", key_serde=JsonSerde()), name="to-windows")
    if release == "added":
        src.count(name="counts").to(Topic(f"sp-counts-{s}"), name="to-counts")
    return p


def savepointed_v1() -> Pipeline:
    return _savepointed("v1")


def savepointed_added() -> Pipeline:
    return _savepointed("added")


def savepointed_dropped() -> Pipeline:
    return _savepointed("dropped")


def spark_state() -> Pipeline:
    """Amounts {"v"} keyed by user (``ss-in-<suffix>``, 2 partitions): a running sum per user
    (``sums``) -> ``ss-sums-<suffix>``, and a running count (``counts``) -> ``ss-counts-<suffix>``.
    Its savepoints are read and written as Spark DataFrames (test_savepoint_spark.py)."""
    s = _suffix()
    p = Pipeline(f"ss-{s}", partitions=2)
    src = p.source(Topic(f"ss-in-{s}", key_serde=StringSerde(), value_serde=JsonSerde(), partitions=2), name="in")
    src.sum(lambda r: r["v"], name="sums").to(Topic(f"ss-sums-{s}"), name="to-sums")
    src.count(name="counts").to(Topic(f"ss-counts-{s}"), name="to-counts")
    return p


BUCKET_MS = 2_000


class BucketSums(ProcessFunction):
    """Per user: the sum of ``v`` over each 2-second bucket of event time, kept in a map state
    and emitted as {"user", "bucket", "sum"} by an event-time timer at the bucket's last
    millisecond: a bucket the watermark has not passed is a pending timer."""

    def open(self, ctx: ProcessContext) -> None:
        self.sums = ctx.map_state("sums")

    def process(self, key: Any, value: Any, ctx: ProcessContext) -> None:
        bucket = ctx.timestamp // BUCKET_MS * BUCKET_MS
        was = self.sums.get(str(bucket))
        if was is None:
            ctx.register_event_timer(bucket + BUCKET_MS - 1)
        self.sums.put(str(bucket), (was or 0) + value["v"])

    def on_timer(self, timestamp: int, key: Any, ctx: ProcessContext) -> None:
        bucket = timestamp - BUCKET_MS + 1
        ctx.emit({"user": key, "bucket": bucket, "sum": self.sums.get(str(bucket))})
        self.sums.remove(str(bucket))


def rescaled() -> Pipeline:
    """Readings {"g", "ts", "v"} keyed by user (``rs-in-<suffix>``, its partition count the
    test's, event time from ``ts``, bound 0): ``BucketSums`` per user (step ``buckets``, timers)
    -> ``rs-buckets-<suffix>``; key_by group (``by-group``) -> one-second tumbling windows
    counted (``per-second``) -> ``rs-windows-<suffix>``."""
    s = _suffix()
    p = Pipeline(f"rs-{s}")
    src = p.source(Topic(f"rs-in-{s}", key_serde=StringSerde(), value_serde=JsonSerde()),
                   watermarks=WatermarkStrategy.bounded_out_of_orderness(0, timestamp="ts"), name="in")
    src.process(BucketSums(), name="buckets").to(Topic(f"rs-buckets-{s}"), name="to-buckets")
    src.key_by(lambda r: r["g"], name="by-group").window(TumblingWindows(1_000)).count(name="per-second") \
        .to(Topic(f"rs-windows-{s}", key_serde=JsonSerde()), name="to-windows")
    return p


def _check_spend(r: dict) -> dict:
    """A stand-in for a call to another service: 40 ms a record (one marked ``slow``: 1.5 s)."""
    import time

    time.sleep(1.5 if r.get("slow") else 0.04)
    return r


def slow_spend() -> Pipeline:
    """Spend per user, with a slow step after the re-key: ``spend-<suffix>`` (JSON
    ``{"user", "amount"}``) → key_by user → ``check`` (40 ms a record) → the checked records
    to ``checked-<suffix>`` and a running total per user to ``totals-<suffix>``."""
    s = _suffix()
    p = Pipeline(f"slow-{s}")
    spend = p.source(Topic(f"spend-{s}", key_serde=StringSerde(), value_serde=JsonSerde(), partitions=4))
    checked = spend.key_by(lambda r: r["user"], name="by-user").map(_check_spend, name="check")
    checked.to(Topic(f"checked-{s}"))
    checked.sum(lambda r: r["amount"], name="totals").to(Topic(f"totals-{s}"))
    return p


class NoPrice(Exception):
    """The price service has no price for the article: asking again cannot help."""


class PriceLookup(AsyncFunction):
    """The price of each order from the HTTP service at ``url`` (tests/integration/price_service.py),
    one aiohttp session per task."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def open(self) -> None:
        import aiohttp

        self.session = aiohttp.ClientSession()

    async def __call__(self, order: dict, call: AsyncCall) -> dict:
        async with self.session.get(f"{self.url}/price", params={"n": str(order["n"])},
                                    headers={"Idempotency-Key": call.idempotency_key}) as resp:
            body = await resp.json()
            if resp.status == 500:
                raise NoPrice(body["error"])
            if resp.status != 200:
                raise ConnectionError(f"price service answered {resp.status}: {body['error']}")
            return {**order, "price": body["price"]}

    async def close(self) -> None:
        await self.session.close()


def http_priced_orders() -> Pipeline:
    """Orders (``orders-<suffix>``, JSON ``{"n"}``, 4 partitions) priced by the HTTP service at
    ``PRICE_URL`` in an async step (``FW_TEST_ORDERED``: 1 ordered, 0 unordered), to
    ``priced-<suffix>``. An attempt gets 500 ms; transient failures are retried for about 50 s
    (a service away for 20 s is waited out); an article without a price is a dead letter."""
    s = _suffix()
    p = Pipeline(f"priced-{s}")
    orders = p.source(Topic(f"orders-{s}", key_serde=StringSerde(), value_serde=JsonSerde(), partitions=4))
    orders.map_async(PriceLookup(os.environ["PRICE_URL"]), capacity=50, timeout_ms=500,
                     retry=Retry.exponential(20, 50, 4000, on_exception=lambda e: not isinstance(e, NoPrice)),
                     ordered=os.environ.get("FW_TEST_ORDERED", "1") == "1", name="price").to(Topic(f"priced-{s}"))
    return p


def _stall(r: dict) -> dict:
    """A record marked ``stall`` takes ``FW_TEST_STALL_S`` seconds (when set): a call that hangs."""
    import time

    if r.get("stall") and os.environ.get("FW_TEST_STALL_S"):
        time.sleep(float(os.environ["FW_TEST_STALL_S"]))
    return r


def stalling() -> Pipeline:
    """``stall-in-<suffix>`` (JSON, 1 partition) through a step ``hang`` (``_stall``) to ``stall-out-<suffix>``."""
    s = _suffix()
    p = Pipeline(f"stall-{s}")
    p.source(Topic(f"stall-in-{s}", key_serde=StringSerde(), value_serde=JsonSerde(), partitions=1)).map(
        _stall, name="hang").to(Topic(f"stall-out-{s}"))
    return p


# -- redrive_orders: dead letters to re-drive once the code is fixed -------------------------------


def _tallied(acc: dict[str, Any], order: TracedOrder) -> dict[str, Any]:
    return {"user": order.user, "orders": acc.get("orders", 0) + 1, "amount": order.amount}


def redrive_orders() -> Pipeline:
    """JSON orders (``rdo-orders-<suffix>``, 2 partitions) parsed into a dataclass, screened
    (``screen``: an amount of 7 raises), re-keyed by user, tallied per user (``tally``: the
    user's running count of orders, stateful, before the next step), checked (``check``: an
    amount of 13 raises), to ``rdo-checked-<suffix>``. ``FW_TEST_REDRIVE_FIXED=1`` at start is
    the fixed code: neither step raises."""
    s = _suffix()
    broken = os.environ.get("FW_TEST_REDRIVE_FIXED") != "1"

    def screened(order: TracedOrder) -> TracedOrder:
        if broken and order.amount == 7:
            raise ValueError("seven is screened out")
        return order

    def checked(tally: dict[str, Any]) -> dict[str, Any]:
        if broken and tally["amount"] == 13:
            raise ValueError("unlucky amount 13")
        return tally

    p = Pipeline(f"rdo-{s}", partitions=2, types=[TracedOrder])
    p.source(Topic(f"rdo-orders-{s}", key_serde=StringSerde(), value_serde=JsonSerde(), partitions=2),
             name="orders") \
        .map(lambda d: TracedOrder(**d), name="parse").map(screened, name="screen") \
        .key_by(lambda o: o.user, name="by-user").aggregate(dict, _tallied, name="tally") \
        .map(checked, name="check").to(Topic(f"rdo-checked-{s}"), name="to-checked")
    return p
