"""``fw savepoint restore``: a stopped service continues from a savepoint as if nothing had
happened after it, through the replay bootstrap's handover (``framework.replay.handover``).

Planned first, nothing changed (``plan_restore``, all of ``--dry-run``), and refused in one
line: while the group has members; for a savepoint of another service or format; for sources
of another partition count than the savepoint's, unless ``--partitions`` names theirs (then it
is a rescale, with the checks of ``framework.savepoint.rescale``); for a store the pipeline no
longer has (its state would be lost) unless ``allow_dropped``; for a store whose step changed
kind (its ``00 "step"`` signature differs: the step could not read it); and for a source offset
no longer in its topic (retention deleted the records after it: the service would skip them).
Stores are matched to steps by name: a step the savepoint does not have starts empty. Then
every file the restore writes from is read whole and checked against the manifest (each file's
SHA-256 and rows, each store's entries per partition, each topic's records in flight:
``framework.savepoint.verify``), and a damaged or altered savepoint is refused in one line
naming the file. ``--dry-run`` reads and checks all of it too.

Then (``apply_restore``), once the files are found unchanged since they were checked:

1. the local copies of every store under ``state.dir/<service>`` on this host are deleted;
2. the pipeline's changelogs and repartition topics are deleted and created anew (the
   sources' partition count, their config). Their new topic ids make any other host's local copies stale:
   its member rebuilds them from the changelogs instead of merging (docs/state-format.md, 5);
3. each store's entries go to partition ``p`` of its changelog (plainly, idempotent), and each
   repartition topic's records in flight to their partition, in their order, with their
   timestamps and headers: unprocessed again (on another count, each where its key goes now:
   ``Rescaling``). A table read from its own topic is not written:
   the offsets below make the service rebuild it from its topic;
4. the group's offsets become the savepoint's (the group is deleted, then they are committed):
   each repartition topic's at 0, where its records in flight now start.

A restore that fails on the way leaves the service's state incomplete: its line says what was
changed already, not to start the service, and the ``fw savepoint restore`` that finishes it
(the same savepoint again: every step is redone).

``rescale_service`` is ``fw rescale``: the savepoint, the sources' new partitions and the restore
onto them in one command.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from framework.engine.task import describe_signature
from framework.errors import FrameworkError, RuntimeProblem
from framework.kafka.admin import add_partitions, admin_client
from framework.kafka.clients import KafkaOutput
from framework.kafka.connect import client_failure
from framework.kafka.groups import commit_offsets, delete_group, recreate_topics
from framework.kafka.inspect import Cluster
from framework.ops.cleanup import ELSEWHERE, drop_local, refuse_while_running
from framework.pipeline.definition import Pipeline
from framework.pipeline.internal import CHANGELOG, changelog_topic
from framework.records import Headers
from framework.savepoint.create import create_savepoint
from framework.savepoint.files import InFlight, Pair, in_flight_records, store_pairs
from framework.savepoint.manifest import Manifest
from framework.savepoint.rescale import (
    Rescaling,
    check_drained,
    check_live,
    check_rescalable,
    rescaled_offsets,
)
from framework.savepoint.verify import Verified, unchanged, verify
from framework.state.base import STATE_FORMAT
from framework.state.directory import store_dirs

TP = tuple[str, int]
_WRITE_TIMEOUT_S = 300.0


@dataclass
class RestorePlan:
    """What a restore changes: the entries it writes per store (``written``), the stores that
    start empty and those rebuilt from their own topic, the topics it creates anew (name ->
    partitions, config), the records in flight it writes back, the offsets it commits, the
    local stores it deletes; and the savepoint's stores it leaves out (``dropped``);
    ``verified``: what the files read and checked were."""

    service: str
    path: Path
    manifest: Manifest
    written: dict[str, int]
    empty: list[str]
    tables: list[str]
    dropped: list[str]
    recreated: dict[str, tuple[int, dict[str, str]]]
    in_flight: dict[str, int]
    offsets: dict[TP, int]
    state_dir: Path
    local: list[str]
    applied: bool = False
    notes: list[str] = field(default_factory=list)
    rescale: Rescaling | None = None  # onto another partition count than the savepoint's
    verified: Verified = field(default_factory=Verified)
    target: str = "MODULE:PIPELINE"  # the service as fw commands name it

    def as_dict(self) -> dict[str, Any]:
        return {"service": self.service, "savepoint": str(self.path), "applied": self.applied,
                "stores_written": self.written, "stores_empty": self.empty, "tables_from_topic": self.tables,
                "stores_dropped": self.dropped, "topics_recreated": sorted(self.recreated),
                "in_flight_written": self.in_flight,
                "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(self.offsets.items())],
                "state_dir": str(self.state_dir), "local_deleted": [str(self.state_dir / d) for d in self.local],
                "files_verified": sorted(self.verified.digests), "checksums": self.verified.checksummed,
                "partitions": {"savepoint": self.manifest.partitions,
                               "restored": self.manifest.partitions if self.rescale is None else self.rescale.tasks},
                "notes": self.notes}


def plan_restore(settings: Mapping[str, Any], pipeline: Pipeline, path: Path, state_root: Path, *,
                 allow_dropped: bool = False, partitions: int | None = None) -> RestorePlan:
    """The restore of the savepoint at ``path`` onto service ``pipeline``, computed and
    checked (module docstring), nothing changed yet. ``partitions``: the count the service
    runs on after it, which its sources must have; another than the savepoint's rescales it
    (``framework.savepoint.rescale``)."""
    manifest = Manifest.load(path)
    _check_service(manifest, pipeline, path)  # what the savepoint and the pipeline tell, before the cluster
    dropped = _check_dropped(manifest, pipeline, path, allow_dropped)
    _check_kinds(manifest, pipeline)
    rescaling = partitions is not None and partitions != manifest.partitions
    if rescaling:
        check_rescalable(pipeline)
        check_drained(manifest, path, cast(int, partitions), pipeline.target or "MODULE:PIPELINE")
    ours = set(pipeline.store_names())
    stores = [s for s in manifest.stores if s in ours and pipeline.table_source(s) is None]
    verified = verify(path, manifest, stores, [t for t in manifest.repartition if t in pipeline.repartition_topics()])
    refuse_while_running(settings, pipeline.name, "a restore", "restore the savepoint")
    cluster = Cluster(settings)
    try:
        tasks = len(cluster.partitions(pipeline.sources()[0].topic.name))
        _check_count(pipeline, path, manifest.partitions, tasks, partitions)
        offsets = (rescaled_offsets(cluster, manifest, pipeline, path, tasks) if rescaling
                   else _offsets(cluster, manifest, pipeline, path))
        existing = {t.name for t in cluster.topics()}
        internal = [*(pipeline.changelog_topic(s) for s in pipeline.changelogged_stores()),
                    *pipeline.repartition_topics()]
        recreated = {t: (tasks, _config(cluster, t, existing)) for t in internal}
    finally:
        cluster.close()
    rescale = Rescaling.of(pipeline, tasks) if rescaling else None
    written = {s: manifest.stores[s].total if rescale is None else sum(1 for _ in _entries(path, manifest, s, rescale))
               for s in stores}
    plan = RestorePlan(
        pipeline.name, path, manifest, written,
        empty=sorted(ours - set(manifest.stores)),
        tables=sorted(s for s in ours if pipeline.table_source(s) is not None),
        dropped=dropped, recreated=recreated,
        in_flight=dict(verified.records),  # the user's records: a topic's control records are written back too
        offsets=offsets, state_dir=state_root.resolve() / pipeline.name,
        local=store_dirs(state_root.resolve(), pipeline.name), rescale=rescale, verified=verified,
        target=pipeline.target or "MODULE:PIPELINE")
    if rescale is not None:
        plan.in_flight = {t: sum(1 for _ in _in_flight(plan, t)) for t in plan.in_flight}
    plan.notes = _notes(plan, pipeline)
    return plan


def rescale_service(settings: Mapping[str, Any], pipeline: Pipeline, partitions: int, state_root: Path,
                    path: Path | None = None) -> tuple[Path, RestorePlan]:
    """``fw rescale``: with the service stopped and its sources processed to their ends, take a
    savepoint, add partitions to the sources, and restore the savepoint onto them. Returns the
    savepoint's path and the applied ``RestorePlan``."""
    target = pipeline.target or "MODULE:PIPELINE"
    check_rescalable(pipeline)
    refuse_while_running(settings, pipeline.name, "a rescale", "rescale it")
    sources = sorted({s.topic.name for s in pipeline.sources()})
    old = check_live(settings, pipeline, sources, partitions, target)
    where, _manifest = create_savepoint(settings, pipeline, path)
    check_live(settings, pipeline, sources, partitions, target)  # produced meanwhile: nothing changed yet
    add_partitions(admin_client(settings), {t: partitions for t in sources})
    try:
        plan = plan_restore(settings, pipeline, where, state_root, partitions=partitions)
        return where, apply_restore(settings, plan)
    except RestoreIncomplete:
        raise  # it names the fw savepoint restore that finishes the rescale
    except FrameworkError as exc:
        raise RuntimeProblem(f"{exc} (the sources have {partitions} partitions now, the service's state is still of "
                             f"{old}: fw savepoint restore {target} {where} --partitions {partitions} finishes the "
                             "rescale once that is fixed)") from exc


