"""The traffic service through the TestDriver (no broker): literal inputs and outputs."""

from __future__ import annotations

from typing import Any

from framework.testing import TestDriver
from services.traffic.pipeline import ACCIDENTS, COUNTS, INPUT, LATE, build_pipeline

T0 = 1_699_999_800_000  # a 5-minute boundary
SECOND = 1_000
MINUTE = 60_000


def crossings(intersection: str, first: int, every: int, vehicles: int) -> list[tuple[str, int]]:
    """``vehicles`` crossings of ``intersection``, the first at ``first`` ms, then every ``every`` ms."""
    return [(intersection, first + i * every) for i in range(vehicles)]


def pipe(driver: TestDriver, *records: tuple[str, int]) -> None:
    for intersection, at in sorted(records, key=lambda r: r[1]):  # in time order: nothing late
        driver.pipe(INPUT, {"intersection": intersection, "timestamp": T0 + at, "vehicle": f"v{at}"},
                    key=intersection, timestamp=T0 + at)


def by_key(driver: TestDriver, topic: str) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for r in driver.output(topic):
        out.setdefault(r.key, []).append(r.value)
    return out


def test_counts_per_five_minutes_and_an_accident_on_a_sharp_drop() -> None:
    driver = TestDriver(build_pipeline())
    pipe(driver,
         *crossings("x", 0, 20 * SECOND, 12),  # 12 in [0, 5) min
         *crossings("x", 6 * MINUTE, MINUTE, 2),  # 2 in [5, 10), then none
         *crossings("y", 0, 30 * SECOND, 10),  # 10 in [0, 5)
         *crossings("y", 5 * MINUTE, 30 * SECOND, 10),  # 10 in [5, 10): a drop to half, not sharp
         ("far", 60 * MINUTE))  # moves the watermark past every window above
    assert by_key(driver, COUNTS) == {
        "x": [{"start": T0, "end": T0 + 5 * MINUTE, "value": 12},
              {"start": T0 + 5 * MINUTE, "end": T0 + 10 * MINUTE, "value": 2}],
        "y": [{"start": T0, "end": T0 + 5 * MINUTE, "value": 10},
              {"start": T0 + 5 * MINUTE, "end": T0 + 10 * MINUTE, "value": 10}],
    }
    # x's sliding windows: [-5, 5) 12, [0, 10) 14, [5, 15) 2 (< half of 14): an accident.
    # y's: [-5, 5) 10, [0, 10) 20, [5, 15) 10 (exactly half): none.
    assert by_key(driver, ACCIDENTS) == {
        "x": [{"intersection": "x", "start": T0 + 5 * MINUTE, "end": T0 + 15 * MINUTE, "vehicles": 2,
               "previous_vehicles": 14}],
    }
    assert driver.state("accidents", "y", state="previous") == 10


def test_a_drop_from_a_quiet_window_is_no_accident() -> None:
    driver = TestDriver(build_pipeline())
    pipe(driver, *crossings("q", 0, 30 * SECOND, 9), ("q", 6 * MINUTE), ("far", 60 * MINUTE))
    # q's sliding windows: [-5, 5) 9, [0, 10) 10, [5, 15) 1: 10 is the minimum, so this one alerts...
    assert [a["previous_vehicles"] for a in by_key(driver, ACCIDENTS)["q"]] == [10]
    driver2 = TestDriver(build_pipeline())
    pipe(driver2, *crossings("q", 0, 30 * SECOND, 8), ("q", 6 * MINUTE), ("far", 60 * MINUTE))
    assert by_key(driver2, ACCIDENTS) == {}  # ...and with 9 before the drop, none does


def test_a_crossing_after_its_window_fired_goes_to_the_late_topic() -> None:
    driver = TestDriver(build_pipeline())
    pipe(driver, ("x", 0), ("far", 10 * MINUTE))
    driver.pipe(INPUT, {"intersection": "x", "timestamp": T0 + MINUTE, "vehicle": "slow"}, key="x",
                timestamp=T0 + MINUTE)
    assert [r.value["vehicle"] for r in driver.output(LATE)] == ["slow"]
    assert by_key(driver, COUNTS)["x"] == [{"start": T0, "end": T0 + 5 * MINUTE, "value": 1}]


def test_a_crossing_that_does_not_decode_goes_to_the_dead_letter_topic() -> None:
    driver = TestDriver(build_pipeline())
    driver.pipe_raw(INPUT, b"\xff not avro", key=b"x", timestamp=T0)
    pipe(driver, ("x", 0), ("far", 10 * MINUTE))
    [dead] = driver.dead_letters()
    assert (dead.key(), dead.value()) == (b"x", b"\xff not avro")
    assert by_key(driver, COUNTS)["x"] == [{"start": T0, "end": T0 + 5 * MINUTE, "value": 1}]
