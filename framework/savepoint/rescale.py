"""Rescaling: a savepoint restored onto another partition count (``fw savepoint restore
--partitions N``), and the checks of ``fw rescale`` (``check_live``), which takes the savepoint,
adds the partitions and restores it in one command (``restore.rescale_service``;
docs/savepoints.md, "Rescaling").

A service's tasks are its sources' partitions, and task ``p``'s state holds the keys the
framework's partitioner sends to ``p``. On ``N`` partitions (``Rescaling``):

- every store entry with a record key goes to the task the partitioner gives that key on ``N``
  (timers with their keys); an entry of no key (a step's ``00 "step"`` signature) goes to every
  task, and the time store's clocks become one clock, each input and step at the minimum over
  the old tasks (``framework.time.clock.rescaled``), which every new task starts with;
- records in flight in repartition topics go to the partition their key has on ``N``; their
  watermark control records are left out (their upstream tasks are gone; the new ones send
  their own, and the restored clocks start at the minimum).

Records of the sources produced for the old count and not processed would reach a task that
does not hold their key's state. So a rescale restores only a savepoint whose sources were all
processed (``check_drained``: no committed record past the group's offset in any source
partition), and refuses
when a partition of the old count holds records produced after it (``rescaled_offsets``): which
count they were produced for cannot be told. A source topic created anew since the savepoint
(another topic id: the only way to fewer partitions, since Kafka cannot take partitions away)
is read from its start. A table read from its own topic is refused: its records stay in the
partitions of the old count.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from framework.engine.entries import record_key
from framework.engine.partitioner import partition_for
from framework.engine.task import CLOCK_KEY
from framework.errors import RuntimeProblem, StateError
from framework.kafka.admin import topic_ids
from framework.kafka.inspect import Cluster
from framework.pipeline.definition import TIME_STORE, Pipeline
from framework.savepoint.create import unprocessed_records
from framework.savepoint.files import InFlight, Pair, is_control
from framework.savepoint.manifest import Manifest
from framework.serde.values import ValueCodec
from framework.time.clock import rescaled

TP = tuple[str, int]


@dataclass(frozen=True)
class Rescaling:
    """Moves a savepoint's entries and records in flight onto ``tasks`` partitions."""

    tasks: int
    codec: ValueCodec
    internal: frozenset[str] = field(default_factory=frozenset)  # the service's repartition topics

    @classmethod
    def of(cls, pipeline: Pipeline, tasks: int) -> Rescaling:
        return cls(tasks, ValueCodec(pipeline.types), frozenset(pipeline.repartition_topics()))

    def entries(self, store: str, pairs: Iterable[Pair]) -> Iterator[Pair]:
        """``store``'s entries on the new tasks: each keyed one to its key's task, in the order
        read; then each entry of no key to every task."""
        keyless: dict[bytes, list[bytes]] = {}
        for _p, key, value in pairs:
            raw = record_key(key)
            if raw is None:
                keyless.setdefault(key, []).append(value)
            else:
                yield partition_for(raw, self.tasks), key, value
        for key, values in sorted(keyless.items()):
            value = self._one(store, key, values)
            for task in range(self.tasks):
                yield task, key, value

    def _one(self, store: str, key: bytes, values: list[bytes]) -> bytes:
        """The value every new task gets for an entry of no key: the merged clock, or the one
        value all old tasks had (a step's signature)."""
        if store == TIME_STORE and key == CLOCK_KEY:
            merged = rescaled([self.codec.decode(v) for v in values], self.tasks, self.internal)
            return self.codec.encode(merged)
        if len(set(values)) > 1:
            raise StateError(f"store {store!r} holds entry {key.hex()}, which has no record key, with "
                             f"{len(set(values))} different values on the old tasks: no one of them belongs on "
                             "every new task. Fix: restore the savepoint at its own partition count")
        return values[0]

    def records(self, records: Iterable[InFlight]) -> Iterator[InFlight]:
        """Records in flight on the new partitions: a keyed one where its key goes, one without a
        key where its partition number falls; watermark control records left out."""
        for p, offset, ts, key, value, headers in records:
            if is_control(key, value, headers):
                continue
            yield (p % self.tasks if key is None else partition_for(key, self.tasks)), offset, ts, key, value, headers


def check_rescalable(pipeline: Pipeline) -> None:
    tables = [s for s in pipeline.store_names() if pipeline.table_source(s) is not None]
    if tables:
        raise RuntimeProblem(f"{pipeline.name!r} reads a table from its own topic ({', '.join(sorted(tables))}): its "
                             "records stay in the partitions of the old count, where the new tasks would not find "
                             "their keys, so rescaling it is not offered. Fix: keep its partition count")


