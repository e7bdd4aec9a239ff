"""The topics a service needs, created with the right partition counts and configs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from framework.errors import PipelineError
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics, topic_partitions
from framework.pipeline.definition import Pipeline


def ensure_service_topics(pipeline: Pipeline, settings: Mapping[str, Any]) -> int:
    """Create missing topics; return the service's partition count (= number of tasks).

    Sources must be co-partitioned (same partition count). Missing sources are created with
    their ``Topic.partitions`` or the pipeline's default; repartition and changelog topics get
    the sources' count; changelogs are compacted.
    """
    admin = admin_client(settings)
    sources = [s.topic for s in pipeline.sources()]
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
    ensure_topics(admin, specs)
    return n
