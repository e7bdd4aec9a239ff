"""What a service left on the cluster and on this host, found by the names the framework
gives it (``framework.pipeline.internal``), and ``fw state drop``.

``survey`` lists the service's internal topics (every ``<service>-<store>-changelog`` and
``<service>-<step>-repartition`` the cluster has, of the current pipeline and of earlier
releases; not those of a longer-named service such as ``orders-enrich`` next to ``orders``)
and its stores under ``state.dir/<service>`` here. ``fw group reset`` (``framework.ops.groups``)
empties all of it; ``fw state drop`` deletes one store of an earlier release: its changelog
and its local copies. Both are refused while the group has members, as Kafka Streams' reset
tool is: a running member would go on from its own state and positions.

Only this host's state directory can be reached: other hosts that ran a member keep their
copies until deleted there. Nothing goes wrong if they stay: each copy records the topic id of
the changelog it reflects, and a member finds a copy of a changelog deleted or created anew
stale and rebuilds it (docs/state-format.md, section 5).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from framework.errors import RuntimeProblem
from framework.kafka.groups import active_members, remove_topics
from framework.kafka.inspect import Cluster
from framework.pipeline.definition import Pipeline
from framework.pipeline.internal import (
    CHANGELOG,
    Internal,
    claimed_by,
    internal_topics,
    known_services,
    store_copies,
)
from framework.runtime.topics import user_topics
from framework.state.directory import store_dirs
from framework.state.rocksdb.backend import RocksDBBackend


@dataclass(frozen=True)
class Survey:
    """The cluster's topics (name -> partitions), the consumer groups, the service's internal
    topics among them, and the stores ``state_dir/<service>`` holds here."""

    topics: dict[str, int]
    groups: list[str]
    internal: list[Internal]
    state_dir: Path
    stores_here: list[str]


def survey(settings: Mapping[str, Any], pipeline: Pipeline, state_root: Path) -> Survey:
    """What ``pipeline``'s service has on the cluster and in ``state_root`` on this host."""
    cluster = Cluster(settings)
    try:
        topics = {t.name: t.partitions for t in cluster.topics()}
        groups = cluster.groups()
    finally:
        cluster.close()
    mine = [*pipeline.repartition_topics(), *(pipeline.changelog_topic(s) for s in pipeline.changelogged_stores())]
    users = {*user_topics(pipeline, 1), pipeline.dead_letter.name}  # never internal, whatever their names
    internal = [t for t in internal_topics(pipeline.name, topics, known_services(topics, groups), mine)
                if t.topic not in users]
    state_dir = state_root.resolve() / pipeline.name
    return Survey(topics, groups, internal, state_dir, store_dirs(state_root.resolve(), pipeline.name))


def refuse_while_running(settings: Mapping[str, Any], group: str, action: str, then: str) -> None:
    """A ``RuntimeProblem`` while ``group`` has members: ``action`` would race them."""
    members = active_members(settings, group)
    if members:
        raise RuntimeProblem(f"consumer group {group!r} has {len(members)} active member(s) ({', '.join(members)}): "
                             f"{action} would race them. Fix: stop every instance of the service, then {then}")


def drop_local(state_dir: Path, stores: list[str]) -> None:
    """Delete the local copies of ``stores`` under ``state_dir`` (``state.dir/<service>``);
    a partition a live process holds is refused in one line (``StoreLocked``)."""
    backend = RocksDBBackend(state_dir.parent)
    for store in stores:
        backend.drop_store(state_dir.name, store)
    if state_dir.is_dir() and not any(state_dir.iterdir()):
        state_dir.rmdir()


ELSEWHERE = ("other hosts that ran a member keep their copies under their FW_STATE_DIR/{service}; a member "
             "there finds them stale and rebuilds them, so deleting them only frees disk space")


# -- fw state drop ------------------------------------------------------------------------------


@dataclass
class DropPlan:
    """``fw state drop``: the store's changelog (None when the cluster has none) and its local
    copies here (a global table's further copies ``<table>@<n>`` included)."""

    service: str
    store: str
    changelog: str | None
    state_dir: Path
    local: list[str]
    applied: bool = False
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"service": self.service, "store": self.store, "applied": self.applied,
                "changelog_deleted": self.changelog, "state_dir": str(self.state_dir),
                "local_deleted": [str(self.state_dir / d) for d in self.local], "notes": self.notes}


def plan_drop(settings: Mapping[str, Any], pipeline: Pipeline, store: str, state_root: Path) -> DropPlan:
    """The drop of ``store`` of ``pipeline``'s service, computed, nothing changed yet; refused
    for a store the pipeline has and while the group has members."""
    target = pipeline.target or "MODULE:PIPELINE"
    if store in pipeline.store_names():
        raise RuntimeProblem(
            f"store {store!r} is a store of the pipeline of {pipeline.name!r} ({target}): dropping it would take "
            f"the state the service uses. Fix: to start the service over, fw group reset {target} --to POSITION; "
            "to drop this store, remove or rename its step first")
    refuse_while_running(settings, pipeline.name, "dropping a store", "drop it")
    found = survey(settings, pipeline, state_root)
    topic = pipeline.changelog_topic(store)
    ours = {t.topic for t in found.internal}
    other = claimed_by(pipeline.name, topic, known_services(found.topics, found.groups))
    if topic in found.topics and topic not in ours and other is not None:
        raise RuntimeProblem(f"topic {topic} is a changelog of service {other!r} (its name extends "
                             f"{pipeline.name!r}), not of {pipeline.name!r}: nothing dropped. Fix: drop it as a "
                             "store of that service, if that is what you meant")
    local = store_copies(found.stores_here, store)
    if topic not in ours and not local:
        stale = sorted({t.name for t in found.internal if t.kind == CHANGELOG} - set(pipeline.store_names()))
        raise RuntimeProblem(
            f"service {pipeline.name!r} has no store {store!r} to drop: no topic {topic} on "
            f"{settings.get('bootstrap.servers', '?')} and no local copy under {found.state_dir}. Stores of earlier "
            f"releases there: {', '.join(stale) or 'none'}")
    notes = [ELSEWHERE.format(service=pipeline.name)]
    return DropPlan(pipeline.name, store, topic if topic in ours else None, found.state_dir, local, notes=notes)


def apply_drop(settings: Mapping[str, Any], plan: DropPlan) -> DropPlan:
    """Delete the local copies (a held one stops it first), then the changelog."""
    refuse_while_running(settings, plan.service, "dropping a store", "drop it")
    drop_local(plan.state_dir, plan.local)
    if plan.changelog:
        remove_topics(settings, [plan.changelog])
    plan.applied = True
    return plan
