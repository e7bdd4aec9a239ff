"""``fw group describe | reset``: a service's consumer group.

**Describe** shows the members (client id, host, assigned partitions) and, per partition of
the service's input topics (or, for a bare group id, of the topics it has offsets for), the
committed offset, the end offset and the lag between them (from the first offset where
nothing is committed: the service starts there). Ends are what a read_committed
reader reaches, so a partition written transactionally shows a lag of 1 once everything is
read: the commit marker after the last record takes an offset.

**Reset**, as Kafka Streams' application reset tool does, starts the service over from a
point of its sources: refused while the group has members (a running member would go on
from its own positions and state); then

1. the sources' offsets go to ``--to`` (``framework.kafka.offsets``: earliest, latest, a
   time, ``topic:partition:offset``; partitions such a list does not name go to their first
   offset, since the state is rebuilt from nothing);
2. the repartition topics' offsets go to their ends: their records stand for source records
   processed before the reset;
3. the changelogs are deleted and created again, empty (``recreate_topics``): each gets a
   new topic id, so every member's local state, which records the id it reflects, is seen
   as stale when the member starts and is rebuilt from the empty changelog, never merged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from framework.errors import RuntimeProblem
from framework.kafka.groups import active_members, commit_offsets, end_offsets, recreate_topics
from framework.kafka.inspect import Cluster, GroupInfo
from framework.kafka.offsets import resolve_positions
from framework.pipeline.definition import Pipeline

TP = tuple[str, int]


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    start: int
    end: int
    member: str | None  # client id of the member it is assigned to

    @property
    def lag(self) -> int:
        """Offsets between the committed one and the end; without a committed offset, from the
        first offset (a service starts there: ``auto.offset.reset=earliest``)."""
        return max(self.end - (self.start if self.committed is None else self.committed), 0)


@dataclass(frozen=True)
class GroupView:
    info: GroupInfo
    partitions: list[PartitionLag]

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.info.group, "state": self.info.state,
                "members": [{"client_id": m.client_id, "host": m.host, "member_id": m.member_id,
                             "assignment": [f"{t}[{p}]" for t, p in m.assignment]} for m in self.info.members],
                "partitions": [{"topic": r.topic, "partition": r.partition, "committed": r.committed,
                                "start": r.start, "end": r.end, "lag": r.lag, "member": r.member}
                               for r in self.partitions]}


def describe_group(settings: Mapping[str, Any], group: str, pipeline: Pipeline | None) -> GroupView:
    """The group of service ``pipeline`` (its name), or the bare ``group`` when None."""
    cluster = Cluster(settings)
    try:
        info = cluster.group(group) if pipeline is not None else cluster.require_group(group)
        committed = cluster.committed(group)
        existing = {t.name for t in cluster.topics()}
        wanted = pipeline.input_topics() if pipeline is not None else sorted({t for t, _ in committed})
        bounds = {(t, p): b for t in wanted if t in existing for p, b in cluster.offsets(t).items()}
    finally:
        cluster.close()
    owner = {tp: m.client_id for m in info.members for tp in m.assignment}
    rows = [PartitionLag(t, p, committed.get((t, p)), start, end, owner.get((t, p)))
            for (t, p), (start, end) in sorted(bounds.items())]
    return GroupView(info, rows)


@dataclass
class ResetPlan:
    """What a reset changes: ``offsets`` (partition -> (committed before or None, after)),
    the changelogs it creates anew, and where the members' local state is."""

    group: str
    offsets: dict[TP, tuple[int | None, int]]
    changelogs: dict[str, int]  # topic -> partitions
    state_dir: Path
    applied: bool = False
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.group, "applied": self.applied,
                "offsets": [{"topic": t, "partition": p, "before": b, "after": a}
                            for (t, p), (b, a) in sorted(self.offsets.items())],
                "changelogs_recreated": sorted(self.changelogs), "state_dir": str(self.state_dir),
                "notes": self.notes}


def refuse_while_running(settings: Mapping[str, Any], group: str) -> None:
    members = active_members(settings, group)
    if members:
        raise RuntimeProblem(f"consumer group {group!r} has {len(members)} active member(s) ({', '.join(members)}): a "
                          "reset would race them. Fix: stop every instance of the service, then reset")


def plan_reset(settings: Mapping[str, Any], pipeline: Pipeline, to: str, state_root: Path) -> ResetPlan:
    """The reset of service ``pipeline`` to ``to``, computed, nothing changed yet."""
    group = pipeline.name
    refuse_while_running(settings, group)
    sources = [s.topic.name for s in pipeline.sources()]
    positions = resolve_positions(settings, sources, to, option="--to", group=group)
    cluster = Cluster(settings)
    try:
        before = cluster.committed(group)
        existing = {t.name: t.partitions for t in cluster.topics()}
    finally:
        cluster.close()
    repartition = [t for t in pipeline.input_topics() if t not in sources and t in existing]
    positions.update(end_offsets(settings, repartition))
    tasks = max((existing[t] for t in sources), default=pipeline.default_partitions)
    changelogs = {pipeline.changelog_topic(s): existing.get(pipeline.changelog_topic(s), tasks)
                  for s in pipeline.changelogged_stores()}
    offsets = {tp: (before.get(tp), after) for tp, after in positions.items()}
    state_dir = state_root.resolve() / pipeline.name
    return ResetPlan(group, offsets, changelogs, state_dir, notes=_state_notes(state_dir, bool(changelogs)))


def apply_reset(settings: Mapping[str, Any], plan: ResetPlan) -> ResetPlan:
    """Recreate the changelogs, then commit the offsets; refused again if a member joined."""
    refuse_while_running(settings, plan.group)
    recreate_topics(settings, {t: (n, {"cleanup.policy": "compact"}) for t, n in plan.changelogs.items()})
    refuse_while_running(settings, plan.group)
    commit_offsets(settings, plan.group, {tp: after for tp, (_, after) in plan.offsets.items()})
    plan.applied = True
    return plan


def _state_notes(state_dir: Path, stateful: bool) -> list[str]:
    if not stateful:
        return ["the service keeps no state: nothing to do about local state"]
    where = f"{state_dir} (FW_STATE_DIR/<service>)"
    here = "exists on this host" if state_dir.exists() else "does not exist on this host"
    return [(f"local state: {where} {here}. Each member sees that its changelogs were created anew (new topic "
             "ids) and rebuilds its stores from them when it starts; delete that directory on every host that "
             "ran a member to free its disk space now")]
