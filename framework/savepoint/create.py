"""``fw savepoint create``: a complete, consistent snapshot of a service.

1. A running service's members are each held at a checkpoint (``HeldService``;
   ``framework.runtime.hold``): each commits its state, outputs and input offsets, then pauses
   its inputs while the savepoint is read. With every member held (or the service stopped),
   the changelogs and the group's offsets are one consistent cut, as if the service had stopped.
2. The group's committed offsets are read, each repartition topic's end, each source's topic
   id and ends (a rescale restores only a savepoint whose sources were all processed), and the
   ends of the topics the service writes.
3. Every store partition of every task is rebuilt in memory by the runtime's own restore
   (``rebuild_stores``; with ``fw savepoint create --master``, by a Spark job instead:
   ``framework.replay.snapshot``, the same entries): each changelog read to its end,
   read_committed. Those ends are the state as of the cut, the checkpoint that committed
   those offsets (exactly-once: both in one transaction). A table read from its own topic is
   rebuilt from that topic up to the committed offset, as a member would.
4. The records of each repartition topic between the committed offset and the end are read:
   written by an upstream task whose sources' offsets are committed, not yet processed by the
   downstream task. They are part of the state: a restore writes them back as unprocessed.
5. The stores, the records in flight and the manifest are written, the manifest last, with
   each file's SHA-256 and rows (``framework.savepoint.verify``: a restore checks them before it
   changes anything); then the members are released. A rebalance while they were held (or, of a stopped service, a member that joined
   meanwhile) makes the savepoint void: it is deleted.

At-least-once services checkpoint the same way (state, then offsets); a member killed between
the two leaves state ahead of its offsets, which the savepoint keeps as it is, as a restart
would.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from framework.engine.entries import StoreLayout
from framework.errors import RuntimeProblem
from framework.kafka.admin import topic_ids
from framework.kafka.clients import read_range
from framework.kafka.inspect import Cluster
from framework.ops.state import rebuild_stores
from framework.pipeline.definition import Pipeline
from framework.savepoint.files import (
    InFlight,
    in_flight_rows,
    is_control,
    store_rows,
    write_dataset,
)
from framework.savepoint.hold import HeldService
from framework.savepoint.manifest import (
    IN_FLIGHT,
    STORES,
    Manifest,
    RepartitionInfo,
    SourceInfo,
    StoreInfo,
    default_path,
    describe_pipeline,
)
from framework.savepoint.verify import checksums
from framework.state.base import STEP_META_KEY
from framework.state.memory import MemoryBackend

TP = tuple[str, int]
HOLD_S = 300.0  # how long the members of a running service are held at most (--hold)


# Writes every store of a savepoint into its directory and returns what the manifest says of
# each: ``(directory, settings, pipeline, tasks, committed offsets)``. ``local_stores`` in this
# process's memory; ``fw savepoint create --master`` with Spark (``SparkStores``).
StoresWriter = Callable[[Path, Mapping[str, Any], Pipeline, int, Mapping[TP, int]], dict[str, StoreInfo]]


def create_savepoint(settings: Mapping[str, Any], pipeline: Pipeline, path: Path | None = None,
                     stores_by: StoresWriter | None = None, hold_s: float = HOLD_S) -> tuple[Path, Manifest]:
    """Write a savepoint of the service ``pipeline`` to ``path`` (default: ``default_path``),
    its stores by ``stores_by`` (default ``local_stores``); return where, and its manifest.
    The members of a running service are held at a checkpoint meanwhile, for at most
    ``hold_s`` (``HeldService``)."""
    created = datetime.now(UTC)
    target = path or default_path(pipeline.name, created)
    if target.exists() and any(target.iterdir()):
        raise RuntimeProblem(f"{target} exists and is not empty: a savepoint goes to a directory of its own. Fix: "
                             "name another --path, or leave it out (a new directory under FW_SAVEPOINT_DIR)")
    try:
        with HeldService(settings, pipeline.name, hold_s) as held:
            tasks, committed, flight, sources, outputs = _positions(settings, pipeline)
            target.mkdir(parents=True, exist_ok=True)
            stores = (stores_by or local_stores)(target, settings, pipeline, tasks, committed)
            repartition = {topic: _write_in_flight(target, settings, pipeline.name, topic, ranges)
                           for topic, ranges in flight.items()}
            offsets: dict[str, dict[int, int]] = {}
            for (topic, p), offset in sorted(committed.items()):
                offsets.setdefault(topic, {})[p] = offset
            manifest = Manifest(pipeline.name, pipeline.target or "", created.isoformat(timespec="milliseconds"),
                                tasks, describe_pipeline(pipeline), stores, offsets, repartition, sources=sources,
                                held=held, outputs=outputs)
            manifest.files = checksums(target, manifest)
            manifest.save(target)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    return target, manifest


def _positions(settings: Mapping[str, Any], pipeline: Pipeline) -> tuple[
        int, dict[TP, int], dict[str, dict[int, tuple[int, int]]], dict[str, SourceInfo], dict[str, dict[int, int]]]:
    """The service's partition count, its group's committed offsets, the range of each
    repartition topic's partitions in flight (from the committed offset, where none is the
    log's start: a member starts there, to the end), each source's topic id and ends, and the
    ends of the topics it writes (what it had written as of the savepoint)."""
    cluster = Cluster(settings)
    try:
        tasks = len(cluster.partitions(pipeline.sources()[0].topic.name))
        committed = cluster.committed(pipeline.name)
        bounds = {t: cluster.offsets(t) for t in pipeline.repartition_topics()}
        names = sorted({s.topic.name for s in pipeline.sources()})
        ids = topic_ids(cluster.admin, names)
        ends = {t: cluster.offsets(t) for t in names}
        written = sorted({t.name for t in pipeline.sink_topics()} | {pipeline.dead_letter.name})
        present = {t.name for t in cluster.topics()}
        outputs = {t: {p: end for p, (_, end) in cluster.offsets(t).items()} for t in written if t in present}
    finally:
        cluster.close()
    left = unprocessed_records(settings, pipeline.name, committed, ends)
    sources = {t: SourceInfo(ids[t], {p: end for p, (_, end) in parts.items()},
                             {p: left.get((t, p), 0) for p in parts}) for t, parts in ends.items()}
    flight = {t: {p: (committed.get((t, p), start), end) for p, (start, end) in parts.items()}
              for t, parts in bounds.items()}
    return tasks, committed, flight, sources, outputs


def unprocessed_records(settings: Mapping[str, Any], service: str, committed: Mapping[TP, int],
                        bounds: Mapping[str, Mapping[int, tuple[int, int]]]) -> dict[TP, int]:
    """The committed records of each partition of ``bounds`` (topic -> partition -> first and
    next offset) past the group's ``committed`` offset (where none is, the log's start), where
    there are any: read, since offsets alone overcount (commit markers and aborted records)."""
    reader = f"{service}-savepoint-{uuid.uuid4().hex[:8]}"  # assigns, never joins
    out = {}
    for topic, parts in sorted(bounds.items()):
        for p, (start, end) in sorted(parts.items()):
            n = sum(len(batch) for batch in read_range(settings, reader, topic, p, committed.get((topic, p), start), end))
            if n:
                out[(topic, p)] = n
    return out


def local_stores(target: Path, settings: Mapping[str, Any], pipeline: Pipeline, tasks: int,
                 committed: Mapping[TP, int]) -> dict[str, StoreInfo]:
    """Every store rebuilt in this process's memory (``rebuild_stores``), each written as one
    Parquet dataset."""
    backend = rebuild_stores(pipeline, settings, tasks, list(range(tasks)))
    return {store: _write_store(target, pipeline, backend, store, tasks) for store in pipeline.store_names()}


def _write_store(target: Path, pipeline: Pipeline, backend: MemoryBackend, store: str, tasks: int) -> StoreInfo:
    """Every entry of every partition of ``store`` (meta entries, timers and the clock
    included) as one Parquet dataset."""
    pairs = [(p, k, v) for p in range(tasks) for k, v in backend.open(pipeline.name, store, p).iter_range(b"", None)]
    layout = StoreLayout(pipeline, store)
    write_dataset(store_rows(layout, pairs), target / store_path(store))
    counts = {p: 0 for p in range(tasks)}
    signature = None
    for p, key, value in pairs:
        counts[p] += 1
        if key == STEP_META_KEY and signature is None:
            signature = value
    return store_info(pipeline, store, counts, signature)


def store_path(store: str) -> str:
    """A store's dataset in a savepoint, relative to its directory."""
    return f"{STORES}/{store}"


