"""``fw topics list | describe | create | delete``: the topics of a cluster, marked by what the
framework uses them for.

``fw topics delete`` refuses, unless forced, a topic a running service uses: one a consumer
group with members now reads (assigned to a member, or with a committed offset of the
group), or an internal topic named after such a group (``<group>-...-changelog`` or
``-repartition``: a changelog is read only while a member restores). Either every named
topic is deleted or none is.

A framework service names its internal topics after itself (docs/state-format.md, section
1): ``<service>-<store>-changelog`` and ``<service>-<step>-repartition``, and its dead
letters go to ``<service>-dead-letter`` by default. ``internal_kind`` recognises them by
those suffixes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from framework.errors import ConfigError, RuntimeProblem
from framework.kafka.groups import remove_topics
from framework.kafka.inspect import Cluster, GroupInfo, TopicDetail, close_matches

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


@dataclass(frozen=True)
class DeletePlan:
    """The topics a ``fw topics delete`` deletes, and which of them running services use
    (topic -> the group and its members; not empty only when forced)."""

    topics: list[str]
    in_use: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        return {"topics": self.topics, "in_use": self.in_use}


def plan_delete(settings: Mapping[str, Any], names: Iterable[str], matching: str | None, force: bool) -> DeletePlan:
    """The topics ``names`` and those whose whole name matches the regular expression
    ``matching`` (Kafka's own ``__`` topics never), checked: an unknown name is a
    ``RuntimeProblem`` with close matches, a topic a running service uses is one too unless
    ``force``."""
    pattern = _pattern(matching)
    cluster = Cluster(settings)
    try:
        existing = [t.name for t in cluster.topics()]
        chosen = _chosen(existing, list(names), pattern, str(cluster.bootstrap))
        in_use = _in_use(cluster, chosen) if chosen else {}
    finally:
        cluster.close()
    if in_use and not force:
        used = "; ".join(f"{t} ({why})" for t, why in in_use.items())
        raise RuntimeProblem(f"refused: {_count(len(in_use))} used by a running service: {used}. Deleting "
                             "it under the service breaks it. Fix: stop the service first (fw status GROUP shows "
                             "its members), or pass --force; nothing was deleted")
    return DeletePlan(chosen, in_use)


def apply_delete(settings: Mapping[str, Any], plan: DeletePlan) -> None:
    """Delete the plan's topics and wait until the cluster no longer lists them."""
    remove_topics(settings, plan.topics)


def _pattern(matching: str | None) -> re.Pattern[str] | None:
    if matching is None:
        return None
    try:
        return re.compile(matching)
    except re.error as exc:
        raise ConfigError(f"--matching {matching!r} is not a regular expression: {exc}") from None


def _chosen(existing: list[str], names: list[str], pattern: re.Pattern[str] | None, where: str) -> list[str]:
    for name in names:
        if name.startswith("__"):
            raise ConfigError(f"{name} is one of Kafka's own topics: fw topics delete leaves them alone")
        if name not in existing:
            raise RuntimeProblem(f"topic {name!r} does not exist on {where}: {close_matches(name, existing)} "
                                 "(fw topics list shows them); nothing was deleted")
    matched = [t for t in existing if pattern is not None and pattern.fullmatch(t)]
    return sorted({*names, *matched})


def _in_use(cluster: Cluster, topics: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for info in cluster.running_groups():
        read = {t for m in info.members for t, _ in m.assignment} | {t for t, _ in cluster.committed(info.group)}
        for topic in topics:
            own = topic.startswith(f"{info.group}-") and internal_kind(topic) in ("changelog", "repartition")
            if topic not in out and (topic in read or own):
                out[topic] = _users(info)
    return dict(sorted(out.items()))


def _users(info: GroupInfo) -> str:
    members = ", ".join(f"{m.host.lstrip('/')}/{m.client_id}" for m in info.members)
    return f"consumer group {info.group}, {len(info.members)} active member{'s' if len(info.members) > 1 else ''}: " \
           f"{members}"


def _count(n: int) -> str:
    return "1 topic is" if n == 1 else f"{n} topics are"