def _check_count(pipeline: Pipeline, path: Path, saved: int, tasks: int, partitions: int | None) -> None:
    """The sources must have the count the service is restored onto: the savepoint's, or ``partitions``."""
    if partitions is not None and tasks != partitions:
        fix = (f"add partitions to them (fw rescale {pipeline.target or 'MODULE:PIPELINE'} --partitions {partitions} "
               "takes a savepoint, adds them and restores it)" if partitions > tasks else
               f"create them anew with {partitions} partitions (Kafka cannot take partitions away)")
        raise RuntimeProblem(f"--partitions {partitions}: the sources of {pipeline.name!r} have {tasks} partitions. "
                             f"Fix: {fix}")
    if partitions is None and tasks != saved:
        raise RuntimeProblem(
            f"savepoint {path} has {saved} partitions and the topics of {pipeline.name!r} have {tasks}. Fix: "
            f"restore it onto topics of {saved} partitions, or pass --partitions {tasks} to rescale it onto these")


def _entries(path: Path, manifest: Manifest, store: str, rescale: Rescaling | None) -> Iterator[Pair]:
    pairs = store_pairs(path / manifest.stores[store].path)
    return pairs if rescale is None else rescale.entries(store, pairs)


def _in_flight(plan: RestorePlan, topic: str) -> Iterator[InFlight]:
    records = in_flight_records(plan.path / plan.manifest.repartition[topic].path)
    return records if plan.rescale is None else plan.rescale.records(records)


