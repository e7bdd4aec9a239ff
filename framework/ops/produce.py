"""``fw produce``: records from the command line, a file or stdin, encoded, then written.

Encoding, by the first that applies:

- ``--service module:pipeline``: the serdes the pipeline gives the topic (one of its sources,
  sinks or late topics: JSON, Avro single-object, Avro with a schema registry, strings...);
- ``--schema NAME``: values in the Avro single-object encoding of schema ``NAME`` (what
  ``fw topics tail --schema`` decodes), keys raw;
- raw: a text key or value as its UTF-8 bytes, ``{"base64": ...}`` as those bytes, any other
  JSON value (an object, a number) as its compact JSON.

An input line is one JSON object, ``{"key": ..., "value": ..., "headers": {...},
"timestamp": ms}`` (every field optional; ``value`` null or absent: a tombstone); the fields
``fw topics tail --json`` adds (topic, partition, offset) are ignored, so its output can be
written again. Every line is parsed and encoded before anything is produced: one bad line
and nothing is written, each bad line one problem naming its number.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from framework.errors import ConfigError, UsageError
from framework.kafka.inspect import close_matches
from framework.ops.targets import as_bytes, user_topics
from framework.pipeline.definition import Pipeline
from framework.records import Headers
from framework.serde import AvroSerde, Serde, load_schema

Encode = Callable[[Any], bytes]
Encoded = tuple[bytes | None, bytes | None, int | None, Headers]
_FIELDS = ("key", "value", "headers", "timestamp")
_IGNORED = ("topic", "partition", "offset")  # fw topics tail --json's coordinates
_SHOWN_PROBLEMS = 20


class BadInput(UsageError):
    """Input that does not encode: ``problems`` has one line per bad record; nothing was written."""

    def __init__(self, message: str, problems: list[str]) -> None:
        super().__init__(message)
        self.problems = problems


class BadLine(ValueError):
    """What is wrong with one input line (its number is added where it is reported)."""


@dataclass(frozen=True)
class Encoder:
    """How one topic's keys and values become bytes; ``parsed``: a command-line text is JSON
    when it parses and the serde takes it (``--value 42`` for a JSON serde), else the text."""

    name: str
    key: Encode = as_bytes
    value: Encode = as_bytes
    parsed: bool = False


RAW = Encoder("raw")


def schema_encoder(schema: str) -> Encoder:
    """Values in the single-object encoding of the Avro schema ``schema``; keys raw."""
    serde = AvroSerde(load_schema(schema), encoding="single-object")
    return Encoder(serde.describe(), value=_serialize(serde), parsed=True)


def service_encoder(pipeline: Pipeline, topic: str) -> Encoder:
    """The serdes service ``pipeline`` gives ``topic``; a ``ConfigError`` naming its topics
    when it is not one a user writes (its sources, sinks, late topics)."""
    topics = user_topics(pipeline)
    if topic not in topics:
        raise ConfigError(f"topic {topic!r} is not a source, sink or late topic of service {pipeline.name!r}: "
                          f"{close_matches(topic, topics)}")
    t = topics[topic]
    return Encoder(f"serdes of {topic}", _serialize(t.key_serde.bind(topic, True)),
                   _serialize(t.value_serde.bind(topic, False)), parsed=True)


def _serialize(serde: Serde) -> Encode:
    name = serde.describe() if isinstance(serde, AvroSerde) else repr(serde)

    def encode(obj: Any) -> bytes:
        try:
            return serde.serialize(obj)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            raise ValueError(f"{name} does not take {_short(obj)}: {_reason(exc)}") from None

    return encode


def _short(obj: Any) -> str:
    text = json.dumps(obj, ensure_ascii=False, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."


def _reason(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


# -- records from arguments ---------------------------------------------------------------------

def argument_record(encoder: Encoder, key: str | None, value: str | None, headers: Iterable[str],
                    timestamp: int | None) -> Encoded:
    """The record of ``--key``/``--value`` (``value`` None: a tombstone), ``--header k=v`` and
    ``--timestamp``; a ``BadInput`` when a serde refuses it."""
    try:
        k = None if key is None else _argument(encoder, encoder.key, key)
        v = None if value is None else _argument(encoder, encoder.value, value)
    except ValueError as exc:
        raise BadInput("nothing was written", [f"the arguments: {exc}"]) from None
    return k, v, timestamp, header_options(headers)


def _argument(encoder: Encoder, encode: Encode, text: str) -> bytes:
    if not encoder.parsed:
        return encode(text)
    try:
        parsed = json.loads(text)
    except ValueError:
        return encode(text)
    try:
        return encode(parsed)
    except ValueError as first:
        try:
            return encode(text)  # "42" to a string serde
        except ValueError:
            raise first from None


def header_options(pairs: Iterable[str]) -> list[tuple[str, bytes]]:
    """``--header k=v`` options as record headers, in order (a name may repeat)."""
    out = []
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ConfigError(f"--header {pair!r} is not NAME=VALUE (e.g. --header source=backfill)")
        out.append((name, value.encode()))
    return out


# -- records from JSON lines --------------------------------------------------------------------

def read_lines(encoder: Encoder, lines: Iterable[str], source: str, *, headers: Iterable[str] = (),
               timestamp: int | None = None) -> list[Encoded]:
    """Every JSON line of ``lines`` encoded (blank lines skipped); ``headers`` come before each
    line's own, ``timestamp`` stands in for a line without one. A ``BadInput`` listing every
    bad line as ``source:N: what is wrong`` when any is bad."""
    common = header_options(headers)
    out: list[Encoded] = []
    problems: list[str] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(_line_record(encoder, line, common, timestamp))
        except ValueError as exc:
            problems.append(f"{source}:{n}: {exc}")
    if problems:
        shown = problems[:_SHOWN_PROBLEMS]
        if len(problems) > len(shown):
            shown.append(f"... and {len(problems) - len(shown)} more bad lines")
        raise BadInput(f"nothing was written: {len(problems)} of {len(out) + len(problems)} records of {source} "
                       "are bad (the lines above)", shown)
    return out


def _line_record(encoder: Encoder, line: str, common: list[tuple[str, bytes]],
                 timestamp: int | None) -> Encoded:
    try:
        doc = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(doc, dict):
        raise BadLine(f"not a JSON object with {', '.join(_FIELDS)}, but {_short(doc)}")
    unknown = [f for f in doc if f not in _FIELDS and f not in _IGNORED]
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r}: {close_matches(unknown[0], _FIELDS)}")
    key = None if doc.get("key") is None else _side("key", encoder.key, doc["key"])
    value = None if doc.get("value") is None else _side("value", encoder.value, doc["value"])
    return key, value, _timestamp(doc.get("timestamp", timestamp)), [*common, *_headers(doc.get("headers"))]


def _side(side: str, encode: Encode, obj: Any) -> bytes:
    try:
        return encode(obj)
    except ValueError as exc:
        raise ValueError(f"the {side}: {exc}") from None


def _timestamp(ms: Any) -> int | None:
    if ms is None:
        return None
    if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
        raise ValueError(f"timestamp {_short(ms)} is not milliseconds since the epoch (an integer, 0 or more)")
    return ms


def _headers(headers: Any) -> list[tuple[str, bytes]]:
    if headers is None:
        return []
    if not isinstance(headers, Mapping):
        raise BadLine(f'headers {_short(headers)} is not an object of names and values ({{"source": "x"}})')
    return [(str(name), as_bytes(v)) for name, v in headers.items() if v is not None]
