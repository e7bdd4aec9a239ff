"""Async steps on the real broker, calling a real HTTP service (docs/async.md).

The service (``tests/integration/price_service.py``, its own process) answers in 5-50 ms,
fails 5% of calls for a while (503), hangs on 1% (the step's 500 ms timeout ends the
attempt, and it is retried), and has no price for every 97th article (500, a dead letter).
Every order must come out exactly once, read_committed: priced, or as a dead letter when its
article has no price; nothing else is a dead letter. The same with the member SIGKILLed while
calls are in flight, and with the service away for 20 s while the member keeps running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from tests.integration.harness import (
    ROOT,
    ServiceProcess,
    Tail,
    get_json,
    kill_at_random_after,
    produce_to_partitions,
    read_topic,
    service_env,
    wait_until,
)
from tests.ports import worker_port
from tests.present import present

TARGET = "tests.integration.pipelines:http_priced_orders"
ORDERS = 2000


class PriceService:
    """The HTTP service as a process of its own, stopped and started again on its port."""

    def __init__(self, workdir: Path) -> None:
        self.port = worker_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "price-service.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "tests.integration.price_service", str(self.port)],
                                         cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                         env={**os.environ, "PYTHONPATH": str(ROOT)})
        wait_until(lambda: self.stats() is not None, 60, "the price service to answer", self.log.read_text)

    def stats(self) -> dict[str, int] | None:
        try:
            with urllib.request.urlopen(f"{self.url}/stats", timeout=5) as resp:
                answer: dict[str, int] = json.loads(resp.read())
                return answer
        except OSError:
            return None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)


@pytest.fixture
def price_service(tmp_path: Path) -> Iterator[PriceService]:
    service = PriceService(tmp_path)
    service.start()
    try:
        yield service
    finally:
        service.kill()


def produce_orders(bootstrap: str, unique: str, numbers: range = range(ORDERS)) -> None:
    ensure_topics(admin_client({"bootstrap.servers": bootstrap}), [TopicSpec(f"orders-{unique}", 4)])
    produce_to_partitions(bootstrap, f"orders-{unique}", [
        (i % 4, f"k{i % 8}".encode(), json.dumps({"n": i}).encode()) for i in numbers])


def member(bootstrap: str, unique: str, tmp_path: Path, service: PriceService, ordered: bool) -> ServiceProcess:
    return ServiceProcess(TARGET, tmp_path, "0", {
        **service_env(bootstrap, unique), "PRICE_URL": service.url, "FW_TEST_ORDERED": "1" if ordered else "0",
        "FW_OBSERVE__PORT": "0"})


def outputs_complete(bootstrap: str, unique: str, n: int = ORDERS) -> Any:
    priced, letters = Tail(bootstrap, f"priced-{unique}"), Tail(bootstrap, f"priced-{unique}-dead-letter")

    def done() -> bool:
        return priced.drain() + letters.drain() >= n

    return done


def audit(bootstrap: str, unique: str, ordered: bool, n: int = ORDERS) -> None:
    """Each order once, read_committed: priced unless its article has no price, then a dead
    letter, with its origin and the exception."""
    priced = read_topic(bootstrap, f"priced-{unique}")
    got = Counter(json.loads(present(r.value))["n"] for r in priced)
    assert got == Counter(i for i in range(n) if i % 97), "every priced order exactly once"
    assert all(json.loads(present(r.value))["price"] == 10 * json.loads(present(r.value))["n"] for r in priced)
    letters = read_topic(bootstrap, f"priced-{unique}-dead-letter")
    assert Counter(json.loads(present(r.value))["n"] for r in letters) == Counter(range(0, n, 97)), \
        "exactly the orders without a price are dead letters, once each"
    for r in letters:
        assert r.headers["fw.step"] == b"price" and r.headers["fw.error.type"] == b"NoPrice", r.headers
        assert r.headers["fw.source.topic"] == f"orders-{unique}".encode()
    if ordered:  # in input order per partition, so per key
        per_key: dict[bytes, list[int]] = {}
        for r in sorted(priced, key=lambda r: (r.partition, r.offset)):
            per_key.setdefault(present(r.key), []).append(json.loads(present(r.value))["n"])
        assert all(ns == sorted(ns) for ns in per_key.values()), "ordered: each key's outputs in input order"


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
def test_every_order_is_priced_or_dead_lettered_exactly_once(
        kafka_bootstrap: str, unique: str, tmp_path: Path, price_service: PriceService, ordered: bool) -> None:
    produce_orders(kafka_bootstrap, unique)
    svc = member(kafka_bootstrap, unique, tmp_path, price_service, ordered).start()
    try:
        wait_until(outputs_complete(kafka_bootstrap, unique), 300, "every order priced or dead-lettered",
                   svc.log_text)
        metrics = urllib.request.urlopen(f"{svc.endpoint()}/metrics", timeout=10).read().decode()
        assert 'fw_async_call_seconds_count{step="price"}' in metrics
        assert 'fw_async_failures_total{step="price"}' in metrics
    finally:
        assert svc.stop() == 0, svc.log_text()
    audit(kafka_bootstrap, unique, ordered)


def test_a_member_killed_with_calls_in_flight_emits_each_result_once(
        kafka_bootstrap: str, unique: str, tmp_path: Path, price_service: PriceService) -> None:
    import random

    rng = random.Random(unique)
    produce_orders(kafka_bootstrap, unique)
    svc = member(kafka_bootstrap, unique, tmp_path, price_service, True)
    priced = Tail(kafka_bootstrap, f"priced-{unique}")
    try:
        for kill in range(3):
            svc.start()
            target = (kill + 1) * ORDERS // 5

            def progressed(t: int = target) -> bool:
                return priced.drain() >= t

            kill_at_random_after(svc, progressed, rng, f"{target} priced orders")
        svc.start()
        wait_until(outputs_complete(kafka_bootstrap, unique), 300, "every order priced or dead-lettered",
                   svc.log_text)
    finally:
        priced.close()
        assert svc.stop() == 0, svc.log_text()
    audit(kafka_bootstrap, unique, True)
    stats = present(price_service.stats())
    assert set(stats) >= {f"priced-{unique}/price/orders-{unique}[{i % 4}]@{i // 4}" for i in range(ORDERS)}


def test_a_member_rides_out_its_service_away_for_20_s(
        kafka_bootstrap: str, unique: str, tmp_path: Path, price_service: PriceService) -> None:
    produce_orders(kafka_bootstrap, unique)
    svc = member(kafka_bootstrap, unique, tmp_path, price_service, True).start()
    priced = Tail(kafka_bootstrap, f"priced-{unique}")
    try:
        url = svc.endpoint()
        wait_until(lambda: priced.drain() >= 100, 120, "orders priced", svc.log_text)
        price_service.kill()
        produce_orders(kafka_bootstrap, unique, range(ORDERS, 2 * ORDERS))  # more than the steps hold
        away_until, full = time.monotonic() + 20, False
        while time.monotonic() < away_until:  # the scenario: 20 s without the service
            assert svc.alive, svc.log_text()
            health, _ = get_json(f"{url}/health")
            assert health == 200, "a member whose service is away stays healthy"
            _code, status = get_json(f"{url}/status")
            counters = status["members"][0]["counters"]
            full = full or counters["async_in_flight"].get("price", 0) >= 50  # a task's capacity: back-pressure
            time.sleep(0.5)
        assert full, "the step filled to its capacity while the service was away"
        price_service.start()
        wait_until(outputs_complete(kafka_bootstrap, unique, 2 * ORDERS), 300, "every order priced or dead-lettered",
                   svc.log_text)
        assert svc.alive
    finally:
        priced.close()
        assert svc.stop() == 0, svc.log_text()
    audit(kafka_bootstrap, unique, True, 2 * ORDERS)


def test_a_replay_calls_the_service_again_and_equals_the_live_run(
        kafka_bootstrap: str, unique: str, tmp_path: Path, price_service: PriceService,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused without --allow-calls (it calls the service again for every record); with it,
    the calls are made from the Spark tasks and the outputs and dead letters are the live run's."""
    from tests.integration.pipelines import http_priced_orders
    from tests.integration.replay_harness import (
        Results,
        assert_same,
        fw_replay,
        parquet_outputs,
        results,
    )

    n = 600
    produce_orders(kafka_bootstrap, unique, range(n))
    svc = member(kafka_bootstrap, unique, tmp_path, price_service, True).start()
    try:
        wait_until(outputs_complete(kafka_bootstrap, unique, n), 300, "every order priced or dead-lettered",
                   svc.log_text)
    finally:
        assert svc.stop() == 0, svc.log_text()
    env = {"FW_BOOTSTRAP_SERVERS": kafka_bootstrap, "FW_TEST_SUFFIX": unique, "PRICE_URL": price_service.url}
    out = tmp_path / "replayed"
    refused = fw_replay(["replay", TARGET, "--output", f"parquet:{out}"], env)
    assert refused.returncode == 2, refused.stderr
    assert "calls other services in its async steps (price)" in refused.stderr and "--allow-calls" in refused.stderr
    done = fw_replay(["replay", TARGET, "--output", f"parquet:{out}", "--allow-calls"], env)
    assert done.returncode == 0, done.stdout + done.stderr
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    pipeline = http_priced_orders()
    live = results(kafka_bootstrap, pipeline)
    assert_same(pipeline, live, Results(parquet_outputs(out, pipeline), live.state))
    calls = present(price_service.stats())
    keys = [f"priced-{unique}/price/orders-{unique}[{i % 4}]@{i // 4}" for i in range(n)]
    assert all(calls[k] >= 2 for k in keys), "each record called live, then again by the replay"
