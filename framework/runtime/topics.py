"""The topics a service needs, created with the right partition counts and configs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from framework.errors import PipelineError, RuntimeProblem
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics, topic_partitions
from framework.kafka.connect import principal
from framework.pipeline.definition import Pipeline


def ensure_service_topics(pipeline: Pipeline, settings: Mapping[str, Any], create: bool = True) -> int:
    """Create missing topics; return the service's partition count (= number of tasks).

    Sources must be co-partitioned (same partition count). Missing sources are created with
    their ``Topic.partitions`` or the pipeline's default; repartition and changelog topics get
    the sources' count; changelogs are compacted. With ``create`` false (``kafka.create_topics``)
    a missing source or sink is an error; the service's own topics (repartition, changelogs,
    dead letters) are still created, as Kafka Streams creates its internal topics.
    """
    admin = admin_client(settings)
    sources = [s.topic for s in pipeline.sources()]
    if not create:
        named = sorted({t.name for t in [*sources, *pipeline.sink_topics()]})
        present = topic_partitions(admin, named)
        absent = [n for n in named if n not in present]
        if absent:
            raise RuntimeProblem(
                f"service {pipeline.name!r} needs topics that do not exist on {settings.get('bootstrap.servers')}: "
                f"{', '.join(absent)}, and kafka.create_topics is false. Fix: create them (fw topics create NAME "
                "--partitions N, the sources with the same count) or set FW_KAFKA__CREATE_TOPICS=true")
    existing = topic_partitions(admin, [t.name for t in sources])
    counts = {t.name: existing.get(t.name) or t.partitions or pipeline.default_partitions for t in sources}
    if len(set(counts.values())) > 1:
        raise PipelineError(
            f"the sources of {pipeline.name!r} are not co-partitioned: {counts}. A task is one partition "
            "number across all inputs; repartition one input to match (key_by) or recreate the topics "
            "with the same partition count."
        )
    n = next(iter(counts.values()))
    specs = [TopicSpec(t.name, counts[t.name], dict(t.config)) for t in sources]
    specs += [TopicSpec(name, n) for name in pipeline.input_topics() if name not in counts]
    specs += [
        TopicSpec(pipeline.changelog_topic(name), n, {"cleanup.policy": "compact"})
        for name in pipeline.store_names()
    ]
    sinks = {t.name: t for t in [*pipeline.sink_topics(), pipeline.dead_letter]}
    specs += [TopicSpec(t.name, t.partitions or n, dict(t.config)) for t in sinks.values() if t.name not in counts]
    ensure_topics(admin, specs, who=principal(settings))
    return n
