"""Async steps through the TestDriver (docs/async.md): results in order, retries and
timeouts, dead letters, capacity, watermarks that never overtake a record, and records in
flight at a checkpoint called again after a crash, exactly once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from framework import (
    AsyncCall,
    AsyncFunction,
    JsonSerde,
    Pipeline,
    PipelineError,
    Retry,
    StringSerde,
    Topic,
    TumblingWindows,
    WatermarkStrategy,
)
from framework.testing import TestDriver

IN = Topic("orders", key_serde=StringSerde(), value_serde=JsonSerde())
OUT = Topic("priced", key_serde=StringSerde(), value_serde=JsonSerde())


class PriceService:
    """A fake of the service the step calls: answers, counts the calls, fails on request."""

    def __init__(self, fail_first: int = 0, hang: set[int] | None = None) -> None:
        self.calls: list[tuple[int, str, int]] = []  # (n, idempotency key, attempt)
        self.fail_first = fail_first
        self.hang = hang or set()

    async def __call__(self, order: dict[str, Any], call: AsyncCall) -> dict[str, Any]:
        self.calls.append((order["n"], call.idempotency_key, call.attempt))
        if order["n"] in self.hang:
            await asyncio.sleep(60)
        if call.attempt <= self.fail_first:
            raise ConnectionError("price service unavailable")
        await asyncio.sleep(0)
        return {**order, "price": order["n"] * 10}


def priced(service: Any, **options: Any) -> Pipeline:
    p = Pipeline("shop")
    p.source(IN).map_async(service, name="price", **options).to(OUT)
    return p


@pytest.mark.parametrize("ordered", [True, False])
def test_each_record_is_called_once_and_its_result_emitted_in_input_order(ordered: bool) -> None:
    service = PriceService()
    driver = TestDriver(priced(service, ordered=ordered))
    for n in range(5):
        driver.pipe("orders", {"n": n}, key=f"k{n % 2}", timestamp=1000 + n)
    out = driver.output("priced")
    assert [(r.key, r.value["price"], r.timestamp) for r in out] == [
        (f"k{n % 2}", n * 10, 1000 + n) for n in range(5)]
    assert service.calls == [(n, f"shop/price/orders[0]@{n}", 1) for n in range(5)]


def test_a_plain_function_of_the_value_needs_no_call_argument() -> None:
    async def double(v: dict[str, Any]) -> dict[str, Any]:
        return {"n": v["n"] * 2}

    driver = TestDriver(priced(double))
    driver.pipe("orders", {"n": 21})
    assert driver.values("priced") == [{"n": 42}]


def test_a_failed_call_is_retried_then_its_result_emitted_once() -> None:
    service = PriceService(fail_first=2)
    driver = TestDriver(priced(service, retry=Retry.fixed(3, 1)))
    driver.pipe("orders", {"n": 7})
    assert driver.values("priced") == [{"n": 7, "price": 70}]
    assert [attempt for _n, _key, attempt in service.calls] == [1, 2, 3]
    assert {k for _n, k, _a in service.calls} == {"shop/price/orders[0]@0"}  # the same key every attempt
    assert driver.metrics()["async_retries.price"] == 2


def test_a_call_that_fails_for_good_is_a_dead_letter_with_its_exception() -> None:
    service = PriceService(fail_first=5)
    driver = TestDriver(priced(service, retry=Retry.exponential(2, 1, 10)))
    driver.pipe("orders", {"n": 1}, key="a")
    driver.pipe("orders", {"n": 2}, key="b")
    assert driver.values("priced") == []
    letters = driver.output(driver.pipeline.dead_letter.name)
    assert [(r.key, r.value) for r in letters] == [(b"a", b'{"n":1}'), (b"b", b'{"n":2}')]  # as produced
    headers = dict(letters[0].headers)
    assert headers["fw.step"] == b"price"
    assert headers["fw.error.type"] == b"ConnectionError"
    assert headers["fw.source.offset"] == b"0"
    assert b"the call failed after 2 attempts: ConnectionError: price service unavailable" in \
        headers["fw.error.message"]
    assert driver.metrics()["async_failures.price"] == 2


def test_an_attempt_past_its_timeout_is_retried_then_dead_lettered_as_a_timeout() -> None:
    service = PriceService(hang={3})
    driver = TestDriver(priced(service, timeout_ms=20, retry=Retry.fixed(2, 0)))
    for n in (2, 3, 4):
        driver.pipe("orders", {"n": n})
    assert [v["n"] for v in driver.values("priced")] == [2, 4]
    [letter] = driver.output(driver.pipeline.dead_letter.name)
    assert dict(letter.headers)["fw.error.type"] == b"TimeoutError"
    assert b"no answer within timeout_ms=20" in dict(letter.headers)["fw.error.message"]
    assert driver.metrics()["async_timeouts.price"] == 2


def test_a_result_the_retry_refuses_is_asked_again() -> None:
    answers = iter([{"status": "pending"}, {"status": "pending"}, {"status": "done"}])

    async def status(v: dict[str, Any]) -> dict[str, Any]:
        return next(answers)

    p = Pipeline("shop")
    p.source(IN).map_async(status, retry=Retry.fixed(5, 0, on_result=lambda r: r["status"] == "pending"),
                           name="status").to(OUT)
    driver = TestDriver(p)
    driver.pipe("orders", {"n": 1})
    assert driver.values("priced") == [{"status": "done"}]


def test_process_async_emits_what_the_call_returns() -> None:
    async def split(key: str, order: dict[str, Any], call: AsyncCall) -> list[dict[str, Any]]:
        return [{"item": i} for i in range(order["items"])]

    p = Pipeline("shop")
    p.source(IN).process_async(split, name="split").to(OUT)
    driver = TestDriver(p)
    driver.pipe("orders", {"items": 3}, key="a")
    driver.pipe("orders", {"items": 0}, key="b")
    assert [(r.key, r.value) for r in driver.output("priced")] == [("a", {"item": i}) for i in range(3)]


def test_an_async_function_is_opened_once_per_task_and_closed_with_it() -> None:
    events: list[str] = []

    class Lookup(AsyncFunction):
        async def open(self) -> None:
            events.append("open")
            self.rate = 3

        async def __call__(self, value: dict[str, Any], call: AsyncCall) -> dict[str, Any]:
            return {"n": value["n"] * self.rate}

        async def close(self) -> None:
            events.append("close")

    driver = TestDriver(priced(Lookup()), partitions=2)
    for n in range(4):
        driver.pipe("orders", {"n": n}, key=f"k{n}")
    assert sorted(v["n"] for v in driver.values("priced")) == [0, 3, 6, 9]
    assert events == ["open", "open"]
    driver.restart()
    assert events.count("close") == 2


def test_a_test_can_stand_a_fake_in_for_the_step_function() -> None:
    async def real(v: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("the real service is not called in a unit test")

    async def fake(v: dict[str, Any]) -> dict[str, Any]:
        return {"n": -v["n"]}

    driver = TestDriver(priced(real), fakes={"price": fake})
    driver.pipe("orders", {"n": 5})
    assert driver.values("priced") == [{"n": -5}]


def test_records_in_flight_at_a_checkpoint_are_called_again_after_a_crash_and_emitted_once() -> None:
    service = PriceService()
    driver = TestDriver(priced(service), calls="deferred", auto_checkpoint=False)
    for n in range(3):
        driver.pipe("orders", {"n": n}, key="k")
    assert driver.calls_in_flight() == {"price": 3}
    driver.checkpoint()  # the three are in flight: stored with the checkpoint, their offsets committed
    driver.pipe("orders", {"n": 3}, key="k")  # after it: processed again from the input after the crash
    driver.crash()
    assert driver.calls_in_flight() == {"price": 4}
    driver.complete_calls()
    driver.checkpoint()
    assert [v["n"] for v in driver.values("priced")] == [0, 1, 2, 3]
    # the deferred calls of the process that crashed never ran: the restored task made all four
    assert service.calls == [(n, f"shop/price/orders[0]@{n}", 1) for n in range(4)]
    driver.crash()
    assert driver.calls_in_flight() == {"price": 0}
    assert [v["n"] for v in driver.values("priced")] == [0, 1, 2, 3]


def test_a_call_made_before_a_crash_is_made_again_with_the_same_idempotency_key() -> None:
    service = PriceService()
    driver = TestDriver(priced(service), calls="deferred", auto_checkpoint=False)
    driver.pipe("orders", {"n": 9}, key="k")
    driver.checkpoint()  # in flight: stored
    driver.complete_calls()  # the call reached the service and its result went out, uncommitted
    driver.crash()  # before the next checkpoint
    driver.complete_calls()
    driver.checkpoint()
    assert service.calls == [(9, "shop/price/orders[0]@0", 1)] * 2
    assert driver.values("priced") == [{"n": 9, "price": 90}]


def test_capacity_bounds_the_records_in_flight() -> None:
    seen: list[int] = []
    driver_ref: list[TestDriver] = []

    async def watch(v: dict[str, Any]) -> dict[str, Any]:
        seen.append(driver_ref[0].calls_in_flight()["price"])
        return v

    driver = TestDriver(priced(watch, capacity=2), calls="deferred")
    driver_ref.append(driver)
    for n in range(6):
        driver.pipe("orders", {"n": n})
    assert max(driver.calls_in_flight().values()) <= 2
    driver.complete_calls()
    assert max(seen) <= 2
    assert [v["n"] for v in driver.values("priced")] == list(range(6))


@pytest.mark.parametrize("ordered", [True, False])
def test_a_watermark_leaves_the_step_only_after_every_record_before_it(ordered: bool) -> None:
    """The window after the async step must not fire while records before the watermark that
    closes it are still in flight: they would be late there."""
    async def same(v: dict[str, Any]) -> dict[str, Any]:
        return v

    p = Pipeline("shop")
    src = p.source(IN, watermarks=WatermarkStrategy.bounded_out_of_orderness(0, timestamp="ts"))
    (src.map_async(same, ordered=ordered, name="price")
        .window(TumblingWindows(1000)).count(name="per-second").to(Topic("counts", key_serde=StringSerde())))
    driver = TestDriver(p, calls="deferred")
    for ts in (100, 200, 5000):
        driver.pipe("orders", {"ts": ts}, key="k", timestamp=ts)
    assert driver.watermark("price") == 4999  # the step's input has seen 5000
    assert driver.watermark("per-second") < 999  # but no watermark has left the step: nothing fires yet
    assert driver.output("counts") == []
    driver.complete_calls()
    assert [(r.key, r.value["value"], r.timestamp) for r in driver.output("counts")] == [("k", 2, 999)]
    assert driver.metrics().get("late_records.per-second", 0) == 0


def test_only_async_functions_are_async_steps() -> None:
    with pytest.raises(PipelineError, match="map_async takes an async function"):
        Pipeline("p").source(IN).map_async(lambda v: v)  # type: ignore[arg-type]


def test_a_record_in_flight_reads_as_an_entry_of_its_store() -> None:
    """What ``fw state`` shows of an async step's store: each record in flight by its key and
    sequence number, with its value and origin."""
    from framework.engine.entries import StoreLayout
    from framework.serde.values import ValueCodec

    pipeline = priced(PriceService())
    driver = TestDriver(pipeline, calls="deferred", auto_checkpoint=False)
    driver.pipe("orders", {"n": 4}, key="k")
    driver.checkpoint()
    layout, codec = StoreLayout(pipeline, "price"), ValueCodec(pipeline.types)
    entries = [e for key, value in driver.dump()["price"].items() if not key.startswith(b"\x00")
               for e in layout.decode(key, codec.encode(value))]
    assert [(e.state, e.key, e.map_key, e.value["v"], e.value["o"]) for e in entries] == [
        ("inflight", "k", 0, {"n": 4}, "orders[0]@0")]


def test_a_timeout_error_of_the_function_is_its_own_failure_not_the_steps_timeout() -> None:
    async def gives_up(v: dict[str, Any]) -> dict[str, Any]:
        raise TimeoutError("the database said: statement timeout")

    driver = TestDriver(priced(gives_up, timeout_ms=10_000))
    driver.pipe("orders", {"n": 1})
    [letter] = driver.output(driver.pipeline.dead_letter.name)
    assert b"statement timeout" in dict(letter.headers)["fw.error.message"]
    assert "async_timeouts.price" not in driver.metrics()


def test_an_async_function_that_cannot_open_fails_each_call_with_why() -> None:
    class Broken(AsyncFunction):
        async def open(self) -> None:
            raise ConnectionRefusedError("no database at db:5432")

        async def __call__(self, value: dict[str, Any], call: AsyncCall) -> dict[str, Any]:
            return value

    driver = TestDriver(priced(Broken()))
    for n in range(2):
        driver.pipe("orders", {"n": n})
    letters = driver.output(driver.pipeline.dead_letter.name)
    assert len(letters) == 2
    assert all(b"no database at db:5432" in dict(r.headers)["fw.error.message"] for r in letters)
