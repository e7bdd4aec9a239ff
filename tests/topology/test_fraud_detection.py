"""The fraud-detection service through the TestDriver (no broker): literal inputs and outputs."""

from __future__ import annotations

from framework.testing import TestDriver
from services.fraud_detection.pipeline import INPUT, OUTPUT, build_pipeline

T0 = 1_700_000_000_000
SECOND = 1_000


def pay(driver: TestDriver, card: str, at: int, amount: float) -> None:
    driver.pipe(INPUT, {"card": card, "timestamp": T0 + at, "amount": amount}, key=card, timestamp=T0 + at)


def alerts(driver: TestDriver) -> list[tuple[str, dict[str, object]]]:
    return [(r.key, r.value) for r in driver.output(OUTPUT)]


def test_a_small_transaction_then_a_large_one_within_a_minute_alerts() -> None:
    driver = TestDriver(build_pipeline())
    pay(driver, "a", 0, 0.5)
    assert driver.state("detector", "a", state="small") == {"at": T0, "amount": 0.5}
    assert driver.timers("detector") == [(T0 + 60 * SECOND, "a")]
    pay(driver, "a", 30 * SECOND, 600.0)
    assert alerts(driver) == [
        ("a", {"card": "a", "small_at": T0, "small_amount": 0.5, "large_at": T0 + 30 * SECOND,
               "large_amount": 600.0}),
    ]
    assert driver.state("detector", "a", state="small") is None  # the pattern ended
    assert driver.timers("detector") == []  # and its timer went with it


def test_exactly_one_minute_is_still_within_and_the_alert_needs_a_large_amount() -> None:
    driver = TestDriver(build_pipeline())
    pay(driver, "d", 0, 600.0)  # large without a small one before it: nothing
    pay(driver, "d", 40 * SECOND, 0.99)
    pay(driver, "d", 100 * SECOND, 500.01)  # exactly 60 s later
    pay(driver, "e", 0, 0.1)
    pay(driver, "e", 10 * SECOND, 500.0)  # not over 500.00
    assert alerts(driver) == [
        ("d", {"card": "d", "small_at": T0 + 40 * SECOND, "small_amount": 0.99,
               "large_at": T0 + 100 * SECOND, "large_amount": 500.01}),
    ]


def test_the_timer_forgets_the_small_transaction_after_a_minute() -> None:
    driver = TestDriver(build_pipeline())
    pay(driver, "b", 0, 0.5)
    pay(driver, "z", 65 * SECOND, 20.0)  # watermark 65 s - 5 s - 1 ms: b's timer at 60 s waits
    assert driver.timers("detector") == [(T0 + 60 * SECOND, "b")]
    pay(driver, "z", 65 * SECOND + 1, 20.0)  # watermark 60 s: it fires
    assert driver.timers("detector") == []
    assert driver.state("detector", "b", state="small") is None
    pay(driver, "b", 90 * SECOND, 900.0)
    assert alerts(driver) == []


def test_any_transaction_in_between_ends_the_pattern() -> None:
    driver = TestDriver(build_pipeline())
    pay(driver, "c", 0, 0.5)
    pay(driver, "c", 10 * SECOND, 20.0)
    pay(driver, "c", 20 * SECOND, 700.0)
    pay(driver, "f", 0, 0.5)
    pay(driver, "f", 5 * SECOND, 0.25)  # a second small one: the flag moves to it
    pay(driver, "f", 50 * SECOND, 800.0)
    assert alerts(driver) == [
        ("f", {"card": "f", "small_at": T0 + 5 * SECOND, "small_amount": 0.25,
               "large_at": T0 + 50 * SECOND, "large_amount": 800.0}),
    ]


def test_a_transaction_that_does_not_decode_goes_to_the_dead_letter_topic() -> None:
    driver = TestDriver(build_pipeline())
    driver.pipe_raw(INPUT, b"\xff not avro", key=b"a", timestamp=T0)
    pay(driver, "a", SECOND, 0.5)
    pay(driver, "a", 2 * SECOND, 600.0)
    [dead] = driver.dead_letters()
    assert (dead.key(), dead.value()) == (b"a", b"\xff not avro")
    assert [key for key, _ in alerts(driver)] == ["a"]  # the service went on
