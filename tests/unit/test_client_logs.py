"""librdkafka's log lines reach Python logging once per condition, not once per retry."""

from __future__ import annotations

import logging

from framework.kafka.logs import CLIENT_LOG, Repeats


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _record(message: str, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord("framework.kafka.client", level, __file__, 1, message, (), None)


def test_a_repeated_line_passes_once_then_once_a_minute_with_the_count() -> None:
    clock = Clock()
    f = Repeats(every_s=60.0, clock=clock)
    refused = "FAIL [rdkafka#producer-1] 127.0.0.1:1/bootstrap: Connect failed: Connection refused (after {}ms)"
    passed = []
    for second in range(130):
        clock.now = float(second)
        record = _record(refused.format(second % 7))  # the durations differ: the same line still
        if f.filter(record):
            passed.append((second, record.getMessage()))
    assert [s for s, _ in passed] == [0, 60, 120]
    assert passed[1][1].endswith("(again 59 times since)") and passed[2][1].endswith("(again 59 times since)")


def test_another_line_or_level_passes_and_a_condition_that_returns_is_logged_again() -> None:
    clock = Clock()
    f = Repeats(every_s=60.0, clock=clock)
    assert f.filter(_record("broker down"))
    assert f.filter(_record("coordinator load in progress"))
    assert f.filter(_record("broker down", logging.WARNING))
    clock.now = 10.0
    assert not f.filter(_record("broker down"))
    clock.now = 200.0  # quiet for more than a minute: the condition ended and came back
    record = _record("broker down")
    assert f.filter(record) and record.getMessage() == "broker down"


def test_every_client_logs_through_the_deduplicating_logger() -> None:
    assert any(isinstance(f, Repeats) for f in CLIENT_LOG.filters)
