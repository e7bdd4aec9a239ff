"""``fw topics tail``: a topic's committed records, decoded.

Decoding, by the first that applies:

- ``--service module:pipeline``: the serdes the pipeline gives the topic (a source, a sink,
  a late topic), the framework's encodings for its repartition topics (the ``key_by`` key
  serde, the value encoding) and changelogs (store entries, ``framework.engine.entries``); a
  dead letter's value as its ``fw.value.encoding`` header says (JSON, text, or a source
  record's original bytes, decoded with that source topic's serdes);
- ``--schema NAME``: values with the Avro schema ``NAME`` (``load_schema``), single-object
  records by their header, others raw; keys raw;
- raw: text when the bytes are printable UTF-8, else base64.

A record that does not decode is shown with the reason and ``topic[partition]@offset``; it
never stops the tail. A dead letter (a record with the framework's ``fw.error.message``
header) also gets ``dead_letter``: the input record it came from, the repartition record it
went through, the step and the error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from framework.engine.entries import StoreLayout
from framework.errors import ConfigError, RecordCoordinates, described
from framework.headers import VALUE_ENCODING, dead_letter_value
from framework.kafka.inspect import Cluster, ReadRecord, TopicReader, close_matches
from framework.kafka.offsets import explicit_offsets, resolve_positions
from framework.ops.targets import plain, raw_bytes, user_topics
from framework.pipeline import steps as S
from framework.pipeline.definition import Pipeline
from framework.serde import AvroSerde, load_schema
from framework.serde.single_object import MARKER
from framework.serde.values import ValueCodec

Decode = Callable[[bytes], Any]
_READ_TIMEOUT_S = 0.5
DEFAULT_LAST = 10  # records a tail without --from shows


@dataclass(frozen=True)
class Decoder:
    """How to show one topic's keys and values; ``entries`` (changelogs) decodes both at once."""

    name: str
    key: Decode = raw_bytes
    value: Decode = raw_bytes
    entries: StoreLayout | None = None
    sources: Mapping[str, Decoder] | None = None  # a dead-letter topic's: the service's topics' decoders

    def decode(self, key: bytes | None, value: bytes | None) -> tuple[Any, Any]:
        if self.entries is not None and key is not None:
            return _entry(self.entries, key, value)
        k = None if key is None else _side("key", self.key, key)
        v = None if value is None else _side("value", self.value, value)
        return plain(k), plain(v)


def _entry(layout: StoreLayout, key: bytes, value: bytes | None) -> tuple[Any, Any]:
    """A changelog record as its store entry: the key is the state, record key and window (or
    map key, timer); the value is the entry's (a session store's: one per session)."""
    try:
        found = [e.as_dict() for e in layout.decode(key, value)]
    except (ValueError, IndexError) as exc:
        raise _Undecodable(f"not a store entry of the state format: {exc}") from None
    if len(found) == 1:
        value_shown = found[0].pop("value")
        return plain(found[0]), plain(value_shown)
    head = {"state": found[0]["state"], "key": found[0]["key"]} if found else {}
    return plain(head), plain([{k: v for k, v in e.items() if k not in head} for e in found])


class _Undecodable(ValueError):
    pass


def _side(side: str, decode: Decode, data: bytes) -> Any:
    try:
        return decode(data)
    except Exception as exc:  # noqa: BLE001 - a serde may raise anything on foreign bytes
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise _Undecodable(f"cannot decode the {side}: {reason}") from None


RAW = Decoder("raw")


def schema_decoder(schema: str) -> Decoder:
    """Values with the Avro schema ``schema``: in the single-object encoding when they start
    with its marker ``C3 01`` (then a record of another schema is an error), else raw."""
    parsed = load_schema(schema)
    raw, single = AvroSerde(parsed), AvroSerde(parsed, encoding="single-object")

    def value(data: bytes) -> Any:
        return (single if data[:2] == MARKER else raw).deserialize(data)

    return Decoder(f"Avro schema {schema}", value=value)


