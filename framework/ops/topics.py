"""``fw topics list | describe | create``: the topics of a cluster, marked by what the
framework uses them for.

A framework service names its internal topics after itself (docs/state-format.md, section
1): ``<service>-<store>-changelog`` and ``<service>-<step>-repartition``, and its dead
letters go to ``<service>-dead-letter`` by default. ``internal_kind`` recognises them by
those suffixes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from framework.errors import ConfigError
from framework.kafka.inspect import Cluster, TopicDetail

_KINDS = (("-changelog", "changelog"), ("-repartition", "repartition"), ("-dead-letter", "dead-letter"))


def internal_kind(topic: str) -> str:
    """``changelog``, ``repartition`` or ``dead-letter`` for a framework service's own topics,
    ``broker`` for Kafka's (``__consumer_offsets``...), else ``""``."""
    if topic.startswith("__"):
        return "broker"
    for suffix, kind in _KINDS:
        if topic.endswith(suffix):
            return kind
    return ""


@dataclass(frozen=True)
class TopicRow:
    name: str
    partitions: int
    replication: int
    internal: str  # internal_kind


def list_topics(settings: Mapping[str, Any], include_broker_topics: bool = False) -> list[TopicRow]:
    """Every topic (Kafka's own only with ``include_broker_topics``), by name."""
    cluster = Cluster(settings)
    try:
        return [TopicRow(t.name, t.partitions, t.replication, internal_kind(t.name))
                for t in cluster.topics(include_broker_topics)]
    finally:
        cluster.close()


def describe_topic(settings: Mapping[str, Any], topic: str) -> TopicDetail:
    """Partitions (leader, replicas, in-sync replicas, first and next offsets), the topic id
    and the topic's configuration overrides."""
    cluster = Cluster(settings)
    try:
        return cluster.describe(topic)
    finally:
        cluster.close()


def detail_dict(detail: TopicDetail) -> dict[str, Any]:
    out = asdict(detail)
    out["internal"] = internal_kind(detail.name)
    out["records"] = sum(p.end - p.start for p in detail.partitions)  # offsets, not records: see docs
    return out


def parse_configs(pairs: Iterable[str]) -> dict[str, str]:
    """``k=v`` options as a dict; a ``ConfigError`` for one without ``=``."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--config {pair!r} is not KEY=VALUE (e.g. --config cleanup.policy=compact)")
        out[key.strip()] = value.strip()
    return out


def create_topic(settings: Mapping[str, Any], topic: str, partitions: int, replication: int,
                 configs: Iterable[str]) -> TopicDetail:
    """Create ``topic`` and describe it as the broker now has it. ``replication`` -1: the
    broker's default. A ``ConfigError`` when it exists or the broker refuses."""
    if partitions < 1:
        raise ConfigError(f"--partitions must be at least 1, got {partitions}")
    config = parse_configs(configs)
    cluster = Cluster(settings)
    try:
        cluster.create(topic, partitions, replication, config)
        return cluster.describe(topic)
    finally:
        cluster.close()
