"""``fw group skip | skips``: a service's skip list (``framework.engine.skips``).

``fw group skip SERVICE TOPIC:PARTITION:OFFSET [--reason TEXT]`` names one record in the
service's skip list, the compacted topic ``<service>-skips`` (created on first use, one
partition); ``--remove`` takes it out again (a tombstone). A member under ``on_error="fail"``
then dead-letters that record, should a step raise on it, instead of stopping; nothing else
is skipped, and the group's committed offsets are not touched.

Checked before anything is written, each a one-line error: the record given as
``topic:partition:offset`` (or ``topic[partition]@offset``, as the error line names it), a
topic the service reads (a source, or a repartition topic of its own), no member of the
group running (a running member read the list at its first failure and would not see the
change), the partition there and the offset within what it holds now. Adding an entry that
is there with the same reason, or removing one that is not there, changes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from framework.engine.skips import Skip, skips_of
from framework.errors import ConfigError, RuntimeProblem
from framework.headers import coordinates
from framework.kafka.admin import CLUSTER_DEFAULTS, InternalTopics, admin_client, ensure_topics
from framework.kafka.inspect import Cluster, read_whole
from framework.kafka.io import deliver
from framework.kafka.offsets import explicit_offsets
from framework.ops.cleanup import refuse_while_running
from framework.pipeline.definition import Pipeline
from framework.pipeline.internal import skips_topic


@dataclass(frozen=True)
class SkipChange:
    """What ``fw group skip`` does to the skip list of ``service``: adds (or, ``removed``,
    removes) ``entry``; ``changed``: whether that changes the list (else nothing is written)."""

    service: str
    entry: Skip
    removed: bool
    changed: bool

    def as_dict(self) -> dict[str, Any]:
        return {"service": self.service, "topic": skips_topic(self.service), **self.entry.as_dict(),
                "action": "remove" if self.removed else "add", "changed": self.changed}


def parse_record(text: str) -> tuple[str, int, int]:
    """``topic:partition:offset`` (or ``topic[partition]@offset``) as ``(topic, partition,
    offset)``; a ``ConfigError`` line for anything else."""
    found = explicit_offsets(text)
    if found is not None and len(found) == 1:
        [((topic, partition), offset)] = found.items()
        return topic, partition, offset
    named = coordinates(text)
    if named is not None and named[2] >= 0:
        return named
    raise ConfigError(f"{text!r} is not one record: give it as topic:partition:offset (orders:0:42), the record "
                      "the error that stopped the service names as topic[partition]@offset")


def read_skips(settings: Mapping[str, Any], service: str) -> list[Skip]:
    """The entries of ``service``'s skip list, by record (none when it has none)."""
    entries = skips_of((r.key, r.value) for r in read_whole(settings, skips_topic(service)))
    return [entries[where] for where in sorted(entries)]


def plan_skip(settings: Mapping[str, Any], pipeline: Pipeline, record: str, reason: str = "", *,
              remove: bool = False) -> SkipChange:
    """The change to ``pipeline``'s skip list for ``record``, checked (module docstring)."""
    topic, partition, offset = parse_record(record)
    where = f"{topic}[{partition}]@{offset}"
    read = pipeline.input_topics()
    if topic not in read:
        raise ConfigError(f"service {pipeline.name} does not read {topic!r}, so it cannot fail on {where}: it reads "
                          f"{', '.join(sorted(read))}")
    action = "a skip-list change"
    refuse_while_running(settings, pipeline.name, action, f"{'remove' if remove else 'add'} the skip")
    if not remove:
        _check_in_log(settings, topic, partition, offset)
    before = {s.where: s for s in read_skips(settings, pipeline.name)}.get(where)
    if remove:
        return SkipChange(pipeline.name, before or Skip(where), True, before is not None)
    if before is not None and before.reason == reason:
        return SkipChange(pipeline.name, before, False, False)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return SkipChange(pipeline.name, Skip(where, reason, now), False, True)


def _check_in_log(settings: Mapping[str, Any], topic: str, partition: int, offset: int) -> None:
    """A ``RuntimeProblem`` line unless ``topic[partition]`` holds a record at ``offset`` now."""
    cluster = Cluster(settings)
    try:
        bounds = cluster.offsets(topic)  # a topic that does not exist: one line, with close matches
    finally:
        cluster.close()
    if partition not in bounds:
        raise RuntimeProblem(f"{topic} has no partition {partition} (it has {len(bounds)}, 0 to {len(bounds) - 1}): "
                             f"there is no record {topic}[{partition}]@{offset}")
    first, end = bounds[partition]
    if not first <= offset < end:
        held = f"offsets {first} to {end - 1}" if end > first else f"no records (its next offset is {end})"
        raise RuntimeProblem(f"{topic}[{partition}] holds {held}: there is no record {topic}[{partition}]@{offset} "
                             "to skip. Fix: give the offset the error that stopped the service names")


def apply_skip(settings: Mapping[str, Any], change: SkipChange, internal: InternalTopics = CLUSTER_DEFAULTS) -> None:
    """Write ``change`` to the skip-list topic (created when missing); refused if a member
    joined meanwhile. Nothing is written when nothing changes."""
    if not change.changed:
        return
    refuse_while_running(settings, change.service, "a skip-list change", "change the skip list")
    topic = skips_topic(change.service)
    ensure_topics(admin_client(settings), [internal.spec(topic, 1, {"cleanup.policy": "compact"})])
    key, value = change.entry.encoded()
    deliver(settings, topic, [(key, None if change.removed else value)])
