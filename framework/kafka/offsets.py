"""Offset ranges and positions of topics, from what users write on a command line (``fw
replay``, ``fw archive``; ``fw topics tail --from`` and ``fw group reset --to`` take one
position per partition): ``earliest``, ``latest``, ``committed`` (a consumer group's committed
offsets), a timestamp (ISO 8601, or milliseconds since the epoch; the first offset at or
after it, per partition, as the broker's offsets-for-times says), or explicit
``topic:partition:offset`` lists (partitions not named start at ``earliest`` / end at
``latest``). Every range is checked against the log as it is now; a wrong one is a
``ConfigError`` that says what is wrong and how to fix it.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from framework.errors import ConfigError, EnvironmentProblem, RuntimeProblem
from framework.kafka.clients import each_answered, retry_while_not_ready, watermarks
from framework.kafka.logs import CLIENT_LOG

Ranges = dict[str, dict[int, list[int]]]  # topic -> partition -> [start, end)
_EXPLICIT = re.compile(r"^[A-Za-z0-9._-]+:\d+:\d+(,[A-Za-z0-9._-]+:\d+:\d+)*$")


class _Log:
    """What the broker says about the topics: partitions, first and next offsets."""

    def __init__(self, settings: Mapping[str, Any], topics: Iterable[str], group: str, timeout_s: float) -> None:
        self.settings, self.group, self.timeout_s = settings, group, timeout_s
        self.consumer = Consumer({"logger": CLIENT_LOG, **settings, "group.id": f"fw-offsets-{uuid.uuid4().hex[:8]}",
                                  "enable.auto.commit": False, "isolation.level": "read_committed"})
        self.partitions: dict[str, list[int]] = {}
        try:
            md = self.consumer.list_topics(timeout=timeout_s)
        except KafkaException as exc:
            raise EnvironmentProblem(f"cannot reach the Kafka cluster at {settings.get('bootstrap.servers')}: {exc}. "
                              "Fix: start it (fw broker start) or set FW_BOOTSTRAP_SERVERS") from None
        for topic in topics:
            info = md.topics.get(topic)
            if info is None or info.error is not None or not info.partitions:
                known = sorted(t for t in md.topics if not t.startswith("__"))[:20]
                raise RuntimeProblem(f"topic {topic!r} does not exist on {settings.get('bootstrap.servers')}. "
                                  f"Fix: check the name (topics there include {', '.join(known)}) or the "
                                  "cluster (FW_BOOTSTRAP_SERVERS)")
            self.partitions[topic] = sorted(info.partitions)
        # A broker that has just started, or a topic just made, answers "not leader" for a
        # moment: every question below is asked again until it answers (``retry_while_not_ready``)
        self.bounds = {(t, p): self._bounds(TopicPartition(t, p)) for t, parts in self.partitions.items() for p in parts}

    def _ask(self, call: Callable[[float], Any], what: str) -> Any:
        return retry_while_not_ready(call, self.timeout_s, what)

    def _bounds(self, tp: TopicPartition) -> tuple[int, int]:
        return watermarks(self.consumer, tp, self.timeout_s, f"{tp.topic}[{tp.partition}]")

    def committed(self) -> dict[tuple[str, int], int]:
        reader = Consumer({"logger": CLIENT_LOG, **self.settings, "group.id": self.group, "enable.auto.commit": False})
        try:
            tps = [TopicPartition(t, p) for t, parts in self.partitions.items() for p in parts]
            found = self._ask(lambda left: each_answered(reader.committed(tps, timeout=left)),
                              f"the offsets of group {self.group}")
            return {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}
        finally:
            reader.close()

    def at_time(self, ms: int) -> dict[tuple[str, int], int]:
        tps = [TopicPartition(t, p, ms) for t, parts in self.partitions.items() for p in parts]
        found = self._ask(lambda left: each_answered(self.consumer.offsets_for_times(tps, timeout=left)),
                          f"the offsets at {ms}")
        return {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else self.bounds[(tp.topic, tp.partition)][1])
                for tp in found}

    def close(self) -> None:
        self.consumer.close()


def parse_time(spec: str) -> int | None:
    """Milliseconds since the epoch for an ISO 8601 time or an integer; None otherwise. A time
    without a zone is UTC."""
    if spec.isdigit():
        return int(spec)
    try:
        # fromisoformat takes a Z after a time but not after a date alone ("2026-01-01Z")
        when = datetime.fromisoformat(spec.replace("Z", "+00:00"))  # noqa: FURB162 - also "2026-01-01Z"
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def explicit_offsets(spec: str) -> dict[tuple[str, int], int] | None:
    """The partitions and offsets of a ``topic:partition:offset[,...]`` spec; None for any
    other spec (earliest, latest, committed, a time)."""
    if not _EXPLICIT.match(spec):
        return None
    out = {}
    for item in spec.split(","):
        topic, part, offset = item.rsplit(":", 2)
        out[(topic, int(part))] = int(offset)
    return out


def _positions(log: _Log, spec: str, option: str, default: int) -> dict[tuple[str, int], int]:
    """One end of the ranges: ``default`` 0 = first offsets, 1 = next offsets."""
    bounds = log.bounds
    if spec == "earliest":
        return {tp: b[0] for tp, b in bounds.items()}
    if spec == "latest":
        return {tp: b[1] for tp, b in bounds.items()}
    if spec == "committed":
        committed = log.committed()
        return {tp: committed.get(tp, b[0]) for tp, b in bounds.items()}
    named = explicit_offsets(spec)
    if named is not None:
        out = {tp: b[default] for tp, b in bounds.items()}
        for (topic, part), offset in named.items():
            if (topic, part) not in bounds:
                raise ConfigError(f"{option} {topic}:{part}:{offset}: {topic}[{part}] is not a partition of the "
                                  f"topics ({', '.join(f'{t}[{p}]' for t, p in sorted(bounds))})")
            out[(topic, part)] = offset
        return out
    ms = parse_time(spec)
    if ms is None:
        raise ConfigError(f"{option} {spec!r} is not earliest, latest, committed, a time (ISO 8601 or "
                          "milliseconds since the epoch) or topic:partition:offset[,...]")
    return log.at_time(ms)


def resolve_ranges(settings: Mapping[str, Any], topics: Iterable[str], start: str, end: str, *, group: str,
                   timeout_s: float = 30.0) -> Ranges:
    """``[start, end)`` per partition of each topic; a ``ConfigError`` naming the partition,
    the offsets and the fix when a range starts before the log (records deleted by retention),
    ends past it, or ends before it starts."""
    log = _Log(settings, topics, group, timeout_s)
    try:
        starts = _positions(log, start, "--from", 0)
        ends = _positions(log, end, "--to", 1)
    finally:
        log.close()
    out: Ranges = {}
    for (topic, p), (low, high) in sorted(log.bounds.items()):
        s, e = starts[(topic, p)], ends[(topic, p)]
        where = f"{topic}[{p}]"
        if s < low:
            raise RuntimeProblem(f"{where}: --from offset {s} is before the first offset still in the log, {low} (the "
                              f"records before it were deleted): start at {low} or later (--from earliest)")
        if e > high:
            raise RuntimeProblem(f"{where}: --to offset {e} is past the end of the log, {high}: end at {high} or "
                              "before (--to latest)")
        if s > e:
            raise ConfigError(f"{where}: --from offset {s} is after --to offset {e}")
        out.setdefault(topic, {})[p] = [s, e]
    return out


def resolve_positions(settings: Mapping[str, Any], topics: Iterable[str], spec: str, *, option: str, group: str,
                      timeout_s: float = 30.0) -> dict[tuple[str, int], int]:
    """One position per partition of ``topics`` for ``spec`` (as ``--from`` reads it: partitions
    an explicit spec does not name are at their first offset); a ``ConfigError`` naming
    ``option``, the partition and the fix when a position lies outside the log."""
    log = _Log(settings, topics, group, timeout_s)
    try:
        positions = _positions(log, spec, option, 0)
    finally:
        log.close()
    for (topic, p), (low, high) in sorted(log.bounds.items()):
        at = positions[(topic, p)]
        if not low <= at <= high:
            raise RuntimeProblem(f"{topic}[{p}]: {option} offset {at} is outside the log, which holds offsets {low} to "
                              f"{high} (the next one): choose one in that range ({option} earliest or latest)")
    return positions
