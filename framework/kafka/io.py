"""Small blocking helpers to put records into topics and read them back (demo, tools).

Not for services: a service reads and writes only through its pipeline. These helpers are
for the code around one, such as the demo that feeds a service and prints its outputs.
``extra`` settings (e.g. the ``kafka.security`` of the configuration) go to every client.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
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
from framework.kafka.logs import CLIENT_LOG

__all__ = ["delete_topics", "produce_values", "read_committed"]

Record = tuple[bytes | None, bytes | None] | tuple[bytes | None, bytes | None, int]


def produce_values(bootstrap: str, topic: str, records: Iterable[Record], *,
                   extra: Mapping[str, str] | None = None, timeout_s: float = 60.0) -> int:
    """Produce ``(key, value)`` or ``(key, value, timestamp_ms)`` byte records to ``topic``
    (idempotent, ``acks=all``, partitioned by key as the Java client does) and wait until
    every one is acknowledged. Returns how many were produced; raises ``KafkaClientError``
    if any delivery failed, and a ``RuntimeProblem`` naming the topic and the command that
    creates it, within seconds, when ``topic`` does not exist."""
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    producer = Producer({
        "logger": CLIENT_LOG,
        "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
        "linger.ms": 5, "partitioner": "murmur2_random", **(extra or {}),
    })
    n = 0
    for record in records:
        kwargs: dict[str, Any] = {"key": record[0], "value": record[1], "on_delivery": on_delivery}
        if len(record) > 2 and record[2]:
            kwargs["timestamp"] = record[2]
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.05)
        n += 1
        if n % 1000 == 0:
            producer.poll(0)
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
    return n


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
