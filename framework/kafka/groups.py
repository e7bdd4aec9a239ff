"""Consumer-group and topic operations around a service (replay handover, resets): who is in
the group, committing its offsets, and creating topics anew."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from framework.errors import KafkaClientError
from framework.kafka.admin import admin_client
from framework.kafka.clients import retry_while_not_ready
from framework.kafka.io import delete_topics
from framework.kafka.logs import CLIENT_LOG

TP = tuple[str, int]


def _describe(admin: AdminClient, group: str, timeout_s: float) -> Any:
    """The broker's description of ``group`` (state, members, their assignments)."""
    def describe(left: float) -> Any:
        [found] = [f.result() for f in admin.describe_consumer_groups([group], request_timeout=left).values()]
        return found

    try:
        description = retry_while_not_ready(describe, timeout_s, f"consumer group {group!r}")
    except KafkaException as exc:
        raise KafkaClientError(f"cannot describe consumer group {group!r}: {exc}") from exc
    return description


def _held(member: Any) -> set[TP]:
    return {(tp.topic, tp.partition) for tp in (member.assignment.topic_partitions if member.assignment else [])}


def active_members(settings: Mapping[str, Any], group: str, timeout_s: float = 30.0) -> list[str]:
    """The members of ``group`` now (``host/client id``), empty when nobody runs the service."""
    admin = admin_client(settings)
    description = _describe(admin, group, timeout_s)
    return [f"{m.host}/{m.client_id}" for m in description.members]


def stable_assignment(admin: AdminClient, group: str,
                      timeout_s: float = 10.0) -> dict[str, tuple[str, set[TP]]] | None:
    """``member id -> (ring key, assigned partitions)`` of ``group`` when it is stable, else
    None (a rebalance is under way). The ring key is the static ``group.instance.id`` when the
    member has one, else its member id: what orders members for standby placement."""
    description = _describe(admin, group, timeout_s)
    if description.state != ConsumerGroupState.STABLE:
        return None
    return {m.member_id: (m.group_instance_id or m.member_id, _held(m)) for m in description.members}


def group_members(admin: AdminClient, group: str,
                  timeout_s: float = 10.0) -> tuple[bool, list[tuple[str, str, set[TP]]]]:
    """Whether ``group`` is stable, and each member's ``(client id, host, assigned
    partitions)``: who holds a partition, and (its client id) where its endpoint is."""
    description = _describe(admin, group, timeout_s)
    return (description.state == ConsumerGroupState.STABLE,
            [(m.client_id, m.host, _held(m)) for m in description.members])


def held_partitions(admin: AdminClient, group: str, timeout_s: float = 10.0) -> set[TP] | None:
    """Every partition some member of ``group`` holds now (none when the group is empty), or
    None while a rebalance is under way."""
    description = _describe(admin, group, timeout_s)
    if description.state in (ConsumerGroupState.PREPARING_REBALANCING, ConsumerGroupState.COMPLETING_REBALANCING):
        return None
    return set().union(*(_held(m) for m in description.members))


def static_member(admin: AdminClient, group: str, instance_id: str,
                  timeout_s: float = 10.0) -> tuple[str, str] | None:
    """``(client id, host)`` of the member of ``group`` whose ``group.instance.id`` is
    ``instance_id``, or None when no member has it."""
    description = _describe(admin, group, timeout_s)
    for m in description.members:
        if m.group_instance_id == instance_id:
            return m.client_id, m.host
    return None


def commit_offsets(settings: Mapping[str, Any], group: str, offsets: Mapping[TP, int],
                   timeout_s: float = 30.0) -> None:
    """Set ``group``'s committed offsets (the group must have no active members)."""
    admin = admin_client(settings)
    tps = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
    futures = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)],
                                                 request_timeout=timeout_s)
    for future in futures.values():
        try:
            result = future.result()
        except KafkaException as exc:
            raise KafkaClientError(f"cannot commit the offsets of group {group!r}: {exc}") from exc
        failed = [tp for tp in result.topic_partitions if tp.error is not None]
        if failed:
            raise KafkaClientError(f"cannot commit the offsets of group {group!r}: {failed[0].error}")


