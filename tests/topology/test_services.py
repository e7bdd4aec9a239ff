"""The service pipelines in services/ through the TestDriver: results equal a direct computation."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from statistics import fmean
from typing import Any

import pytest

from framework.demo import expected_window_means
from framework.testing import TestDriver, TestRecord
from services.even_odd.pipeline import pipeline as even_odd
from services.fire_alarm.pipeline import WITHIN_MS as FIRE_WITHIN_MS
from services.fire_alarm.pipeline import pipeline as fire_alarm
from services.hashtags.pipeline import hashtags as extract_hashtags
from services.hashtags.pipeline import pipeline as hashtags
from services.orders_enrich import demo as enrich_demo
from services.orders_enrich import pipeline as enrich_pipeline
from services.sensors.pipeline import BOUND_MS, RISE_C, WINDOW_MS, build_pipeline
from services.sensors.pipeline import pipeline as sensors


def _by_key(records: list[TestRecord]) -> dict[Any, list[Any]]:
    """Output values per key, in output order (a key's records stay in order)."""
    out: dict[Any, list[Any]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        out[r.key].append(r.value)
    return dict(out)


def _prefix_sums(xs: Sequence[float]) -> list[float]:
    sums: list[float] = []
    total: float = 0
    for x in xs:
        total += x
        sums.append(total)
    return sums


# -- even_odd ------------------------------------------------------------------------------


def _numbers(n: int, seed: int = 1) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    return [(f"k{rng.randrange(5)}", rng.randrange(-1000, 1000)) for _ in range(n)]


@pytest.mark.parametrize("partitions", [1, 4])
def test_even_odd_sums_and_counts_equal_a_direct_computation(partitions: int) -> None:
    records = _numbers(500)
    driver = TestDriver(even_odd, partitions=partitions)
    for ts, (key, n) in enumerate(records):
        driver.pipe("numbers", {"n": n}, key=key, timestamp=ts)

    sums = _by_key(driver.output("even-odd-sums"))
    for parity, wanted in (("even", 0), ("odd", 1)):
        ns = [n for _, n in records if n % 2 == wanted]
        assert sums[parity] == _prefix_sums(ns)  # every running sum, in order
    assert set(sums) == {"even", "odd"}

    counts = _by_key(driver.output("number-counts"))
    expected = Counter(k for k, _ in records)
    assert {k: v[-1] for k, v in counts.items()} == dict(expected)
    assert all(v == list(range(1, len(v) + 1)) for v in counts.values())
    assert driver.state("sums", "even") == sum(n for _, n in records if n % 2 == 0)
    assert driver.dead_letters() == []


def test_even_odd_recovers_exactly_once_after_a_crash() -> None:
    records = _numbers(300, seed=2)
    driver = TestDriver(even_odd, partitions=2, auto_checkpoint=False)
    for i, (key, n) in enumerate(records):
        driver.pipe("numbers", {"n": n}, key=key, timestamp=i)
        if i % 50 == 49:
            driver.checkpoint()
        if i in (120, 275):  # lose everything since the last checkpoint, then re-process it
            driver.crash()
    driver.run()
    driver.checkpoint()
    driver.run()
    driver.checkpoint()

    sums = {k: v[-1] for k, v in _by_key(driver.output("even-odd-sums")).items()}
    assert sums == {
        "even": sum(n for _, n in records if n % 2 == 0),
        "odd": sum(n for _, n in records if n % 2 == 1),
    }
    assert len(driver.output("even-odd-sums")) == len(records)  # no duplicate outputs
    counts = {k: v[-1] for k, v in _by_key(driver.output("number-counts")).items()}
    assert counts == dict(Counter(k for k, _ in records))


def test_even_odd_sends_an_undecodable_number_to_the_dead_letter_topic() -> None:
    driver = TestDriver(even_odd)
    driver.pipe("numbers", {"n": 4}, key="a")
    driver.pipe_raw("numbers", b"\xff", key=b"a")  # not a valid Avro long
    driver.pipe("numbers", {"n": 6}, key="a")
    assert driver.values("even-odd-sums") == [4, 10]
    assert len(driver.dead_letters()) == 1


# -- hashtags ------------------------------------------------------------------------------


def test_hashtag_extraction() -> None:
    assert extract_hashtags({"text": "Go #Kafka, go #kafka! #Flink # and#not #x."}) == [
        "#kafka", "#kafka", "#flink", "#x"]
    assert extract_hashtags({"text": ""}) == []


@pytest.mark.parametrize("partitions", [1, 3])
def test_hashtag_counts_equal_a_counter(partitions: int) -> None:
    rng = random.Random(3)
    tags = ["#kafka", "#Flink", "#python", "#STREAMS", "#rocksdb"]
    words = ["hello", "world", "state", "exactly", "once"]
    tweets = [
        {"text": " ".join(rng.choice(tags + words) for _ in range(rng.randrange(0, 8)))}
        for _ in range(400)
    ]
    driver = TestDriver(hashtags, partitions=partitions)
    for i, tweet in enumerate(tweets):
        driver.pipe("tweets", tweet, timestamp=i)

    expected = Counter(w.lower() for t in tweets for w in t["text"].split() if w.startswith("#"))
    counts = _by_key(driver.output("hashtag-counts"))
    assert {k: v[-1] for k, v in counts.items()} == dict(expected)
    assert all(v == list(range(1, len(v) + 1)) for v in counts.values())


# -- sensors -------------------------------------------------------------------------------


def _reading(sensor: str, ts: int, temperature: float) -> dict[str, Any]:
    return {"id": sensor, "timestamp": ts, "temperature": temperature}


def test_sensor_mean_and_alerts_on_a_small_example() -> None:
    driver = TestDriver(sensors)
    for r in [
        _reading("a", 1, 20.0),
        _reading("b", 2, 30.0),
        _reading("a", 3, 25.5),   # +5.5: alert
        _reading("a", 4, 30.5),   # +5.0: not more than 5, no alert
        _reading("b", 5, 24.0),
        _reading("b", 6, 29.5),   # +5.5: alert
        _reading("a", 7, 10.0),
    ]:
        driver.pipe("readings", r, key=r["id"], timestamp=r["timestamp"])

    means = _by_key(driver.output("sensor-means"))
    assert means["a"] == pytest.approx([20.0, 22.75, 76 / 3, 86 / 4])
    assert means["b"] == pytest.approx([30.0, 27.0, 83.5 / 3])
    alerts = driver.output("sensor-alerts")
    assert [(a.key, a.timestamp) for a in alerts] == [("a", 3), ("b", 6)]
    assert alerts[0].value == {"id": "a", "timestamp": 3, "previous": 20.0, "temperature": 25.5,
                               "rise": 5.5}
    assert driver.state("alerts", "a", state="previous") == 10.0


@pytest.mark.parametrize("partitions", [1, 4])
def test_sensor_means_and_alerts_equal_a_direct_computation(partitions: int) -> None:
    rng = random.Random(4)
    readings = []
    for i in range(2000):
        sensor = f"sensor-{rng.randrange(6)}"
        temperature = round(rng.gauss(20, 4), 2)
        readings.append(_reading(sensor, 1_700_000_000_000 + i, temperature))
    suffix = "-t"
    driver = TestDriver(build_pipeline(suffix), partitions=partitions)
    for r in readings:
        driver.pipe(f"readings{suffix}", r, key=r["id"], timestamp=r["timestamp"])

    per_sensor: dict[str, list[float]] = defaultdict(list)
    expected_alerts = []
    for r in readings:
        temps = per_sensor[r["id"]]
        if temps and r["temperature"] - temps[-1] > RISE_C:
            expected_alerts.append((r["id"], r["timestamp"], temps[-1], r["temperature"]))
        temps.append(r["temperature"])

    means = _by_key(driver.output(f"sensor-means{suffix}"))
    assert set(means) == set(per_sensor)
    for sensor, temps in per_sensor.items():
        assert len(means[sensor]) == len(temps)
        assert means[sensor][-1] == pytest.approx(fmean(temps))
        running = [s / (i + 1) for i, s in enumerate(_prefix_sums(temps))]
        assert means[sensor] == pytest.approx(running)

    alerts = sorted(
        (a.value["id"], a.value["timestamp"], a.value["previous"], a.value["temperature"])
        for a in driver.output(f"sensor-alerts{suffix}")
    )
    assert alerts == sorted(expected_alerts)
    assert expected_alerts  # the data does contain rises


@pytest.mark.parametrize("partitions", [1, 4])
def test_sensor_minute_means_on_event_time_equal_a_direct_computation(partitions: int) -> None:
    """Readings out of order within the bound: every minute window fires once the watermark
    passes it, with the mean of exactly its readings; none is late."""
    rng = random.Random(11)
    base = 1_700_000_000_000
    readings = [_reading(f"sensor-{rng.randrange(5)}", base + i * 250 + rng.randrange(BOUND_MS), 20.0 + i % 7)
                for i in range(3000)]
    readings.sort(key=lambda r: r["timestamp"] + rng.randrange(BOUND_MS))  # disorder below the bound
    driver = TestDriver(build_pipeline("-w"), partitions=partitions)
    for r in readings:
        driver.pipe("readings-w", r, key=r["id"])
    driver.advance_watermark(base + 10**7)

    fired = {(rec.key, rec.value["start"]): (rec.value["end"], rec.timestamp, rec.value["value"])
             for rec in driver.output("sensor-minute-means-w")}
    expected = expected_window_means(readings, WINDOW_MS)
    assert set(fired) == set(expected)
    for (sensor, start), (end, ts, mean) in fired.items():
        assert (end, ts) == (start + WINDOW_MS, start + WINDOW_MS - 1)
        assert mean == pytest.approx(expected[(sensor, start)])
    assert driver.output("late-readings-w") == []
    assert len(driver.output("sensor-minute-means-w")) == len(expected)  # each window fired once


# -- fire alarm ----------------------------------------------------------------------------


def _event(location: str, kind: str, ts: int, celsius: float = 20.0) -> dict[str, Any]:
    return {"location": location, "kind": kind, "celsius": celsius, "ts": ts}


def test_fire_alarm_alerts_only_for_smoke_within_ten_minutes_of_a_high_temperature() -> None:
    driver = TestDriver(fire_alarm)
    minute = 60_000
    driver.pipe("sensor-events", _event("hall", "temperature", 0, celsius=70), key="hall")
    driver.pipe("sensor-events", _event("hall", "smoke", 9 * minute), key="hall")  # within 10 minutes
    assert [(r.key, r.value["smoke_at"]) for r in driver.output("fire-alarms")] == [("hall", 9 * minute)]
    assert driver.timers("fire-alarm") == [(FIRE_WITHIN_MS, "hall")]  # pending: watermark 8.5 min
    assert driver.state("fire-alarm", "hall", state="hot_at") == 0

    for e in [
        _event("lab", "temperature", 10 * minute, celsius=30),
        _event("lab", "smoke", 11 * minute),             # no high temperature: nothing
        _event("attic", "temperature", 12 * minute, celsius=80),
        _event("attic", "smoke", 23 * minute),           # 11 minutes later: too late
    ]:
        driver.pipe("sensor-events", e, key=e["location"])
    assert len(driver.output("fire-alarms")) == 1
    # Both timers fired once the watermark passed them, and forgot the high temperatures.
    assert driver.timers("fire-alarm") == []
    assert driver.state("fire-alarm", "hall", state="hot_at") is None
    assert driver.state("fire-alarm", "attic", state="hot_at") is None


# -- orders enrich -------------------------------------------------------------------------

T0 = 1_700_000_000_000
FAR = 10**13  # a watermark past every record: all held orders are released


def _customer(driver: TestDriver, customer: str, at: int, tier: str | None, name: str = "Ann") -> None:
    """A customer record at ``T0 + at`` (``tier`` None: a delete, at its Kafka timestamp)."""
    value = None if tier is None else {"customer_id": customer, "name": name, "tier": tier, "timestamp": T0 + at}
    driver.pipe(enrich_pipeline.CUSTOMERS, value, key=customer, timestamp=T0 + at)


def _order(driver: TestDriver, order: str, customer: str, at: int) -> None:
    driver.pipe(enrich_pipeline.ORDERS, {"order_id": order, "customer_id": customer, "amount": 100,
                                         "timestamp": T0 + at}, key=customer, timestamp=T0 + at)


def _tiers(driver: TestDriver) -> list[tuple[str, str, str | None, int]]:
    return [(r.key, r.value["order_id"], r.value["tier"], r.timestamp - T0)
            for r in driver.output(enrich_pipeline.OUTPUT)]


def test_orders_enrich_joins_each_order_with_its_customer_as_of_the_orders_time() -> None:
    driver = TestDriver(enrich_pipeline.build_pipeline())
    _customer(driver, "c-1", 0, "new")
    _order(driver, "o-1", "c-1", 10_000)  # waits: the customers' watermark is behind 10 s
    _order(driver, "o-2", "c-2", 11_000)  # no record of c-2 yet, nor ever before 11 s
    assert _tiers(driver) == []
    _customer(driver, "c-1", 12_000, "gold")  # after o-1 in event time: o-1 keeps "new"
    _customer(driver, "c-2", 30_000, "silver")  # the watermark passes 11 s: both released
    assert _tiers(driver) == [("c-1", "o-1", "new", 10_000), ("c-2", "o-2", None, 11_000)]
    _order(driver, "o-3", "c-1", 20_000)  # behind the join's watermark: joined at once, as of 20 s
    _customer(driver, "c-1", 40_000, None)  # a delete
    _order(driver, "o-4", "c-1", 41_000)
    _customer(driver, "c-1", 39_000, "new")  # arrives after the order, 2 s before it in event time
    driver.advance_watermark(FAR)
    assert _tiers(driver)[2:] == [("c-1", "o-3", "gold", 20_000), ("c-1", "o-4", None, 41_000)]
    assert driver.output(enrich_pipeline.OUTPUT)[0].value == {
        "order_id": "o-1", "customer_id": "c-1", "amount": 100, "timestamp": T0 + 10_000, "name": "Ann",
        "tier": "new"}
    assert driver.metrics().get("late_records.customers", 0) == 0


def test_orders_enrich_an_order_waits_at_most_the_grace_for_a_silent_customers_partition() -> None:
    driver = TestDriver(enrich_pipeline.build_pipeline())
    _customer(driver, "c-1", 0, "new")
    _order(driver, "o-1", "c-1", 1_000)
    _order(driver, "o-2", "c-1", 1_000 + enrich_pipeline.GRACE_MS + enrich_pipeline.BOUND_MS)
    assert _tiers(driver) == []  # the orders' watermark is at o-1's time + the grace - 1 ms
    _order(driver, "o-3", "c-1", 1_001 + enrich_pipeline.GRACE_MS + enrich_pipeline.BOUND_MS)
    assert _tiers(driver) == [("c-1", "o-1", "new", 1_000)]


@pytest.mark.parametrize("partitions", [1, 3])
@pytest.mark.parametrize("arrival", ["customers-first", "orders-first", "as-generated"])
def test_orders_enrich_equals_a_brute_force_as_of_join_however_the_topics_interleave(
        partitions: int, arrival: str) -> None:
    """The demo's input (updates, deletes, disorder within the bound) in three interleavings of
    the two topics, each topic's own order kept: the same joins, each order once."""
    inputs = enrich_demo.generate(600, seed=3)
    customers = [r for r in inputs if r[0] == enrich_pipeline.CUSTOMERS]
    orders = [r for r in inputs if r[0] == enrich_pipeline.ORDERS]
    fed = {"customers-first": customers + orders, "orders-first": orders + customers, "as-generated": inputs}
    driver = TestDriver(enrich_pipeline.build_pipeline(), partitions=partitions)
    for topic, key, value, ts in fed[arrival]:
        driver.pipe(topic, value, key=key, timestamp=ts)
    driver.advance_watermark(FAR)

    everything = [*inputs, (enrich_pipeline.CUSTOMERS, "c-0", None, FAR)]  # releases every order
    wanted = enrich_demo.expected(everything)
    assert len(wanted) == len(orders) > 400
    assert enrich_demo.observe({enrich_pipeline.OUTPUT: [(r.key, r.value) for r in
                                                         driver.output(enrich_pipeline.OUTPUT)]}) == wanted
    assert {tier for joined in wanted.values() for _, _, tier in joined} == {None, "new", "silver", "gold"}
    assert driver.metrics().get("late_records.customers", 0) == 0 and driver.state_sizes()["enrich"] == 0


def test_orders_enrich_sends_an_undecodable_order_to_the_dead_letter_topic() -> None:
    driver = TestDriver(enrich_pipeline.build_pipeline())
    driver.pipe_raw(enrich_pipeline.ORDERS, b"\xff not avro", key=b"c-1", timestamp=T0)
    _customer(driver, "c-1", 0, "new")
    _order(driver, "o-1", "c-1", 0)
    driver.advance_watermark(FAR)
    [dead] = driver.dead_letters()
    assert (dead.key(), dead.value()) == (b"c-1", b"\xff not avro")
    assert _tiers(driver) == [("c-1", "o-1", "new", 0)]