def service_decoder(pipeline: Pipeline, topic: str) -> Decoder:
    """The decoder of ``topic`` as service ``pipeline`` reads or writes it; a ``ConfigError``
    naming the service's topics when it is not one of them."""
    decoders = _service_decoders(pipeline)
    if topic not in decoders:
        raise ConfigError(f"topic {topic!r} is not a topic of service {pipeline.name!r}: "
                          f"{close_matches(topic, decoders)}")
    return decoders[topic]


def _service_decoders(pipeline: Pipeline) -> dict[str, Decoder]:
    codec = ValueCodec(pipeline.types)
    out: dict[str, Decoder] = {}
    for t in user_topics(pipeline).values():
        out[t.name] = Decoder(f"serdes of {t.name}", t.key_serde.bind(t.name, True).deserialize,
                              t.value_serde.bind(t.name, False).deserialize)
    for step in pipeline.steps.values():
        if isinstance(step, S.KeyBy):
            name = pipeline.repartition_topic(step.name)
            value = step.value_serde.bind(name, False).deserialize if step.value_serde else codec.decode
            out[name] = Decoder(f"repartition topic of {step.name}", step.key_serde.deserialize, value)
    for store in pipeline.changelogged_stores():
        out[pipeline.changelog_topic(store)] = Decoder(f"changelog of store {store}",
                                                       entries=StoreLayout(pipeline, store))
    out[pipeline.dead_letter.name] = Decoder("dead letters", sources=dict(out))
    return out


@dataclass
class TailRow:
    """A record for display: decoded key and value, or ``error`` when it did not decode (then
    ``key``/``value`` are the raw bytes, shown as such)."""

    topic: str
    partition: int
    offset: int
    timestamp: int | None
    key: Any
    value: Any
    headers: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    dead_letter: DeadLetter | None = None

    @property
    def where(self) -> str:
        return str(RecordCoordinates(self.topic, self.partition, self.offset))

    def as_dict(self) -> dict[str, Any]:
        out = {"topic": self.topic, "partition": self.partition, "offset": self.offset,
               "timestamp": self.timestamp, "key": self.key, "value": self.value, "headers": self.headers}
        if self.error is not None:
            out["error"] = f"{self.where}: {self.error}"
        if self.dead_letter is not None:
            out["dead_letter"] = asdict(self.dead_letter)
        return out


@dataclass(frozen=True)
class DeadLetter:
    """What a dead letter's headers say: the input record the user produced (``origin``,
    ``topic[partition]@offset``, or the timer), the repartition record it failed in when it
    crossed one (``through``), the step, the error (without the coordinates and the fix it
    repeats) and how its value is encoded (``fw.value.encoding``)."""

    origin: str
    through: str | None
    step: str
    error: str
    encoding: str

    def described(self) -> str:
        where = described(self.through or self.origin, self.origin)
        return f"{where} in step {self.step!r}: {self.error}" if self.step else f"{where}: {self.error}"


def dead_letter_of(headers: Mapping[str, bytes | None]) -> DeadLetter | None:
    """The framework's account of a dead letter from its headers (the last of each name);
    None when the record is not one."""
    def text(name: str) -> str | None:
        raw = headers.get(name)
        return None if raw is None else raw.decode("utf-8", "replace")

    message = text("fw.error.message")
    if message is None:
        return None
    source = [text(f"fw.source.{p}") for p in ("topic", "partition", "offset")]
    origin = [text(f"fw.origin.{p}") for p in ("topic", "partition", "offset")]
    here = f"{source[0]}[{source[1]}]@{source[2]}" if None not in source else None
    first = f"{origin[0]}[{origin[1]}]@{origin[2]}" if None not in origin else here
    if first is None:
        timer = text("fw.timer.timestamp")
        first = f"timer at {timer}" if timer is not None else "no source record"
    step = text("fw.step") or ""
    error = message.removeprefix(described(here, first) if here is not None else "<no source record>")
    if step and error.startswith(f" in step {step!r}"):
        error = error[len(f" in step {step!r}"):]
    error = error.removeprefix(": ").split(" Fix: ")[0]
    return DeadLetter(first, here if here != first else None, step, error, text(VALUE_ENCODING) or "original")


