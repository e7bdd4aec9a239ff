"""What ``fw doctor`` asks a cluster: whether it answers, who its brokers and controller are,
the broker settings transactions depend on, and a sample of the broker's clock.

Each call takes a ``Deadline`` and never waits past it, so an unreachable cluster costs
seconds, not librdkafka's default minutes. librdkafka's own log lines go to a silent
logger: while probing, "connection refused" is the expected answer, not news. Failures
raise ``KafkaClientError`` with librdkafka's reason; judging the facts is the caller's job
(``framework.ops.doctor``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from framework.errors import KafkaClientError
from framework.kafka.admin import TopicSpec, ensure_topics
from framework.kafka.logs import QUIET_LOG as _QUIET

TRANSACTION_SETTINGS = ("transaction.state.log.replication.factor", "transaction.state.log.min.isr")
DURABILITY_SETTINGS = ("default.replication.factor", "min.insync.replicas")  # what new topics get
CLOCK_TOPIC = "__fw_doctor"
# LogAppendTime: the broker stamps each record with its own clock when it appends it, and
# the produce response carries that stamp back. Small retention: the records are samples.
CLOCK_TOPIC_CONFIG = {"message.timestamp.type": "LogAppendTime", "retention.ms": "600000",
                      "segment.ms": "600000"}
_CLOCK_SAMPLES = 3  # the first also pays for connecting; the tightest round trip is kept


class Deadline:
    """A point in time (monotonic clock) that every call of one probe shares."""

    def __init__(self, seconds: float) -> None:
        self._at = time.monotonic() + seconds

    def left(self, cap: float) -> float:
        """Seconds to the deadline, at most ``cap``, at least a tenth of a second."""
        return max(min(self._at - time.monotonic(), cap), 0.1)


@dataclass(frozen=True)
class ClusterFacts:
    """The cluster as its metadata and the broker's configuration describe it."""

    cluster_id: str | None
    controller: str | None  # "id@host:port"
    brokers: list[str]  # "id@host:port", by id
    # TRANSACTION_SETTINGS and DURABILITY_SETTINGS of the first broker
    broker_configs: dict[str, int] = field(default_factory=dict)
    configs_error: str | None = None  # why broker_configs is empty (e.g. not authorized)


@dataclass(frozen=True)
class ClockSample:
    """One record's trip: sent and acknowledged on the local clock (ms since the epoch, as
    floats), appended on the broker's clock (its LogAppendTime)."""

    sent_ms: float
    append_ms: int
    received_ms: float


def _admin(settings: Mapping[str, Any]) -> AdminClient:
    conf: dict[str, Any] = {**settings, "socket.connection.setup.timeout.ms": 3000, "logger": _QUIET}
    return AdminClient(conf)


def _reason(exc: KafkaException) -> str:
    err = exc.args[0] if exc.args else None
    return err.str() if isinstance(err, KafkaError) else str(exc)


def cluster_facts(settings: Mapping[str, Any], deadline: Deadline) -> ClusterFacts:
    """A metadata request (which fails fast when nothing answers), then the cluster's
    description and the transaction settings of its first broker."""
    admin = _admin(settings)
    try:
        admin.list_topics(timeout=deadline.left(5.0))
        described = admin.describe_cluster(request_timeout=deadline.left(5.0)).result()
    except KafkaException as exc:
        raise KafkaClientError(_reason(exc)) from None
    nodes = sorted(described.nodes, key=lambda n: n.id)
    brokers = [f"{n.id}@{n.host}:{n.port}" for n in nodes]
    ctl = described.controller
    controller = f"{ctl.id}@{ctl.host}:{ctl.port}" if ctl is not None else None
    configs, error = _transaction_settings(admin, str(nodes[0].id), deadline) if nodes else ({}, "no brokers")
    return ClusterFacts(described.cluster_id, controller, brokers, configs, error)