def apply_restore(settings: Mapping[str, Any], plan: RestorePlan) -> RestorePlan:
    """Delete the local stores (a held one stops it here, before the cluster is touched),
    recreate the changelogs and repartition topics, write the entries and the records in
    flight, then set the group's offsets. Refused, nothing changed, if a member joined since
    the plan or a file changed since it was checked; a failure after that is a
    ``RestoreIncomplete`` saying what was changed and how to finish."""
    refuse_while_running(settings, plan.service, "a restore", "restore the savepoint")
    unchanged(plan.path, plan.verified.digests)
    progress = _Progress()
    try:
        _apply(settings, plan, progress)
    except (Exception, KeyboardInterrupt) as exc:
        if not progress.done and plan.local:
            raise  # deleting the first local store failed: a cache of its changelog, rebuilt from it at start
        raise progress.incomplete(plan, exc) from exc
    plan.applied = True
    return plan


def _apply(settings: Mapping[str, Any], plan: RestorePlan, progress: _Progress) -> None:
    for store in plan.local:
        progress.now(f"deleting the local state of store {store} in {plan.state_dir}")
        drop_local(plan.state_dir, [store])
    progress.now(f"deleting and creating anew {', '.join(sorted(plan.recreated))}")
    recreate_topics(settings, plan.recreated)
    output = KafkaOutput(settings, None)  # idempotent; the service reads the records read_committed
    for store in plan.written:
        progress.now(f"writing the entries of store {store}")
        topic = changelog_topic(plan.service, store)
        for p, key, value in _entries(plan.path, plan.manifest, store, plan.rescale):
            output.produce(topic, key, value, 0, None, p)
        output.poll()
    for topic in plan.in_flight:
        progress.now(f"writing the records in flight of {topic}")
        for p, _offset, ts, rkey, rvalue, headers in _in_flight(plan, topic):
            output.produce(topic, rkey, rvalue, ts, cast(Headers, headers), p)
        output.poll()
    progress.now("flushing the written records")
    output.flush(_WRITE_TIMEOUT_S)
    progress.now("committing the group's offsets")
    refuse_while_running(settings, plan.service, "a restore", "restore the savepoint")
    delete_group(settings, plan.service)  # offsets the savepoint does not have go with it
    if plan.offsets:
        commit_offsets(settings, plan.service, plan.offsets)


class RestoreIncomplete(RuntimeProblem):
    """A restore failed after it had begun to change the service: the line says what was
    changed, and that running the same restore again finishes it."""


