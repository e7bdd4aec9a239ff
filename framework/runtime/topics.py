"""The topics a service needs, created with the right partition counts and configs, and the
permissions it needs on them (``service_grants``). At start, the stores of an earlier release
the pipeline no longer has are named in one warning (``warn_stale_stores``); the names
themselves are ``framework.pipeline.internal``'s."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from framework.config import KafkaConfig
from framework.errors import PipelineError, RuntimeProblem
from framework.kafka.acl import Grant
from framework.kafka.admin import (
    CLUSTER_DEFAULTS,
    InternalTopics,
    TopicLimits,
    TopicSpec,
    admin_client,
    ensure_topics,
    group_ids,
    topic_limits,
    topic_partitions,
)
from framework.kafka.connect import principal
from framework.pipeline.definition import Pipeline
from framework.pipeline.internal import known_services, skips_topic, stale_stores

log = logging.getLogger("framework.runtime")


def internal_topics(kafka: KafkaConfig) -> InternalTopics:
    """How ``kafka`` (the service's settings) replicates the topics the service makes."""
    return InternalTopics(kafka.internal_replication_factor, kafka.internal_min_insync_replicas)


def ensure_service_topics(pipeline: Pipeline, settings: Mapping[str, Any], create: bool = True, *,
                          max_message_bytes: int | None = None, internal: InternalTopics = CLUSTER_DEFAULTS) -> int:
    """Create missing topics; return the service's partition count (= number of tasks).

    Sources must be co-partitioned (same partition count). Missing sources are created with
    their ``Topic.partitions`` or the pipeline's default; repartition and changelog topics get
    the sources' count; changelogs are compacted. With ``create`` false (``kafka.create_topics``)
    a missing source or sink is an error; the service's own topics (repartition, changelogs,
    dead letters) are still created, as Kafka Streams creates its internal topics.

    ``max_message_bytes`` (the producer's ``message.max.bytes``, when set): the topics the
    service writes to are created with a ``max.message.bytes`` as large (a ``Topic.config`` of
    its own wins); ``output_limits`` checks the ones that exist. ``internal`` replicates the
    service's own topics (``kafka.internal_replication_factor``, ``internal_min_insync_replicas``).
    """
    admin = admin_client(settings)
    sources = [s.topic for s in pipeline.sources()]
    listed = topic_partitions(admin, None)
    warn_stale_stores(pipeline, listed, lambda: group_ids(admin))
    existing = {t.name: listed[t.name] for t in sources if t.name in listed}
    counts = {t.name: existing.get(t.name) or t.partitions or pipeline.default_partitions for t in sources}
    if len(set(counts.values())) > 1:
        raise PipelineError(
            f"the sources of {pipeline.name!r} are not co-partitioned: {counts}. A task is one partition "
            "number across all inputs; repartition one input to match (key_by) or recreate the topics "
            "with the same partition count."
        )
    n = next(iter(counts.values()))
    if not create:
        absent = [name for name in user_topics(pipeline, n) if name not in listed]
        if absent:
            raise topics_missing(pipeline, absent, n, settings.get("bootstrap.servers", "?"), running=False)
    limit = size_config(max_message_bytes)
    specs = [TopicSpec(t.name, counts[t.name], dict(t.config)) for t in sources]
    written = [internal.spec(name, n, limit) for name in pipeline.input_topics() if name not in counts]
    written += [
        internal.spec(pipeline.changelog_topic(name), n, {"cleanup.policy": "compact", **limit})
        for name in pipeline.changelogged_stores()
    ]
    sinks = {t.name: t for t in pipeline.sink_topics()}
    dead = pipeline.dead_letter
    written += [TopicSpec(t.name, t.partitions or n, {**limit, **t.config}) for t in sinks.values()
                if t.name not in counts]
    if dead.name not in counts and dead.name not in sinks:
        written.append(internal.spec(dead.name, dead.partitions or n, {**limit, **dead.config}))
    # a global table's topic is read whole by every member: no co-partitioning asked of it
    specs += [TopicSpec(g.topic.name, g.topic.partitions or n, dict(g.topic.config)) for g in pipeline.global_tables()]
    ensure_topics(admin, specs + written, who=principal(settings))
    return n


def warn_stale_stores(pipeline: Pipeline, topics: Iterable[str], groups: Callable[[], Iterable[str]]) -> None:
    """One warning line naming each store of an earlier release the pipeline no longer has
    (its changelog is on the cluster, among ``topics``), with the command that drops it: its
    step was renamed or removed, so that state is unused now, and a release with the step again
    would continue from it. ``groups`` (the cluster's consumer groups) is asked only when some
    changelog looks stale: the one that a longer-named service made is not this one's."""
    topics = list(topics)
    stores = pipeline.store_names()
    stale = stale_stores(pipeline.name, stores, topics, known_services(topics))
    if stale:
        stale = stale_stores(pipeline.name, stores, topics, known_services(topics, groups()))
    if not stale:
        return
    target = pipeline.target or "MODULE:PIPELINE"
    listed = ", ".join(f"{store} ({topic})" for store, topic in sorted(stale.items()))
    drops = "; ".join(f"fw state drop {target} {store}" for store in sorted(stale))
    one = len(stale) == 1
    log.warning("service %r has the state of %s its pipeline no longer has: %s. A step renamed or removed starts "
                "from nothing, and a release that has the step again would continue from this old state. Fix: "
                "drop %s (%s), or give the step its old name back", pipeline.name,
                "a store" if one else "stores", listed, "it" if one else "them", drops)


def service_grants(pipeline: Pipeline, *, skip_list: bool = True) -> list[Grant]:
    """Every grant a member of ``pipeline`` needs, as Kafka Streams' docs list them for an
    application (Read and Write imply Describe): read its sources, read and write its own
    repartition and changelog topics, read its skip list (``<service>-skips``, written by ``fw
    group skip``; ``skip_list``: only a member under ``on_error=fail`` reads it, and ``fw acls``
    lists it for every service), write its sinks and dead letters, create the topics it
    creates when they are missing, join its consumer group (and the restore reader's, which
    shares the prefix) and own its transactional ids (``<service>-<instance>``)."""
    grants: set[Grant] = set()
    own = {*pipeline.input_topics(), *(pipeline.changelog_topic(s) for s in pipeline.changelogged_stores())}
    sources = {s.topic.name for s in pipeline.sources()} | {g.topic.name for g in pipeline.global_tables()}
    sinks = {t.name for t in pipeline.sink_topics()} | {pipeline.dead_letter.name}
    for name in sources | own | ({skips_topic(pipeline.name)} if skip_list else set()):
        grants.add(Grant("topic", name, "read"))
    for name in (own - sources) | sinks:
        grants.add(Grant("topic", name, "write"))
    for name in sources | own | sinks:  # created by the service when missing
        grants.add(Grant("topic", name, "create"))
    grants.add(Grant("group", pipeline.name, "read", prefixed=True))  # the group, and <name>-restore
    grants.add(Grant("transactional-id", f"{pipeline.name}-", "write", prefixed=True))
    return sorted(grants)



def user_topics(pipeline: Pipeline, n: int) -> dict[str, int]:
    """The topics of ``pipeline`` its user owns (sources, sinks, late topics), sorted, with the
    partition count each is created with: the sources' ``n``, a sink's own or ``n``."""
    sources = {s.topic.name: n for s in pipeline.sources()}
    sources.update({g.topic.name: g.topic.partitions or n for g in pipeline.global_tables()})
    sinks = {t.name: t.partitions or n for t in pipeline.sink_topics() if t.name not in sources}
    return dict(sorted({**sources, **sinks}.items()))


def topics_missing(pipeline: Pipeline, absent: Iterable[str], n: int, where: str, *, running: bool) -> RuntimeProblem:
    """The one line for topics of the service that do not exist: at start, with
    ``kafka.create_topics`` false, or found gone while it runs (``KafkaOutput.on_missing``). A
    topic its user owns is named with the command that creates it; the service creates its
    own (repartition topics, changelogs, dead letters) whenever it starts."""
    absent = sorted(absent)
    owned = user_topics(pipeline, n)
    mine = [name for name in absent if name in owned]
    create = (f"create {'it' if len(mine) == 1 else 'them'} ("
              + "; ".join(f"fw topics create {name} --partitions {owned[name]}" for name in mine) + ")")
    one, listed = len(absent) == 1, ", ".join(absent)
    if not running:
        return RuntimeProblem(
            f"service {pipeline.name!r} needs {'a topic that does' if one else 'topics that do'} not exist on "
            f"{where}: {listed}, and kafka.create_topics is false. Fix: {create} or set FW_KAFKA__CREATE_TOPICS=true")
    again = "start the service again" + ("" if len(mine) == len(absent) else
                                         " (it creates its own topics when it starts)")
    gone = "a topic that no longer exists" if one else "topics that no longer exist"
    return RuntimeProblem(
        f"service {pipeline.name!r} writes to {gone} on {where}: {listed}; what it writes there cannot be delivered. "
        f"Fix: {f'{create}, then ' if mine else ''}{again}")


def output_limits(pipeline: Pipeline, settings: Mapping[str, Any],
                  max_message_bytes: int | None = None) -> dict[str, TopicLimits]:
    """What each topic the service writes to accepts (``TopicLimits``): the producer
    refuses what a topic would, as that record's error (``written_limits``)."""
    names = [*(t for t in pipeline.input_topics() if t not in _sources(pipeline)),
             *(pipeline.changelog_topic(store) for store in pipeline.changelogged_stores()),
             *(t.name for t in pipeline.sink_topics()), pipeline.dead_letter.name]
    return written_limits(names, settings, max_message_bytes)


def producer_max_bytes(producer: Mapping[str, Any]) -> int | None:
    """The producer's ``message.max.bytes`` (of ``kafka.producer``) when set (librdkafka itself
    reports a bad value)."""
    value = producer.get("message.max.bytes")
    try:
        return int(value) if value else None
    except ValueError:
        return None


def size_config(max_message_bytes: int | None) -> dict[str, str]:
    """The topic config of a topic the service writes to: as large a ``max.message.bytes`` as
    the producer's ``message.max.bytes``, when that is set."""
    return {} if max_message_bytes is None else {"max.message.bytes": str(max_message_bytes)}


def written_limits(names: Iterable[str], settings: Mapping[str, Any],
                   max_message_bytes: int | None = None) -> dict[str, TopicLimits]:
    """What each of the topics ``names`` accepts. With ``max_message_bytes`` (the producer's
    ``message.max.bytes``, when set), a topic with a smaller ``max.message.bytes`` is an error:
    the broker would refuse every record between the two limits, and each transaction holding
    one would abort."""
    names = list(dict.fromkeys(names))
    if not names:
        return {}
    limits, unknown = topic_limits(admin_client(settings), names)
    if unknown:
        log.warning("cannot read the limits of topics %s (%s): an output record they refuse (too large, or a "
                    "timestamp too far from now) aborts the checkpoints that hold it", sorted(unknown),
                    next(iter(unknown.values())))
    small = {name: lim.max_message_bytes for name, lim in limits.items()
             if max_message_bytes is not None and lim.max_message_bytes < max_message_bytes}
    if small:
        listed = ", ".join(f"{name} ({size})" for name, size in sorted(small.items()))
        raise RuntimeProblem(
            f"kafka.producer message.max.bytes={max_message_bytes} is larger than the max.message.bytes of "
            f"topics the service writes to: {listed}. The broker would refuse every record between the two "
            "limits, and each checkpoint holding one would abort. Fix: raise the topics' limit (kafka-configs "
            f"--alter --entity-type topics --entity-name TOPIC --add-config max.message.bytes={max_message_bytes}),"
            " or lower FW_KAFKA_PRODUCER__MESSAGE_MAX_BYTES")
    return limits


def _sources(pipeline: Pipeline) -> set[str]:
    return {s.topic.name for s in pipeline.sources()}
