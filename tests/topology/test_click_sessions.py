"""The click-sessions service through the TestDriver (no broker): literal inputs and outputs."""

from __future__ import annotations

from typing import Any

from framework.testing import TestDriver
from services.click_sessions.pipeline import INPUT, LATE, OUTPUT, build_pipeline

T0 = 1_700_000_000_000
SECOND = 1_000
MINUTE = 60_000


def click(driver: TestDriver, user: str, at: int, page: str = "/") -> None:
    driver.pipe(INPUT, {"user": user, "timestamp": T0 + at, "page": page}, key=user, timestamp=T0 + at)


def sessions(driver: TestDriver) -> list[tuple[str, dict[str, Any], int]]:
    """The fired sessions as (user, session, timestamp), in event-time order of their ends."""
    return sorted(((r.key, r.value, r.timestamp) for r in driver.output(OUTPUT)),
                  key=lambda s: (s[2], s[0]))


def test_sessions_close_after_thirty_minutes_without_a_click() -> None:
    driver = TestDriver(build_pipeline())
    click(driver, "ann", 0)
    click(driver, "bob", 5 * MINUTE)
    click(driver, "ann", 10 * MINUTE)
    click(driver, "ann", 25 * MINUTE)  # 15 min after the last one: the same session
    click(driver, "bob", 40 * MINUTE)  # 35 min after: a new session
    assert sessions(driver) == [  # watermark 39:55 passed bob's first session [0:05, 0:35)
        ("bob", {"start": T0 + 5 * MINUTE, "end": T0 + 35 * MINUTE,
                 "value": {"clicks": 1, "duration_ms": 0}}, T0 + 35 * MINUTE - 1),
    ]
    click(driver, "zed", 5 * 60 * MINUTE)  # far ahead: every earlier session fires
    assert sessions(driver)[1:] == [
        ("ann", {"start": T0, "end": T0 + 55 * MINUTE, "value": {"clicks": 3, "duration_ms": 25 * MINUTE}},
         T0 + 55 * MINUTE - 1),
        ("bob", {"start": T0 + 40 * MINUTE, "end": T0 + 70 * MINUTE,
                 "value": {"clicks": 1, "duration_ms": 0}}, T0 + 70 * MINUTE - 1),
    ]


def test_a_click_that_bridges_two_sessions_merges_them() -> None:
    driver = TestDriver(build_pipeline())
    click(driver, "carl", 0)
    click(driver, "carl", 30 * MINUTE + 2 * SECOND)  # 2 s more than the gap: two sessions so far
    click(driver, "carl", 30 * MINUTE - 2 * SECOND)  # out of order, within 30 min of both: one session
    click(driver, "zed", 5 * 60 * MINUTE)
    assert sessions(driver) == [
        ("carl", {"start": T0, "end": T0 + 60 * MINUTE + 2 * SECOND,
                  "value": {"clicks": 3, "duration_ms": 30 * MINUTE + 2 * SECOND}},
         T0 + 60 * MINUTE + 2 * SECOND - 1),
    ]


def test_a_click_after_its_session_fired_goes_to_the_late_topic() -> None:
    driver = TestDriver(build_pipeline())
    click(driver, "ann", 0)
    click(driver, "zed", 60 * MINUTE)
    click(driver, "ann", 10 * MINUTE, "/late")
    assert [(r.key, r.value) for r in driver.output(LATE)] == [
        ("ann", {"user": "ann", "timestamp": T0 + 10 * MINUTE, "page": "/late"}),
    ]
    assert [s[1]["value"] for s in sessions(driver)] == [{"clicks": 1, "duration_ms": 0}]


def test_a_click_that_does_not_decode_goes_to_the_dead_letter_topic() -> None:
    driver = TestDriver(build_pipeline())
    driver.pipe_raw(INPUT, b"\xff not avro", key=b"ann", timestamp=T0)
    click(driver, "ann", 0)
    click(driver, "zed", 60 * MINUTE)
    [dead] = driver.dead_letters()
    assert (dead.key(), dead.value()) == (b"ann", b"\xff not avro")
    assert [(s[0], s[1]["value"]) for s in sessions(driver)] == [("ann", {"clicks": 1, "duration_ms": 0})]