def unprocessed(lags: Mapping[TP, int], old: int, new: int) -> str:
    """What records of the sources not yet processed would do after a rescale: part of a line."""
    listed = ", ".join(f"{t}[{p}] lag {n}" for (t, p), n in sorted(lags.items()))
    return (f"({listed}): produced for {old} partition{'s' if old != 1 else ''}, they would not meet their keys' "
            f"state on {new}")


def check_drained(manifest: Manifest, path: Path, tasks: int, target: str) -> None:
    """A rescale restores only a savepoint whose sources were all processed."""
    if not manifest.sources:
        raise RuntimeProblem(f"savepoint {path} does not record its sources' ends (an earlier release made it), so "
                             "whether every record of them was processed cannot be told. Fix: take a new savepoint "
                             f"(fw rescale {target} --partitions {tasks} takes one)")
    lags = {(t, p): n for t, info in manifest.sources.items() for p, n in info.unprocessed.items() if n}
    if lags:
        raise RuntimeProblem(f"savepoint {path} was taken before the service processed every record of its "
                             f"sources {unprocessed(lags, manifest.partitions, tasks)}. Fix: stop the producers, "
                             "run the service at its old partition count until its lag is 0, stop it, then "
                             f"rescale (fw rescale {target} --partitions {tasks} takes the savepoint itself)")


def rescaled_offsets(cluster: Cluster, manifest: Manifest, pipeline: Pipeline, path: Path,
                     tasks: int) -> dict[TP, int]:
    """The group's offsets after a rescale: each source partition of the savepoint's topic at
    its offset there (its end: ``check_drained``), a partition added since at its start, a
    topic created anew since (or one the savepoint does not have) from its start; each
    repartition topic at 0. A partition of the old count holding records produced after the
    savepoint is refused."""
    names = sorted({s.topic.name for s in pipeline.sources()})
    ids = topic_ids(cluster.admin, names)
    out: dict[TP, int] = {}
    since: list[str] = []
    for topic in names:
        bounds, saved = cluster.offsets(topic), manifest.sources.get(topic)
        same = saved is not None and saved.id == ids[topic]
        for p, (start, end) in sorted(bounds.items()):
            was = saved.ends.get(p) if same and saved is not None else None
            if was is not None and end > was:
                since.append(f"{topic}[{p}] offsets {was} to {end - 1}")
            out[(topic, p)] = start if was is None else was
    if since:
        raise RuntimeProblem(
            f"records were produced after savepoint {path} to partitions of the old count ({', '.join(since)}): "
            f"those produced for {manifest.partitions} partitions would not meet their keys' state on {tasks}, and "
            "which they are cannot be told. Fix: keep the producers stopped from the savepoint until the restore "
            "(fw rescale does both at once), and restore a savepoint taken after the service processed these")
    out.update({(t, p): 0 for t in pipeline.repartition_topics() for p in range(tasks)})
    return out


def check_live(settings: Mapping[str, Any], pipeline: Pipeline, sources: list[str], partitions: int,
                target: str) -> int:
    """The service's partition count, once it is known to be rescalable to ``partitions`` now:
    more partitions than it has, and every source record processed."""
    cluster = Cluster(settings)
    try:
        old = len(cluster.partitions(sources[0]))
        committed = cluster.committed(pipeline.name)
        bounds = {t: cluster.offsets(t) for t in sources}
    finally:
        cluster.close()
    if partitions == old:
        raise RuntimeProblem(f"{pipeline.name!r} has {old} partitions already. Fix: name another count with --partitions")
    if partitions < old:
        raise RuntimeProblem(
            f"{pipeline.name!r} has {old} partitions and Kafka cannot take partitions away from a topic: {partitions} "
            f"partitions need its sources ({', '.join(sources)}) created anew. Fix: with the service stopped and its "
            f"lag 0, take a savepoint (fw savepoint create {target}), stop the producers, create the sources anew "
            f"with {partitions} partitions, then fw savepoint restore {target} PATH --partitions {partitions}")
    lags = unprocessed_records(settings, pipeline.name, committed, bounds)
    if lags:
        raise RuntimeProblem(
            f"the sources of {pipeline.name!r} hold records it has not processed {unprocessed(lags, old, partitions)}"
            f". Fix: stop the producers, run the service until its lag is 0 (fw group describe {target} shows it), "
            "stop it, then rescale")
    return old
