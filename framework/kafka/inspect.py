"""What the operations commands (``fw topics``, ``fw group``) ask a cluster: topics, their
partitions, offsets and configuration, consumer groups and their members, and a plain
read_committed reader of records at chosen offsets.

Every call that cannot reach the cluster raises ``EnvironmentProblem`` naming the bootstrap
address and how to start a broker; an unknown topic or group is a ``ConfigError`` naming
close matches. Nothing here joins a consumer group or commits offsets.
"""

from __future__ import annotations

import difflib
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import ConfigResource, ConfigSource, NewTopic, ResourceType

from framework.errors import KafkaClientError, RuntimeProblem
from framework.kafka.admin import (
    TopicSpec,
    admin_client,
    ensure_topics,
    group_ids,
    topic_partitions,
)
from framework.kafka.clients import watermarks
from framework.kafka.connect import probe
from framework.kafka.logs import CLIENT_LOG

TP = tuple[str, int]
_INTERNAL_PREFIX = "__"  # the broker's own topics (__consumer_offsets, __transaction_state)


@dataclass(frozen=True)
class TopicInfo:
    """A topic in a listing: partitions and replication factor (of partition 0)."""

    name: str
    partitions: int
    replication: int


@dataclass(frozen=True)
class PartitionInfo:
    """One partition: its leader broker, replicas and in-sync replicas (broker ids), and its
    first and next offsets (``end``: the next offset a read_committed reader can reach)."""

    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    start: int
    end: int


@dataclass(frozen=True)
class TopicDetail:
    name: str
    topic_id: str
    partitions: list[PartitionInfo]
    config: dict[str, str] = field(default_factory=dict)  # overrides only, not broker defaults


@dataclass(frozen=True)
class Member:
    """A consumer-group member and the partitions assigned to it now."""

    client_id: str
    host: str
    member_id: str
    assignment: list[TP]


@dataclass(frozen=True)
class GroupInfo:
    group: str
    state: str  # Stable, Empty, PreparingRebalance, Dead, ...
    members: list[Member]


def close_matches(name: str, candidates: Iterable[str]) -> str:
    """``did you mean a, b?`` for names near ``name``, or a few of ``candidates``."""
    pool = sorted(candidates)
    near = difflib.get_close_matches(name, pool, n=3, cutoff=0.5)
    if near:
        return f"did you mean {', '.join(near)}?"
    return f"known: {', '.join(pool[:10])}{', ...' if len(pool) > 10 else ''}" if pool else "there are none"