def delete_group(settings: Mapping[str, Any], group: str, timeout_s: float = 30.0) -> None:
    admin = admin_client(settings)
    for future in admin.delete_consumer_groups([group], request_timeout=timeout_s).values():
        try:
            future.result()
        except KafkaException as exc:
            if exc.args[0].code() not in (KafkaError.GROUP_ID_NOT_FOUND,):
                raise KafkaClientError(f"cannot delete consumer group {group!r}: {exc}") from exc


def _watermarks(settings: Mapping[str, Any], topics: Iterable[str],
                timeout_s: float) -> dict[str, dict[int, tuple[int, int]] | None]:
    """Each partition's ``(low, high)`` watermarks for every one of ``topics``; None for a
    topic that does not exist."""
    consumer = Consumer({"logger": CLIENT_LOG, **settings, "group.id": "fw-ends", "enable.auto.commit": False})
    try:
        md = consumer.list_topics(timeout=timeout_s)
        out: dict[str, dict[int, tuple[int, int]] | None] = {}
        for topic in topics:
            info = md.topics.get(topic)
            out[topic] = None if info is None or info.error is not None else {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s) for p in info.partitions}
        return out
    finally:
        consumer.close()


def end_offsets(settings: Mapping[str, Any], topics: Iterable[str], timeout_s: float = 30.0) -> dict[TP, int]:
    """The next offset of every partition of ``topics``."""
    out = {}
    for topic, marks in _watermarks(settings, topics, timeout_s).items():
        if marks is None:
            raise KafkaClientError(f"topic {topic!r} does not exist")
        out.update({(topic, p): high for p, (_, high) in marks.items()})
    return out


def held_records(settings: Mapping[str, Any], topics: Iterable[str], timeout_s: float = 30.0) -> dict[str, int]:
    """How many records each of ``topics`` holds (its partitions' ends less their starts;
    records of aborted transactions count): 0 for a topic that does not exist."""
    return {topic: sum(high - low for low, high in (marks or {}).values())
            for topic, marks in _watermarks(settings, topics, timeout_s).items()}


def recreate_topics(settings: Mapping[str, Any], topics: Mapping[str, tuple[int, Mapping[str, str]]],
                    timeout_s: float = 60.0) -> None:
    """Delete ``topics`` (name -> partitions, config) if they exist and create them anew: each
    gets a new topic id, so any local state that reflected the old ones is stale."""
    if not topics:
        return
    delete_topics(settings["bootstrap.servers"], topics, extra=settings, timeout_s=timeout_s)  # missing: ignored
    admin = admin_client(settings)
    deadline = time.monotonic() + timeout_s
    pending = dict(topics)
    while pending:
        news = [NewTopic(t, n, config=dict(c)) for t, (n, c) in pending.items()]
        for name, future in admin.create_topics(news, operation_timeout=timeout_s).items():
            try:
                future.result()
                pending.pop(name)
            except KafkaException as exc:
                # the broker refuses the name until the deletion is complete: ask again
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS or time.monotonic() > deadline:
                    raise KafkaClientError(f"cannot create topic {name!r}: {exc}") from exc
        if pending:
            time.sleep(0.2)


def remove_topics(settings: Mapping[str, Any], topics: Iterable[str], timeout_s: float = 60.0) -> None:
    """Delete ``topics`` (those missing are ignored) and wait until the cluster's metadata no
    longer shows them: a service started right after creates them anew instead of finding a
    topic being deleted."""
    names = sorted(set(topics))
    if not names:
        return
    delete_topics(settings["bootstrap.servers"], names, extra=settings, timeout_s=timeout_s)
    admin = admin_client(settings)
    deadline = time.monotonic() + timeout_s
    while left := sorted(set(names) & set(admin.list_topics(timeout=timeout_s).topics)):
        if time.monotonic() > deadline:
            raise KafkaClientError(f"topics {left} are still listed {timeout_s:.0f} s after their deletion")
        time.sleep(0.2)

