"""``fw group describe | reset``: a service's consumer group (``fw group skip`` and ``skips``,
its skip list: ``framework.ops.skips``).

**Describe** shows the members (client id, host, assigned partitions) and, per partition of
the service's input topics (or, for a bare group id, of the topics it has offsets for), the
committed offset, the end offset and the lag between them (from the first offset where
nothing is committed: the service starts there). Ends are what a read_committed
reader reaches, so a partition written transactionally shows a lag of 1 once everything is
read: the commit marker after the last record takes an offset.

**Reset**, as Kafka Streams' application reset tool does, starts the service over from a
point of its sources, whatever releases ran before: refused while the group has members (a
running member would go on from its own positions and state); then

1. the local copies of every store under ``state.dir/<service>`` on this host go, those of
   stores the pipeline no longer has included (``framework.ops.cleanup``);
2. every committed offset of the group but the sources' goes (the empty group is deleted):
   those of repartition topics (created anew below) and of topics earlier releases read;
3. every internal topic of the service goes (``framework.pipeline.internal``: each
   ``<service>-*-changelog`` and ``<service>-*-repartition`` on the cluster, not a
   longer-named service's); those the pipeline has are created again, empty, with their
   partitions and config. Each gets a new topic id, so a member's local state elsewhere,
   which records the id it reflects, is seen as stale and rebuilt, never merged;
4. the sources' offsets go to ``--to`` (``framework.kafka.offsets``: earliest, latest, a
   time, ``topic:partition:offset``; partitions such a list does not name go to their first
   offset, since the state is rebuilt from nothing).

It leaves the user's topics: sources, outputs (the rerun appends to them, and says so), the
dead letters, the backfill ledger with its marker groups, which describe outputs that are
still there (``fw replay --clean`` forgets them), the re-drive ledger
(``framework.ops.deadletters``) and the skip list (``framework.engine.skips``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from framework.kafka.groups import commit_offsets, delete_group, recreate_topics, remove_topics
from framework.kafka.inspect import Cluster, GroupInfo
from framework.kafka.offsets import resolve_positions
from framework.ops.cleanup import ELSEWHERE, drop_local, refuse_while_running, survey
from framework.pipeline.definition import Pipeline
from framework.pipeline.internal import ledger_topic, redrive_ledger_topic, skips_topic

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
    """What a reset changes (module docstring): the sources' committed ``offsets`` (partition
    -> (before or None, after)), the committed offsets it deletes (``forgotten``), the internal
    topics it creates anew (name -> (partitions, config)) and deletes, the stores it deletes
    under ``state_dir`` here; and what it leaves (``kept``: the service's outputs, dead letters
    and backfill ledger, those that exist)."""

    group: str
    offsets: dict[TP, tuple[int | None, int]]
    forgotten: list[TP]
    recreated: dict[str, tuple[int, dict[str, str]]]
    deleted: list[str]
    state_dir: Path
    local: list[str]
    kept: dict[str, list[str]]
    applied: bool = False
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.group, "applied": self.applied,
                "offsets": [{"topic": t, "partition": p, "before": b, "after": a}
                            for (t, p), (b, a) in sorted(self.offsets.items())],
                "offsets_deleted": [f"{t}[{p}]" for t, p in self.forgotten],
                "topics_recreated": sorted(self.recreated), "topics_deleted": self.deleted,
                "state_dir": str(self.state_dir), "local_deleted": [str(self.state_dir / d) for d in self.local],
                "kept": self.kept, "notes": self.notes}


def plan_reset(settings: Mapping[str, Any], pipeline: Pipeline, to: str, state_root: Path) -> ResetPlan:
    """The reset of service ``pipeline`` to ``to``, computed, nothing changed yet."""
    group = pipeline.name
    refuse_while_running(settings, group, "a reset", "reset")
    sources = [s.topic.name for s in pipeline.sources()]
    positions = resolve_positions(settings, sources, to, option="--to", group=group)
    found = survey(settings, pipeline, state_root)
    cluster = Cluster(settings)
    try:
        before = cluster.committed(group)
        mine = {*pipeline.repartition_topics(), *(pipeline.changelog_topic(s) for s in pipeline.changelogged_stores())}
        recreated = {t.topic: (found.topics[t.topic], cluster.overrides(t.topic))
                     for t in found.internal if t.topic in mine}
    finally:
        cluster.close()
    offsets = {tp: (before.get(tp), after) for tp, after in positions.items()}
    forgotten = sorted(tp for tp in before if tp not in positions)
    deleted = [t.topic for t in found.internal if t.topic not in recreated]
    written = {"outputs": sorted({t.name for t in pipeline.sink_topics()} - set(sources)),
               "dead letters": [pipeline.dead_letter.name], "backfill ledger": [ledger_topic(group)],
               "re-drive ledger": [redrive_ledger_topic(group)], "skip list": [skips_topic(group)]}
    kept = {what: [t for t in names if t in found.topics] for what, names in written.items()}
    plan = ResetPlan(group, offsets, forgotten, recreated, deleted, found.state_dir, found.stores_here,
                     {what: names for what, names in kept.items() if names})
    plan.notes = _notes(plan, pipeline)
    return plan


def apply_reset(settings: Mapping[str, Any], plan: ResetPlan) -> ResetPlan:
    """Delete the local stores (a held one stops it here, before the cluster is touched), the
    group with its committed offsets, the internal topics; create those of the pipeline anew;
    then commit the sources' offsets. Refused again if a member joined meanwhile."""
    refuse_while_running(settings, plan.group, "a reset", "reset")
    drop_local(plan.state_dir, plan.local)
    if plan.forgotten:
        delete_group(settings, plan.group)  # an empty group's offsets go with it; the sources' come back below
    remove_topics(settings, plan.deleted)
    recreate_topics(settings, plan.recreated)
    refuse_while_running(settings, plan.group, "a reset", "reset")
    commit_offsets(settings, plan.group, {tp: after for tp, (_, after) in plan.offsets.items()})
    plan.applied = True
    return plan


def _notes(plan: ResetPlan, pipeline: Pipeline) -> list[str]:
    """What the reset leaves, and what that means for the rerun: one line each."""
    notes = []
    outputs = plan.kept.get("outputs", [])
    if outputs:
        first = outputs[0]
        notes.append(f"outputs kept: {', '.join(outputs)}. The rerun appends its results after the earlier run's, "
                     "so a reader from their start sees both. To write to new topics instead, rename them in the "
                     f"pipeline (e.g. Topic(\"{first}-2\")) before the service starts again")
    if "dead letters" in plan.kept:
        notes.append(f"dead letters kept: {pipeline.dead_letter.name} (the user's data); the rerun's are appended")
    if "backfill ledger" in plan.kept:
        [ledger] = plan.kept["backfill ledger"]
        notes.append(f"backfill ledger kept: {ledger}: its backfills' outputs are still in their topics; "
                     f"fw replay {pipeline.target or 'MODULE:PIPELINE'} --clean forgets them")
    if "re-drive ledger" in plan.kept:
        [ledger] = plan.kept["re-drive ledger"]
        notes.append(f"re-drive ledger kept: {ledger}: the dead letters it names stay re-driven; re-drive records "
                     "in the sources after --to are processed again")
    if "skip list" in plan.kept:
        [skips] = plan.kept["skip list"]
        notes.append(f"skip list kept: {skips}: the records it names are dead-lettered again if a step raises on "
                     f"them (fw group skips {pipeline.target or pipeline.name} lists them)")
    notes.append(ELSEWHERE.format(service=pipeline.name))
    return notes
