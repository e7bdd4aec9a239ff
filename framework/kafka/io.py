"""Small blocking helpers to put records into topics and read them back (demo, tools).

Not for services: a service reads and writes only through its pipeline. These helpers are
for the code around one, such as the demo that feeds a service and prints its outputs.
``extra`` settings (e.g. the ``kafka.security`` of the configuration) go to every client.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from framework.errors import KafkaClientError
from framework.kafka.admin import admin_client
from framework.kafka.clients import GONE_CHECK_S, absent_topics, no_such_topics, unknown_topic
from framework.kafka.connect import probe
from framework.kafka.logs import CLIENT_LOG
from framework.records import Headers

__all__ = ["Delivered", "delete_topics", "deliver", "produce_values", "read_committed"]

Record = (tuple[bytes | None, bytes | None] | tuple[bytes | None, bytes | None, int | None]
          | tuple[bytes | None, bytes | None, int | None, Headers])
_METADATA_TIMEOUT_S = 6.0


@dataclass(frozen=True)
class Delivered:
    """What a ``deliver`` call wrote: records acknowledged per partition, and how many
    partitions the topic has."""

    partitions: dict[int, int]
    topic_partitions: int

    @property
    def records(self) -> int:
        return sum(self.partitions.values())


def produce_values(bootstrap: str, topic: str, records: Iterable[Record], *,
                   extra: Mapping[str, str] | None = None, timeout_s: float = 60.0) -> int:
    """Produce ``(key, value)`` or ``(key, value, timestamp_ms)`` byte records to ``topic``
    (``deliver``) and return how many were produced."""
    return deliver({"bootstrap.servers": bootstrap, **(extra or {})}, topic, records, timeout_s=timeout_s).records


def deliver(settings: Mapping[str, Any], topic: str, records: Iterable[Record], *,
            timeout_s: float = 60.0, require_topic: bool = False) -> Delivered:
    """Produce ``(key, value[, timestamp_ms[, headers]])`` byte records to ``topic``
    (idempotent, ``acks=all``, partitioned by key as the Java client does; timestamp 0 or
    None: the producer stamps it) and wait until every one is acknowledged.

    Raises ``KafkaClientError`` if any delivery failed, and a ``RuntimeProblem`` naming the
    topic and the command that creates it when ``topic`` does not exist: within seconds, or
    with ``require_topic`` before anything is produced (one metadata request; an unreachable
    cluster is then one ``EnvironmentProblem`` line, as ``probe`` says it)."""
    errors: list[KafkaError] = []
    written: Counter[int] = Counter()

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            written[msg.partition()] += 1

    producer = Producer({
        "logger": CLIENT_LOG, "enable.idempotence": True, "acks": "all",
        "linger.ms": 5, "partitioner": "murmur2_random", **settings,
    })
    count = _partition_count(producer, settings, topic) if require_topic else 0
    n = 0
    for record in records:
        kwargs: dict[str, Any] = {"key": record[0], "value": record[1], "on_delivery": on_delivery}
        if len(record) > 2 and record[2]:
            kwargs["timestamp"] = record[2]
        if len(record) > 3 and record[3]:
            kwargs["headers"] = record[3]
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.05)
        n += 1
        if n % 1000 == 0:
            producer.poll(0)
    bootstrap = str(settings.get("bootstrap.servers", "?"))
    remaining = producer.flush(min(GONE_CHECK_S, timeout_s))
    if remaining and absent_topics(producer, [topic]):
        raise no_such_topics([topic], bootstrap)
    remaining = producer.flush(max(timeout_s - GONE_CHECK_S, 0))
    if remaining:
        raise KafkaClientError(
            f"{remaining} of {n} records to {topic!r} not delivered within {timeout_s}s")
    if any(unknown_topic(err) for err in errors):
        raise no_such_topics([topic], bootstrap)
    if errors:
        raise KafkaClientError(f"{len(errors)} of {n} records to {topic!r} failed: {errors[0]}")
    return Delivered(dict(sorted(written.items())), count)


def _partition_count(producer: Producer, settings: Mapping[str, Any], topic: str) -> int:
    """How many partitions ``topic`` has, from the producer's own metadata request (all
    topics: asking for one by name would make a broker with auto.create.topics.enable create
    it); the one-line error when it does not exist or the cluster does not answer."""
    try:
        listed = producer.list_topics(timeout=_METADATA_TIMEOUT_S).topics
    except KafkaException:
        probe(settings, _METADATA_TIMEOUT_S)  # unreachable, or the login refused: its one line
        raise
    if topic not in listed or not listed[topic].partitions:
        raise no_such_topics([topic], str(settings.get("bootstrap.servers", "?")))
    return len(listed[topic].partitions)


def read_committed(
    bootstrap: str, topic: str, expected_count: int | None, timeout_s: float, *,
    extra: Mapping[str, str] | None = None,
) -> list[tuple[bytes | None, bytes | None]]:
    """The committed records of ``topic`` from its beginning, as ``(key, value)`` bytes,
    each partition's in offset order (partitions interleaved).

    With ``expected_count``, reads until that many arrived (waiting for transactions still
    to commit); with ``None``, until the end of every partition. Joins no consumer group
    and commits nothing. Raises ``KafkaClientError`` when ``timeout_s`` passes first.
    """
    consumer = Consumer({
        "logger": CLIENT_LOG,
        "bootstrap.servers": bootstrap, "group.id": f"fw-reader-{uuid.uuid4().hex[:12]}",
        "isolation.level": "read_committed", "enable.auto.commit": False,
        "enable.partition.eof": True, "auto.offset.reset": "earliest",
        # at a partition's end the broker holds a fetch this long before it says so (500 ms by default)
        "fetch.wait.max.ms": 20, **(extra or {}),
    })
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s)
        info = metadata.topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            reason = info.error if info is not None and info.error is not None else "no such topic"
            raise KafkaClientError(f"cannot read topic {topic!r}: {reason}")
        partitions = sorted(info.partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        out: list[tuple[bytes | None, bytes | None]] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while True:
            if expected_count is not None and len(out) >= expected_count:
                return out
            if expected_count is None and len(at_end) == len(partitions):
                return out
            left = deadline - time.monotonic()
            if left <= 0:
                wanted = f"{expected_count} records" if expected_count is not None else "the end"
                raise KafkaClientError(f"read {len(out)} records of {topic!r} in {timeout_s}s, "
                                       f"waiting for {wanted}")
            # what is there now, else wait for one: a wait for a full batch held every short
            # read (a small topic, a partition's end) to the timeout
            for msg in consumer.consume(1000, 0) or consumer.consume(1, min(left, 0.5)):
                err = msg.error()
                if err is None:
                    out.append((msg.key(), msg.value()))
                    at_end.discard(msg.partition())
                elif err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(cast(int, msg.partition()))  # an end-of-partition event names its partition
                elif err.fatal() or err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise KafkaClientError(f"reading {topic!r} failed: {err}")
                # other errors are transient (the client retries); the deadline bounds them
    finally:
        consumer.close()


def delete_topics(bootstrap: str, names: Iterable[str], *, extra: Mapping[str, str] | None = None,
                  timeout_s: float = 30.0) -> None:
    """Delete the topics ``names``; topics that do not exist are ignored."""
    names = list(names)
    if not names:
        return
    admin = admin_client({"bootstrap.servers": bootstrap, **(extra or {})})
    for name, future in admin.delete_topics(names, operation_timeout=timeout_s).items():
        try:
            future.result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise KafkaClientError(f"could not delete topic {name!r}: {exc}") from exc