class Cluster:
    """One AdminClient (and, for offsets, one consumer) on the cluster at ``settings``.

    The constructor asks for metadata once: an unreachable cluster fails here, in one line.
    """

    def __init__(self, settings: Mapping[str, Any], timeout_s: float = 10.0) -> None:
        self.settings, self.timeout_s = dict(settings), timeout_s
        self.bootstrap = self.settings.get("bootstrap.servers", "?")
        probe(self.settings, min(timeout_s, 6.0))  # unreachable, or the login refused: one line
        self.admin = admin_client({**self.settings, "socket.connection.setup.timeout.ms": 3000})
        self._consumer: Consumer | None = None

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    # -- topics ----------------------------------------------------------------------------

    def topics(self, include_broker_topics: bool = False) -> list[TopicInfo]:
        md = self.admin.list_topics(timeout=self.timeout_s)
        out = []
        for name, info in sorted(md.topics.items()):
            if info.error is not None or (name.startswith(_INTERNAL_PREFIX) and not include_broker_topics):
                continue
            first = info.partitions.get(0)
            out.append(TopicInfo(name, len(info.partitions), len(first.replicas) if first else 0))
        return out

    def partitions(self, topic: str) -> list[int]:
        """The partitions of ``topic``; a ``RuntimeProblem`` with close matches among every
        topic of the cluster when it does not exist."""
        found = self.topic_partitions(topic)
        if found is None:
            md = self.admin.list_topics(timeout=self.timeout_s)
            hint = close_matches(topic, [t for t in md.topics if not t.startswith(_INTERNAL_PREFIX)])
            raise RuntimeProblem(f"topic {topic!r} does not exist on {self.bootstrap}: {hint} (fw topics list "
                              "shows them; FW_BOOTSTRAP_SERVERS names the cluster)")
        return found

    def topic_partitions(self, topic: str) -> list[int] | None:
        """The partitions of ``topic``, None when it does not exist."""
        info = self.admin.list_topics(timeout=self.timeout_s).topics.get(topic)  # all: asking for one may create it
        if info is None or info.error is not None or not info.partitions:
            return None
        return sorted(info.partitions)

    def offsets(self, topic: str) -> dict[int, tuple[int, int]]:
        """First and next (read_committed) offset of every partition of ``topic``."""
        consumer = self._offsets_consumer()

        def bounds(p: int) -> tuple[int, int]:
            # a partition created a moment ago may have no leader yet: asked again until it has
            return watermarks(consumer, TopicPartition(topic, p), self.timeout_s, f"{topic}[{p}]")

        return {p: bounds(p) for p in self.partitions(topic)}

    def describe(self, topic: str) -> TopicDetail:
        bounds = self.offsets(topic)
        md = self.admin.list_topics(topic, timeout=self.timeout_s).topics[topic]
        parts = [PartitionInfo(p, md.partitions[p].leader, list(md.partitions[p].replicas),
                               list(md.partitions[p].isrs), *bounds[p]) for p in sorted(bounds)]
        return TopicDetail(topic, self._topic_id(topic), parts, self.overrides(topic))

    def _topic_id(self, topic: str) -> str:
        future = self.admin.describe_topics(TopicCollection([topic]), request_timeout=self.timeout_s)[topic]
        return str(future.result().topic_id)

    def overrides(self, topic: str) -> dict[str, str]:
        """The configuration ``topic`` was given (its dynamic topic configs), not the defaults."""
        resource = ConfigResource(ResourceType.TOPIC, topic)
        entries = self.admin.describe_configs([resource], request_timeout=self.timeout_s)[resource].result()
        return {name: str(e.value) for name, e in sorted(entries.items())
                if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}

    def create(self, topic: str, partitions: int, replication: int, config: Mapping[str, str]) -> None:
        """Create ``topic``; a ``ConfigError`` when it exists or the broker refuses the request."""
        futures = self.admin.create_topics([NewTopic(topic, partitions, replication, config=dict(config))],
                                           operation_timeout=self.timeout_s, request_timeout=self.timeout_s)
        try:
            futures[topic].result()
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                raise RuntimeProblem(f"topic {topic!r} exists already with {len(self.partitions(topic))} partitions "
                                  "(fw topics describe shows it)") from None
            raise RuntimeProblem(f"the broker refused to create {topic!r}: {err.str()}") from None
        ensure_topics(self.admin, [TopicSpec(topic, partitions, config)])  # waits until its metadata is visible

    def _offsets_consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer({"logger": CLIENT_LOG, **self.settings, "group.id": f"fw-inspect-{uuid.uuid4().hex[:8]}",
                                       "enable.auto.commit": False, "isolation.level": "read_committed"})
        return self._consumer

    # -- groups ----------------------------------------------------------------------------

    def groups(self) -> list[str]:
        return group_ids(self.admin, self.timeout_s)

    def group(self, group: str) -> GroupInfo:
        """The group's state and members; ``Dead`` with no members when it is unknown."""
        future = self.admin.describe_consumer_groups([group], request_timeout=self.timeout_s)[group]
        try:
            return _group_info(future.result())
        except KafkaException as exc:
            raise KafkaClientError(f"cannot describe consumer group {group!r}: {exc}") from None

    def running_groups(self) -> list[GroupInfo]:
        """Every consumer group that has members now, described in one request."""
        ids = self.groups()
        if not ids:
            return []
        out = []
        for future in self.admin.describe_consumer_groups(ids, request_timeout=self.timeout_s).values():
            try:
                info = _group_info(future.result())
            except KafkaException:
                continue  # deleted since it was listed: nobody runs in it
            if info.members:
                out.append(info)
        return out

    def committed(self, group: str) -> dict[TP, int]:
        """Every committed offset of ``group`` (partitions without one are left out)."""
        request = [ConsumerGroupTopicPartitions(group)]
        future = self.admin.list_consumer_group_offsets(request, request_timeout=self.timeout_s)[group]
        try:
            result = future.result()
        except KafkaException as exc:
            raise KafkaClientError(f"cannot read the offsets of consumer group {group!r}: {exc}") from None
        return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or [] if tp.offset >= 0}

    def require_group(self, group: str) -> GroupInfo:
        """``group`` as ``group`` says, or a ``ConfigError`` with close matches when the cluster
        knows nothing of it (no members, no committed offsets)."""
        info = self.group(group)
        if info.members or self.committed(group):
            return info
        raise RuntimeProblem(f"consumer group {group!r} is unknown on {self.bootstrap} (no members, no committed "
                          f"offsets): {close_matches(group, self.groups())}")


