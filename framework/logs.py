"""Log output of the ``fw`` commands: text lines (the default) or one JSON object per line.

``FW_LOG_FORMAT`` picks the format: ``text`` (``<time> <LEVEL> <logger> <message>``) or
``json``, for log collectors::

    {"ts": "2025-11-23T12:00:00.123Z", "level": "ERROR", "logger": "framework.task",
     "message": "dead letter: readings[2]@1041 in step 'source-0': ...", "pid": 4242,
     "topic": "readings", "partition": 2, "offset": 1041, "key": "s-7", "step": "source-0"}

A JSON line holds ``ts`` (UTC, milliseconds), ``level``, ``logger``, ``message``, ``pid``,
``exc`` (the traceback, when there is one) and every field the call passed with
``extra=``; a value JSON cannot hold is written as its ``str()``. The text format prints
the message alone, as it always has.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from framework.errors import ConfigError, RecordCoordinates

__all__ = [
    "ENV_VAR", "FORMATS", "TEXT_FORMAT", "JsonFormatter", "configure_logging", "record_fields"
]

ENV_VAR = "FW_LOG_FORMAT"
FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
KEY_CHARS = 200  # a record key in a log line: at most this many characters

# A LogRecord's own attributes: whatever else a record carries came through ``extra=``.
_RECORD_ATTRS = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        out: dict[str, Any] = {"ts": ts.replace("+00:00", "Z"), "level": record.levelname,
                               "logger": record.name, "message": record.getMessage(),
                               "pid": record.process}
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text
        for name, value in vars(record).items():
            if name not in _RECORD_ATTRS and name not in out:
                out[name] = value
        try:
            return json.dumps(out, default=str, allow_nan=False)
        except (TypeError, ValueError):  # keys that are not text, NaN, a value that holds itself
            return json.dumps({name: _encodable(value) for name, value in out.items()}, default=str)


def _encodable(value: Any) -> Any:
    try:
        json.dumps(value, default=str, allow_nan=False)
    except (TypeError, ValueError):
        return str(value)
    return value


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler ``configure_logging`` installs (and replaces when called again)."""


def debugging() -> bool:
    """True with ``FW_DEBUG`` set (not 0) or the root logger at DEBUG (``--log-level DEBUG``):
    ``fw`` then prints an error's traceback beside its one line."""
    flag = os.environ.get("FW_DEBUG", "").strip().lower()
    return flag not in ("", "0", "false", "no") or logging.getLogger().getEffectiveLevel() <= logging.DEBUG


def configure_logging(level: str, fmt: str | None = None) -> None:
    """Send log records at ``level`` and above to stderr in format ``fmt`` (default:
    ``$FW_LOG_FORMAT``, else ``text``). Calling it again replaces what it set up before."""
    chosen = (os.environ.get(ENV_VAR, "") if fmt is None else fmt).strip().lower() or "text"
    if chosen not in FORMATS:
        given = os.environ.get(ENV_VAR) if fmt is None else fmt
        raise ConfigError(f"{ENV_VAR}={given!r} is not a log format; "
                          f"use one of {', '.join(FORMATS)}")
    numeric = logging.getLevelName(level.strip().upper())
    if not isinstance(numeric, int):
        raise ConfigError(f"unknown log level {level!r}; "
                          "use DEBUG, INFO, WARNING, ERROR or CRITICAL")
    handler = _Handler(sys.stderr)
    handler.setFormatter(JsonFormatter() if chosen == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    json_lines = chosen == "json"  # then warnings and uncaught exceptions are JSON lines too
    logging.captureWarnings(json_lines)
    if json_lines:
        sys.excepthook, threading.excepthook = _log_uncaught, _log_thread_uncaught
    elif sys.excepthook is _log_uncaught:
        sys.excepthook, threading.excepthook = sys.__excepthook__, threading.__excepthook__


def _log_uncaught(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, exc, tb)
        return
    logging.getLogger("framework").critical("uncaught %s: %s", kind.__name__, exc,
                                            exc_info=(kind, exc, tb))


def _log_thread_uncaught(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return
    exc, name = args.exc_value, args.thread.name if args.thread is not None else "?"
    logging.getLogger("framework").critical(
        "uncaught %s in thread %s: %s", args.exc_type.__name__, name, exc,
        exc_info=(args.exc_type, exc, args.exc_traceback) if exc is not None else None)


def record_fields(coordinates: RecordCoordinates | None, step: str | None = None, *,
                  key: bytes | None = None) -> dict[str, Any]:
    """A record's coordinates as ``extra=`` fields of a log call: ``topic``, ``partition``,
    ``offset``, ``timestamp``, ``origin`` (when it crossed a repartition topic), ``key`` as
    text (at most 200 characters) and ``step``. ``key`` stands in for the coordinates' key
    when there are none (a timer's)."""
    fields: dict[str, Any] = {}
    if coordinates is not None:
        fields.update(topic=coordinates.topic, partition=coordinates.partition,
                      offset=coordinates.offset, timestamp=coordinates.timestamp)
        if coordinates.origin is not None:
            fields["origin"] = coordinates.origin
        key = coordinates.key if key is None else key
    fields["key"] = None if key is None else key.decode("utf-8", errors="replace")[:KEY_CHARS]
    fields["step"] = step
    return fields
