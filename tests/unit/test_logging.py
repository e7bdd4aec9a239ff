"""framework.logs: the text format as before, JSON lines with FW_LOG_FORMAT=json, and the
dead-letter lines' record coordinates as fields."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from framework import Pipeline, ProcessFunction, TestDriver, Topic, WatermarkStrategy
from framework.errors import ConfigError, RecordCoordinates
from framework.logs import configure_logging, record_fields

ROOT = Path(__file__).resolve().parents[2]
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (\w+) (\S+) (.*)$")
STANDARD = {"ts", "level", "logger", "message", "pid"}


@pytest.fixture(autouse=True)
def restore_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts without FW_LOG_FORMAT and leaves the root logger, the warnings
    capture and the exception hooks as it found them."""
    monkeypatch.delenv("FW_LOG_FORMAT", raising=False)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    hooks = sys.excepthook, threading.excepthook
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.captureWarnings(False)
    sys.excepthook, threading.excepthook = hooks


def _lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().err.splitlines()


def _json_lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    lines = _lines(capsys)
    parsed = [json.loads(line) for line in lines]
    assert all(isinstance(p, dict) for p in parsed), lines
    return parsed


# -- the two formats -------------------------------------------------------------------------


def test_text_is_the_format_fw_run_always_printed_without_the_extra_fields(
        capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info")
    log = logging.getLogger("framework.test")
    log.debug("not shown")
    log.info("consumed %d records from %s", 3, "readings",
             extra={"topic": "readings", "partition": 2})
    [line] = _lines(capsys)
    match = TEXT_LINE.match(line)
    assert match is not None, line
    assert match.groups() == ("INFO", "framework.test", "consumed 3 records from readings")


def test_json_is_one_object_per_line_with_the_standard_fields_and_the_extras(
        capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("DEBUG", "json")
    before = datetime.now(UTC)
    log = logging.getLogger("framework.test")
    log.debug("dead letter: %s\nsecond line", "readings[2]@41",
              extra={"topic": "readings", "partition": 2, "offset": 41, "key": "s-7",
                     "step": "source-0", "service": "sensors", "instance": "0"})
    log.warning("plain")
    first, second = _json_lines(capsys)
    assert set(first) == STANDARD | {"topic", "partition", "offset", "key", "step", "service",
                                     "instance"}
    assert [first[k] for k in ("level", "logger", "pid")] == ["DEBUG", "framework.test",
                                                              os.getpid()]
    assert first["message"] == "dead letter: readings[2]@41\nsecond line"
    coordinates = [first[name] for name in ("topic", "partition", "offset", "key", "step")]
    assert coordinates == ["readings", 2, 41, "s-7", "source-0"]
    assert (first["service"], first["instance"]) == ("sensors", "0")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["ts"]), first["ts"]
    ts = datetime.fromisoformat(first["ts"])
    assert ts.tzinfo is not None and abs((ts - before).total_seconds()) < 5
    assert set(second) == STANDARD and second["level"] == "WARNING"


def test_json_carries_the_traceback_as_exc_on_the_same_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("INFO", "json")
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("framework.test").exception("step failed", extra={"step": "parse"})
    [entry] = _json_lines(capsys)
    assert (entry["message"], entry["level"], entry["step"]) == ("step failed", "ERROR", "parse")
    assert entry["exc"].startswith("Traceback (most recent call last):")
    assert entry["exc"].rstrip().endswith("ValueError: boom")


def test_json_writes_values_it_cannot_encode_as_their_text(
        capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("INFO", "json")

    class Thing:
        def __str__(self) -> str:
            return "a thing"

    loop: list[Any] = []
    loop.append(loop)
    extra = {"raw": b"\xffk", "thing": Thing(), "at": datetime(2025, 1, 2, tzinfo=UTC),
             "ratio": float("nan"), "pairs": {(1, 2): 3}, "loop": loop,
             "n": 5, "ok": True, "none": None, "names": ["a", "b"]}
    logging.getLogger("framework.test").info("values", extra=extra)
    [entry] = _json_lines(capsys)
    assert entry["raw"] == "b'\\xffk'" and entry["thing"] == "a thing"
    assert entry["at"] == "2025-01-02 00:00:00+00:00"
    assert (entry["ratio"], entry["pairs"], entry["loop"]) == ("nan", "{(1, 2): 3}", "[[...]]")
    assert [entry[k] for k in ("n", "ok", "none", "names")] == [5, True, None, ["a", "b"]]


def test_json_keeps_the_standard_fields_when_an_extra_has_their_name(
        capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("INFO", "json")
    logging.getLogger("framework.test").info("hello", extra={"level": "fake", "ts": 0, "pid": -1})
    [entry] = _json_lines(capsys)
    assert entry["level"] == "INFO" and entry["pid"] == os.getpid() and entry["ts"] != 0


# -- choosing the format ---------------------------------------------------------------------


@pytest.mark.parametrize(("env", "is_json"), [(None, False), ("", False), ("text", False),
                                              ("json", True), ("JSON", True), (" json ", True)])
def test_fw_log_format_picks_the_format(capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch,
                                        env: str | None, is_json: bool) -> None:
    if env is not None:
        monkeypatch.setenv("FW_LOG_FORMAT", env)
    configure_logging("INFO")
    logging.getLogger("framework.test").info("hello")
    [line] = _lines(capsys)
    assert line.startswith("{") == is_json, line
    if is_json:
        assert json.loads(line)["message"] == "hello"
    else:
        assert line.endswith(" INFO framework.test hello"), line


def test_an_explicit_format_wins_over_the_environment(capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FW_LOG_FORMAT", "json")
    configure_logging("INFO", "text")
    logging.getLogger("framework.test").info("hello")
    [line] = _lines(capsys)
    assert TEXT_LINE.match(line), line


@pytest.mark.parametrize("value", ["xml", "logfmt", "jsonl"])
def test_a_bad_fw_log_format_is_a_one_line_config_error(monkeypatch: pytest.MonkeyPatch,
                                                        value: str) -> None:
    monkeypatch.setenv("FW_LOG_FORMAT", value)
    with pytest.raises(ConfigError) as caught:
        configure_logging("INFO")
    message = str(caught.value)
    assert "\n" not in message
    assert message == f"FW_LOG_FORMAT={value!r} is not a log format; use one of text, json"


def test_a_bad_level_is_a_one_line_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown log level 'LOUD'") as caught:
        configure_logging("LOUD")
    assert "\n" not in str(caught.value)


def test_configuring_again_replaces_the_handler_instead_of_adding_one(
        capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("INFO", "json")
    configure_logging("INFO", "text")
    configure_logging("WARNING", "json")
    log = logging.getLogger("framework.test")
    log.info("dropped")
    log.warning("once")
    assert [e["message"] for e in _json_lines(capsys)] == ["once"]


def test_json_turns_warnings_and_uncaught_exceptions_into_json_lines(
        capsys: pytest.CaptureFixture[str]) -> None:
    import warnings

    configure_logging("INFO", "json")
    warnings.warn("old setting", DeprecationWarning, stacklevel=1)
    try:
        raise RuntimeError("crashed")
    except RuntimeError as exc:
        sys.excepthook(type(exc), exc, exc.__traceback__)
    thread = threading.Thread(target=lambda: 1 / 0, name="worker")
    thread.start()
    thread.join()
    warned, crashed, in_thread = _json_lines(capsys)
    assert warned["logger"] == "py.warnings" and "old setting" in warned["message"]
    assert crashed["level"] == "CRITICAL" and "RuntimeError: crashed" in crashed["exc"]
    assert "worker" in in_thread["message"] and "ZeroDivisionError" in in_thread["exc"]
    configure_logging("INFO", "text")  # and text gives the interpreter's hooks back
    assert sys.excepthook is sys.__excepthook__
    assert threading.excepthook is threading.__excepthook__


def test_fw_run_with_a_bad_fw_log_format_says_so_in_one_line() -> None:
    env = {**os.environ, "FW_LOG_FORMAT": "yaml", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "framework.cli", "run", "services.even_odd.pipeline:pipeline"]
    done = subprocess.run(command, check=False, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2  # a bad setting: a usage error
    said = "error: FW_LOG_FORMAT='yaml' is not a log format; use one of text, json"
    assert done.stderr.strip() == said


# -- record coordinates as fields ------------------------------------------------------------


def test_record_fields_name_the_record_and_give_its_key_as_text() -> None:
    at = RecordCoordinates("readings", 3, 1041, b"s-\xff7", 1_700_000_000_000)
    assert record_fields(at, "parse") == {
        "topic": "readings", "partition": 3, "offset": 1041, "timestamp": 1_700_000_000_000,
        "key": "s-\ufffd7", "step": "parse"}
    long_key = RecordCoordinates("t", 0, 0, "é".encode() * 300)
    assert record_fields(long_key)["key"] == "é" * 200
    assert record_fields(None, "w", key=b"k") == {"key": "k", "step": "w"}
    assert record_fields(RecordCoordinates("t", 0, 5))["key"] is None


def _dead_letter_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records
            if r.name == "framework.task" and r.getMessage().startswith("dead letter")]


def test_a_dead_letter_line_carries_the_record_coordinates(
        caplog: pytest.LogCaptureFixture) -> None:
    p = Pipeline("logs")
    p.source(Topic("in")).map(lambda v: v).to(Topic("out"))
    driver = TestDriver(p)
    driver.pipe("in", {"n": 1}, key="a")
    with caplog.at_level(logging.ERROR, logger="framework.task"):
        driver.pipe_raw("in", b"\xff not json", key=b"k\xff" + b"x" * 300)
        driver.run()
    [record] = _dead_letter_records(caplog)
    names = ("topic", "partition", "offset", "step", "key", "service")
    fields = {name: getattr(record, name) for name in names}
    assert fields == {"topic": "in", "partition": 0, "offset": 1, "step": "source-0",
                      "key": "k\ufffd" + "x" * 198, "service": "logs"}
    # the message is the one the text format always printed
    assert record.getMessage().startswith(
        "dead letter: in[0]@1 in step 'source-0': cannot decode")


class FailingTimer(ProcessFunction):
    def process(self, key: Any, value: Any, ctx: Any) -> None:
        ctx.register_event_timer(100)

    def on_timer(self, timestamp: int, key: Any, ctx: Any) -> None:
        raise RuntimeError("timer broke")


def test_a_failed_timer_line_carries_its_step_key_partition_and_time(
        caplog: pytest.LogCaptureFixture) -> None:
    p = Pipeline("timers")
    source = p.source(Topic("in"), watermarks=WatermarkStrategy.monotonous())
    source.process(FailingTimer(), name="t").to(Topic("out"))
    driver = TestDriver(p)
    driver.pipe("in", {"n": 1}, key="ann", timestamp=0)
    with caplog.at_level(logging.ERROR, logger="framework.task"):
        driver.advance_watermark(1_000)
    [record] = _dead_letter_records(caplog)
    fields = [getattr(record, name) for name in ("step", "partition", "timestamp", "service")]
    assert fields == ["t", 0, 100, "timers"]
    assert "ann" in getattr(record, "key")  # noqa: B009 - an extra field
    assert not hasattr(record, "topic")
    assert not hasattr(record, "offset")
    assert record.getMessage().startswith(
        "dead letter: <no source record> in step 't': timer at 100")
