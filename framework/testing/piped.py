"""What a test pipes into the TestDriver, checked before anything is processed.

A key or value goes through the topic's serde (``pipe``) or must already be bytes
(``pipe_raw``, ``append``); a timestamp is milliseconds since the epoch or a ``datetime``.
Anything else is the test's mistake, reported as one ``UsageError`` that names the call,
the topic, the argument, what was given and what was expected, rather than the error of
whatever deep inside would first trip over it (a serde's ``TypeError``, the partitioner's
arithmetic on a ``str``).

A naive ``datetime`` (no ``tzinfo``) is read as UTC: Kafka's timestamps are UTC instants,
and a test must not pass on one machine and fail on another for its time zone.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from framework.errors import FrameworkError, UsageError
from framework.serde.base import Serde

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_SHOWN = 60  # characters of a given value's repr in a message


def _shown(obj: Any) -> str:
    text = repr(obj)
    return text if len(text) <= _SHOWN else text[:_SHOWN - 1] + "…"


def _a(obj: Any) -> str:
    """``an int``, ``a str``: the type of what was given, with its article."""
    name = type(obj).__name__
    return f"{'an' if name[0].lower() in 'aeio' else 'a'} {name}"


def _refused(call: str, topic: str, arg: str, given: Any, why: str, fix: str) -> UsageError:
    return UsageError(f"TestDriver.{call}({topic!r}, {arg}={_shown(given)}): the {arg} is {_a(given)}, {why}. "
                      f"Fix: {fix}")


def serialized(call: str, topic: str, side: str, obj: Any, serde: Serde) -> bytes:
    """``obj`` (the record's ``side``: ``key`` or ``value``) through ``serde``, the topic's."""
    try:
        return serde.serialize(obj)
    except FrameworkError:
        raise  # the serde's own (a schema registry that does not answer): already says what
    except Exception as exc:  # noqa: BLE001 - a serde refuses with any exception of its own
        raise _refused(call, topic, side, obj, f"which the {side} serde of {topic!r}, {serde!r}, cannot serialize "
                       f"({type(exc).__name__}: {exc})",
                       f"pipe a {side} that serde takes, or give the topic the serde of your {side}s: "
                       f"Topic({topic!r}, {side}_serde=...)") from None


def raw(call: str, topic: str, side: str, data: Any) -> bytes | None:
    """``data`` (the record's ``side``) as it would be on the topic: bytes, or None."""
    if data is None or type(data) is bytes:
        return data
    example = f" ({data!r}.encode())" if isinstance(data, str) and len(data) <= _SHOWN else ""
    raise _refused(call, topic, side, data, f"and {call} takes bytes or None, the {side} as it is on the topic",
                   f"pass bytes{example}, or pipe() it, which serializes it with the topic's {side} serde")


def epoch_ms(call: str, topic: str, timestamp: Any) -> int:
    """``timestamp`` in milliseconds since the epoch: an int as it is, a datetime converted (a
    naive one is UTC)."""
    if isinstance(timestamp, datetime):
        aware = timestamp if timestamp.tzinfo is not None else timestamp.replace(tzinfo=UTC)
        return (aware - _EPOCH) // _MS
    if isinstance(timestamp, int) and not isinstance(timestamp, bool):
        return timestamp
    raise _refused(call, topic, "timestamp", timestamp, "and the driver takes milliseconds since the epoch (an int) "
                   "or a datetime (a naive one is UTC)",
                   "pass timestamp=1767225600000 or timestamp=datetime(2026, 1, 1, tzinfo=UTC), say")
