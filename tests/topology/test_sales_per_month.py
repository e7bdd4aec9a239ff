"""The sales-per-month service through the TestDriver (no broker): literal inputs and outputs."""

from __future__ import annotations

from datetime import UTC, datetime

from framework.testing import TestDriver
from services.sales_per_month.pipeline import INPUT, OUTPUT, build_pipeline


def ms(when: str) -> int:
    """An ISO date-time in UTC as ms since the epoch."""
    return int(datetime.fromisoformat(when).replace(tzinfo=UTC).timestamp() * 1000)


def sell(driver: TestDriver, order: str, product: str, category: str, amount: int, when: str) -> None:
    driver.pipe(INPUT, {"product": product, "category": category, "amount": amount, "timestamp": ms(when)},
                key=order, timestamp=ms(when))


def test_per_calendar_month_and_product_amount_and_count() -> None:
    driver = TestDriver(build_pipeline())
    sell(driver, "o-1", "widget", "tools", 1_250, "2026-01-31T23:59:59.999")
    sell(driver, "o-2", "widget", "tools", 300, "2026-02-01T00:00:00")  # the next millisecond: February
    sell(driver, "o-3", "gadget", "toys", 999, "2026-02-28T12:00:00")
    sell(driver, "o-4", "widget", "tools", 700, "2026-02-28T12:00:00")
    sell(driver, "o-5", "widget", "tools", 5, "2026-01-15T08:00:00")  # January, however late
    assert [(r.key, r.value) for r in driver.output(OUTPUT)] == [
        ("2026-01 widget", {"month": "2026-01", "product": "widget", "category": "tools", "amount": 1_250,
                            "sales": 1}),
        ("2026-02 widget", {"month": "2026-02", "product": "widget", "category": "tools", "amount": 300,
                            "sales": 1}),
        ("2026-02 gadget", {"month": "2026-02", "product": "gadget", "category": "toys", "amount": 999,
                            "sales": 1}),
        ("2026-02 widget", {"month": "2026-02", "product": "widget", "category": "tools", "amount": 1_000,
                            "sales": 2}),
        ("2026-01 widget", {"month": "2026-01", "product": "widget", "category": "tools", "amount": 1_255,
                            "sales": 2}),
    ]
    assert driver.state("monthly", "2026-02 widget")["amount"] == 1_000


def test_a_sale_that_does_not_decode_goes_to_the_dead_letter_topic() -> None:
    driver = TestDriver(build_pipeline())
    driver.pipe_raw(INPUT, b"\xff not avro", key=b"o-1", timestamp=0)
    sell(driver, "o-2", "widget", "tools", 300, "2026-02-01T00:00:00")
    [dead] = driver.dead_letters()
    assert (dead.key(), dead.value()) == (b"o-1", b"\xff not avro")
    assert [r.key for r in driver.output(OUTPUT)] == ["2026-02 widget"]