def _group_info(desc: Any) -> GroupInfo:
    members = [Member(m.client_id, m.host, m.member_id,
                      sorted((tp.topic, tp.partition) for tp in (m.assignment.topic_partitions or [])))
               for m in desc.members]
    return GroupInfo(desc.group_id, str(desc.state.name).title().replace("_", ""), members)


@dataclass(frozen=True)
class ReadRecord:
    """A record as read: where it is, its timestamp (ms) and its bytes."""

    topic: str
    partition: int
    offset: int
    timestamp: int | None
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


class TopicReader:
    """Reads partitions from given offsets, committed records only (read_committed), without
    a group; reports each partition reaching its end (the end as of when it got there)."""

    def __init__(self, settings: Mapping[str, Any], positions: Mapping[TP, int]) -> None:
        self._c = Consumer({"logger": CLIENT_LOG, **settings, "group.id": f"fw-tail-{uuid.uuid4().hex[:8]}",
                            "enable.auto.commit": False, "isolation.level": "read_committed",
                            "enable.partition.eof": True})
        self._c.assign([TopicPartition(t, p, o) for (t, p), o in sorted(positions.items())])

    def read(self, timeout_s: float) -> tuple[list[ReadRecord], set[TP]]:
        """The records that arrive within ``timeout_s``, and the partitions that reached their
        end meanwhile (the end then: records may have been written since)."""
        records: list[ReadRecord] = []
        at_end: set[TP] = set()
        for msg in self._c.consume(500, timeout_s):
            err = msg.error()
            tp = (str(msg.topic()), int(msg.partition() or 0))
            if err is None:
                ts_type, ts = msg.timestamp()
                headers = [(k, v if isinstance(v, bytes) or v is None else str(v).encode())
                           for k, v in cast(list[tuple[str, Any]], msg.headers() or [])]
                records.append(ReadRecord(tp[0], tp[1], int(msg.offset() or 0), ts if ts_type else None,
                                          msg.key(), msg.value(), headers))
            elif err.code() == KafkaError._PARTITION_EOF:
                at_end.add(tp)
            elif err.fatal() or err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise KafkaClientError(f"reading {tp[0]}[{tp[1]}] failed: {err.str()}")
            # other errors are transient: the client retries them
        return records, at_end

    def close(self) -> None:
        self._c.close()


def read_whole(settings: Mapping[str, Any], topic: str, poll_s: float = 0.5) -> list[ReadRecord]:
    """Every committed record of ``topic`` up to its ends now, by partition and offset (none
    when the topic does not exist): a small topic such as a ledger or a list."""
    parts = topic_partitions(admin_client(settings), [topic]).get(topic)
    if not parts:
        return []
    reader = TopicReader(settings, {(topic, p): 0 for p in range(parts)})  # 0: the first offset there is
    out: list[ReadRecord] = []
    at_end: set[TP] = set()
    try:
        while len(at_end) < parts:
            records, ended = reader.read(poll_s)
            out.extend(records)
            at_end |= ended
    finally:
        reader.close()
    return sorted(out, key=lambda r: (r.partition, r.offset))