def _transaction_settings(admin: AdminClient, broker: str, deadline: Deadline) -> tuple[dict[str, int], str | None]:
    resource = ConfigResource(ResourceType.BROKER, broker)
    try:
        entries = admin.describe_configs([resource], request_timeout=deadline.left(5.0))[resource].result()
    except KafkaException as exc:
        return {}, _reason(exc)
    found = {name: int(entries[name].value) for name in (*TRANSACTION_SETTINGS, *DURABILITY_SETTINGS)
             if name in entries and entries[name].value is not None}
    missing = [name for name in (*TRANSACTION_SETTINGS, *DURABILITY_SETTINGS) if name not in found]
    return found, f"broker {broker} does not report {', '.join(missing)}" if missing else None


@dataclass(frozen=True)
class TopicReplication:
    """How one topic is kept: its partitions, the fewest replicas any partition has, and
    the ``min.insync.replicas`` it takes (its own or the cluster's); None: not readable."""

    partitions: int
    replicas: int
    min_insync: int | None


def topic_replication(settings: Mapping[str, Any], topics: list[str],
                      deadline: Deadline) -> dict[str, TopicReplication | None]:
    """Each of ``topics`` as the cluster keeps it; None for one that does not exist (yet)."""
    admin = _admin(settings)
    try:
        listed = admin.list_topics(timeout=deadline.left(5.0)).topics
    except KafkaException as exc:
        raise KafkaClientError(_reason(exc)) from None
    found = {t: listed[t] for t in topics if t in listed and listed[t].error is None and listed[t].partitions}
    resources = {t: ConfigResource(ResourceType.TOPIC, t) for t in found}
    futures = admin.describe_configs(list(resources.values()), request_timeout=deadline.left(5.0)) if resources else {}
    out: dict[str, TopicReplication | None] = {}
    for topic in topics:
        info = found.get(topic)
        if info is None:
            out[topic] = None
            continue
        try:
            entry = futures[resources[topic]].result(timeout=deadline.left(5.0)).get("min.insync.replicas")
            isr = int(entry.value) if entry is not None and entry.value is not None else None
        except (KafkaException, TimeoutError):
            isr = None  # not authorized to read it, or no answer in time: the report says unknown
        out[topic] = TopicReplication(len(info.partitions), min(len(p.replicas) for p in info.partitions.values()), isr)
    return out


def clock_samples(settings: Mapping[str, Any], deadline: Deadline) -> list[ClockSample]:
    """Produce a few tiny records, one at a time, to ``CLOCK_TOPIC`` (created on first use)
    and return each one's send, append and acknowledgement times. Raises
    ``KafkaClientError`` when the topic cannot be created or does not stamp LogAppendTime."""
    try:
        ensure_topics(_admin(settings), [TopicSpec(CLOCK_TOPIC, 1, CLOCK_TOPIC_CONFIG)], deadline.left(5.0))
    except KafkaException as exc:
        raise KafkaClientError(f"cannot create topic {CLOCK_TOPIC}: {_reason(exc)}") from None
    producer = Producer({**settings, "acks": "1", "linger.ms": 0, "enable.idempotence": False,
                         "message.timeout.ms": int(deadline.left(5.0) * 1000), "logger": _QUIET})
    return [_one_sample(producer, deadline) for _ in range(_CLOCK_SAMPLES)]


def _one_sample(producer: Producer, deadline: Deadline) -> ClockSample:
    reports: list[tuple[KafkaError | None, int, int, float]] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        kind, stamp = msg.timestamp()
        reports.append((err, kind, stamp, time.time() * 1000))

    sent = time.time() * 1000
    producer.produce(CLOCK_TOPIC, b"fw doctor: clock sample", on_delivery=delivered)
    producer.flush(deadline.left(5.0))
    if not reports:
        raise KafkaClientError(f"no acknowledgement of a record to {CLOCK_TOPIC} in time")
    err, kind, stamp, received = reports[0]
    if err is not None:
        raise KafkaClientError(f"producing to {CLOCK_TOPIC} failed: {err.str()}")
    if kind != TIMESTAMP_LOG_APPEND_TIME:
        raise KafkaClientError(f"topic {CLOCK_TOPIC} does not stamp records with the broker's clock "
                               "(message.timestamp.type is not LogAppendTime): delete the topic and run again")
    return ClockSample(sent, stamp, received)
