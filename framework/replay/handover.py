"""The bootstrap's handover: the live service continues exactly where the replay stopped.

Before the stages run, the service's changelogs are created anew (empty, with new topic ids:
a member host's older local state is then stale, and its restore rebuilds instead of
merging). The last task of every partition writes its stores into them. At the end, the
service group's offsets are committed at the handover point: each source at the end of the
replayed range, each repartition topic at its end (the replay did the work its records
stand for). Refused while the group has members: a running service would race the replay.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from framework.errors import ConfigError
from framework.kafka.groups import (
    active_members,
    commit_offsets,
    delete_group,
    end_offsets,
    recreate_topics,
)
from framework.replay.plan import ReplayPlan
from framework.runtime.topics import producer_max_bytes, size_config


def refuse_if_running(settings: Mapping[str, Any], group: str) -> None:
    members = active_members(settings, group)
    if members:
        raise ConfigError(f"consumer group {group!r} has {len(members)} active member(s) ({', '.join(members)}): a "
                          "bootstrap replaces its state and offsets. Fix: stop every instance of the service first")


def prepare_bootstrap(settings: Mapping[str, Any], plan: ReplayPlan) -> None:
    refuse_if_running(settings, plan.service)
    if plan.resumed:  # the changelogs hold what the failed run's finished tasks wrote: kept
        return
    # as the live service creates its changelogs
    config = {"cleanup.policy": "compact", **size_config(producer_max_bytes(plan.producer))}
    recreate_topics(settings, {t: (plan.partitions, config) for t in plan.changelogs})


def commit_handover(settings: Mapping[str, Any], plan: ReplayPlan) -> dict[tuple[str, int], int]:
    refuse_if_running(settings, plan.service)
    offsets = {(t, p): r[1] for t, parts in plan.ranges.items() for p, r in parts.items()}
    internal = [t for stage in plan.stages[1:] for t in stage]
    offsets.update(end_offsets(settings, internal))
    commit_offsets(settings, plan.service, offsets)
    if not plan.backfill:  # a backfill's markers go when the ledger records it complete
        delete_group(settings, plan.marker_group)  # the writers' progress markers
    return offsets