def _dead_letter_value(letter: DeadLetter, record: ReadRecord, decoder: Decoder,
                       headers: Mapping[str, bytes | None]) -> Any:
    raw = record.value
    if raw is None or letter.encoding in ("json", "repr"):
        return dead_letter_value(raw, letter.encoding)
    topic = (headers.get("fw.source.topic") or b"").decode("utf-8", "replace")
    source = (decoder.sources or {}).get(topic)
    if letter.encoding == "original" and source is not None and source.entries is None:
        with contextlib.suppress(Exception):  # it may be dead because it does not decode: shown raw
            return plain(source.value(raw))
    return raw_bytes(raw)


def row(record: ReadRecord, decoder: Decoder) -> TailRow:
    headers = {k: plain(raw_bytes(v)) if v is not None else None for k, v in record.headers}
    base = TailRow(record.topic, record.partition, record.offset, record.timestamp, None, None, headers)
    last = dict(record.headers)  # the last header of each name
    base.dead_letter = dead_letter_of(last)
    try:
        if base.dead_letter is not None:
            base.key = None if record.key is None else raw_bytes(record.key)
            base.value = _dead_letter_value(base.dead_letter, record, decoder, last)
        else:
            base.key, base.value = decoder.decode(record.key, record.value)
    except (ValueError, EOFError) as exc:
        base.key = None if record.key is None else raw_bytes(record.key)
        base.value = None if record.value is None else raw_bytes(record.value)
        base.error = str(exc)
    return base


def start_positions(settings: Mapping[str, Any], topic: str, start: str | None,
                    last: int) -> dict[tuple[str, int], int]:
    """Where each partition is read from: ``start`` (earliest, latest, a time: every
    partition; topic:p:offset[,...]: only the partitions it names) or, without it, ``last``
    offsets before each partition's end."""
    cluster = Cluster(settings)
    try:
        bounds = cluster.offsets(topic)  # also: an unknown topic fails here, with close matches
    finally:
        cluster.close()
    if start is not None:
        positions = resolve_positions(settings, [topic], start, option="--from", group="fw-tail")
        named = explicit_offsets(start)
        return positions if named is None else {tp: at for tp, at in positions.items() if tp in named}
    return {(topic, p): max(low, high - last) for p, (low, high) in bounds.items()}


def tail(settings: Mapping[str, Any], topic: str, decoder: Decoder, *, start: str | None = None,
         last: int | None = None, follow: bool = False, stopped: Callable[[], bool] = lambda: False) -> Iterator[TailRow]:
    """The committed records of ``topic``: from ``start`` to the end, or the first ``last``
    from there (each partition's in offset order); without ``start``, the last ``last``
    records (default 10) by timestamp (at most: transaction markers take offsets too). Then,
    with ``follow``, every record as it arrives, until ``stopped()`` (checked between reads,
    so within one read's timeout), the caller stops iterating, or ``start``'s ``last``
    records were shown."""
    if start is None:
        last = DEFAULT_LAST if last is None else last
    positions = start_positions(settings, topic, start, last or 0)
    reader = TopicReader(settings, positions)
    shown = 0
    try:
        first = _to_end(reader, len(positions), None if start is None else last)
        if start is None:
            first = sorted(first, key=lambda r: (r.timestamp or 0, r.partition, r.offset))[-last:] if last else []
        for record in first:
            yield row(record, decoder)
        shown = len(first)
        while follow and not stopped() and (start is None or last is None or shown < last):
            records, _ = reader.read(_READ_TIMEOUT_S)
            for record in records[:None if start is None or last is None else last - shown]:
                yield row(record, decoder)
                shown += 1
    finally:
        reader.close()


def _to_end(reader: TopicReader, partitions: int, limit: int | None) -> list[ReadRecord]:
    """Records until every partition has reported its end once, or (``limit``) the first
    ``limit`` records: records written meanwhile may come along, but a busy topic does not
    keep a tail without ``follow`` running."""
    out: list[ReadRecord] = []
    at_end: set[tuple[str, int]] = set()
    while len(at_end) < partitions and (limit is None or len(out) < limit):
        records, ended = reader.read(_READ_TIMEOUT_S)
        out.extend(records)
        at_end |= ended
    return out if limit is None else out[:limit]