class _Progress:
    """The step a restore is at, and those it completed: what a failure says was changed."""

    def __init__(self) -> None:
        self.done: list[str] = []
        self.current: str | None = None

    def now(self, step: str) -> None:
        if self.current is not None:
            self.done.append(self.current)
        self.current = step

    def incomplete(self, plan: RestorePlan, exc: BaseException) -> RestoreIncomplete:
        cause = str(exc) if isinstance(exc, FrameworkError) else client_failure(exc) or (
            f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
        said, _, fix = cause.splitlines()[0].partition(". Fix: ")
        command = f"fw savepoint restore {plan.target} {plan.path}" + (
            f" --partitions {plan.rescale.tasks}" if plan.rescale is not None else "") + (
            " --allow-dropped-state" if plan.dropped else "")
        then = f"{fix.rstrip('.')}, then" if fix else "once that is fixed,"
        return RestoreIncomplete(
            f"the restore of savepoint {plan.path} onto {plan.service!r} failed while {self.current} ({said}), after "
            f"{'; '.join(self.done)}: the service's state is incomplete, do not start it. Fix: {then} run the same "
            f"restore again ({command}): it redoes every step")


def _check_service(manifest: Manifest, pipeline: Pipeline, path: Path) -> None:
    if manifest.service != pipeline.name:
        raise RuntimeProblem(f"savepoint {path} is of service {manifest.service!r}, not of {pipeline.name!r}. Fix: "
                             f"restore a savepoint of {pipeline.name!r} (fw savepoint list {pipeline.name})")
    if manifest.state_format != STATE_FORMAT:
        raise RuntimeProblem(f"savepoint {path} holds state format {manifest.state_format}; this release reads "
                             f"format {STATE_FORMAT}. Fix: restore it with the release that made it")


def _check_dropped(manifest: Manifest, pipeline: Pipeline, path: Path, allow: bool) -> list[str]:
    """The savepoint's stores, and repartition topics with records in flight, that the
    pipeline no longer has: refused unless ``allow``."""
    stores = sorted(set(manifest.stores) - set(pipeline.store_names()))
    flight = sorted(t for t, r in manifest.repartition.items() if r.records and t not in pipeline.repartition_topics())
    if (stores or flight) and not allow:
        what = [f"store{'s' if len(stores) > 1 else ''} {', '.join(stores)}"] if stores else []
        what += [f"records in flight in {', '.join(flight)}"] if flight else []
        raise RuntimeProblem(
            f"savepoint {path} holds state the pipeline of {pipeline.name!r} no longer has: {'; '.join(what)}. "
            "Restoring leaves it out. Fix: give the steps their names back, or pass --allow-dropped-state to "
            "restore without it")
    return stores + flight


def _check_kinds(manifest: Manifest, pipeline: Pipeline) -> None:
    """A store whose step changed kind cannot be read by it (``Task`` would refuse at start)."""
    changed = []
    for store, info in sorted(manifest.stores.items()):
        step = pipeline.steps.get(store)
        if info.signature is None or step is None or not step.stateful:
            continue
        want = json.loads(json.dumps(step.state_signature()))
        if info.signature != want:
            changed.append(f"store {store!r} was written by {describe_signature(info.signature)}, and step {store!r} "
                           f"is now {describe_signature(want)}")
    if changed:
        raise RuntimeProblem(f"{'; '.join(changed)}: the step cannot read that state. Fix: give the changed step a "
                             "new name (it starts empty; --allow-dropped-state leaves the old state out), or restore "
                             "onto the release that made the savepoint")


def _offsets(cluster: Cluster, manifest: Manifest, pipeline: Pipeline, path: Path) -> dict[TP, int]:
    """The group's offsets after the restore: the savepoint's, but each repartition topic of the
    pipeline at 0 (created anew, its records in flight first); offsets of topics gone from the
    cluster and of the savepoint's other repartition topics are left out. A source offset
    before its log's start is refused: the records after the savepoint were deleted."""
    existing = {t.name for t in cluster.topics()}
    out: dict[TP, int] = {}
    for topic, parts in sorted(manifest.offsets.items()):
        if topic in manifest.repartition or topic in pipeline.repartition_topics() or topic not in existing:
            continue
        bounds = cluster.offsets(topic)
        for p, offset in sorted(parts.items()):
            start, end = bounds.get(p, (0, 0))
            if not start <= offset <= end:
                raise RuntimeProblem(
                    f"savepoint {path} continues {topic}[{p}] at offset {offset}, and the partition now holds offsets "
                    f"{start} to {end}: {'the records after it were deleted (retention)' if offset < start else 'the topic was created anew'}"
                    ", so the service cannot continue where the savepoint stopped. Fix: restore a later savepoint")
            out[(topic, p)] = offset
    for topic in pipeline.repartition_topics():
        out.update({(topic, p): 0 for p in range(manifest.partitions)})
    return out


def _config(cluster: Cluster, topic: str, existing: set[str]) -> dict[str, str]:
    """The config a topic is created anew with: its own when it exists, else a new one's."""
    if topic in existing:
        return cluster.overrides(topic)
    return {"cleanup.policy": "compact"} if topic.endswith(f"-{CHANGELOG}") else {}


def _notes(plan: RestorePlan, pipeline: Pipeline) -> list[str]:
    notes = []
    if plan.tables:
        notes.append(f"tables read from their own topic ({', '.join(plan.tables)}) are rebuilt from it up to the "
                     "restored offsets: their history is what the topic holds now")
    if plan.dropped:
        notes.append(f"left out of the restore: {', '.join(plan.dropped)}; the changelogs of dropped stores stay on "
                     f"the cluster (fw state drop {pipeline.target or 'MODULE:PIPELINE'} STORE deletes one)")
    notes.append(ELSEWHERE.format(service=pipeline.name))
    return notes