def store_info(pipeline: Pipeline, store: str, counts: dict[int, int], signature: bytes | None) -> StoreInfo:
    """What the manifest says of ``store``: its entries per partition, its dataset, the
    changelog it was read from (none for a table read from its own topic), and the signature
    its ``00 "step"`` entry (``signature``, encoded) holds."""
    changelog = pipeline.changelog_topic(store) if pipeline.table_source(store) is None else None
    decoded = None if signature is None else StoreLayout(pipeline, store).codec.decode(signature)
    return StoreInfo(counts, store_path(store), changelog, decoded)


def restore_ranges(settings: Mapping[str, Any], pipeline: Pipeline,
                   committed: Mapping[TP, int]) -> dict[str, dict[int, list[int]]]:
    """Per topic a store is restored from, per partition, the ``[start, end)`` a restore reads:
    a changelog to its end, a table's own topic up to the group's committed offset (nothing
    where none is), as ``changelog_infos`` plans it for a member."""
    cluster = Cluster(settings)
    try:
        out: dict[str, dict[int, list[int]]] = {}
        for store in pipeline.store_names():
            topic = pipeline.restore_topic(store)
            parts = out.setdefault(topic, {})
            for p, (start, end) in cluster.offsets(topic).items():
                if pipeline.table_source(store) is not None:
                    at = committed.get((topic, p))
                    end = start if at is None else min(max(at, start), end)
                parts[p] = [start, end]
        return out
    finally:
        cluster.close()


def _write_in_flight(target: Path, settings: Mapping[str, Any], service: str, topic: str,
                     ranges: Mapping[int, tuple[int, int]]) -> RepartitionInfo:
    """The committed records of ``topic`` in ``ranges`` (partition -> from, to), as one dataset:
    the user's records and the upstream tasks' watermark control records, counted apart."""
    reader = f"{service}-savepoint-{uuid.uuid4().hex[:8]}"  # assigns, never joins
    records: list[InFlight] = []
    for p, (start, end) in sorted(ranges.items()):
        for batch in read_range(settings, reader, topic, p, start, end):
            records += [(p, cast(int, m.offset()), m.timestamp()[1], m.key(), m.value(),
                         cast(list[tuple[str, bytes | None]], list(m.headers() or []))) for m in batch]
    relative = f"{IN_FLIGHT}/{topic}"
    write_dataset(in_flight_rows(records), target / relative)
    control = sum(is_control(key, value, headers) for _p, _o, _ts, key, value, headers in records)
    return RepartitionInfo({p: r[0] for p, r in ranges.items()}, {p: r[1] for p, r in ranges.items()},
                           len(records) - control, relative, control)
