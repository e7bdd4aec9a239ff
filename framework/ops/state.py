"""``fw state get | scan``: the entries of a service's store, decoded.

Where each store partition is read from (``source``):

- ``local``: the RocksDB copy a member left under ``FW_STATE_DIR/<service>/<store>/<p>``,
  opened read-only, so nothing of it changes; refused in one line while a running member
  holds it (its copy changes under the reader; the changelog has the committed state);
- ``changelog``: rebuilt in memory from the store's changelog by the runtime's own restore
  (``framework.runtime.restore.Restorer`` over a ``TaskRunner``): the committed state, as a
  member starting without local state would restore it;
- ``live``: asked of the running service over HTTP (``GET /stores/...`` of a member's
  endpoint, found in the consumer group: docs/queries.md): the committed state its members
  hold now;
- ``auto`` (default): ``live`` when a member of the service answers; else local copies where
  this host has them, the changelog for the other partitions. A local copy that no longer matches the changelog (a member has written since
  it was left, or the changelog was created anew) is read as it is, with a note.

Keys are given as the store's key type and encoded with the step's key serde
(``StoreLayout.encode_key``); a key lives in one partition, and every partition is looked at.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import quote, urlencode

from framework.engine.entries import Entry, KeyFilter, Readable, StoreLayout, key_pairs, state_pairs
from framework.engine.runner import StoreRestore, TaskRunner
from framework.errors import (
    EnvironmentProblem,
    KafkaClientError,
    RuntimeProblem,
    StateError,
)
from framework.kafka.admin import admin_client, topic_ids
from framework.kafka.clients import ChangelogReader, read_range
from framework.kafka.groups import end_offsets, group_members
from framework.kafka.inspect import Cluster
from framework.observe.endpoint import ask_json, parse_client_id
from framework.pipeline.definition import Pipeline
from framework.records import Headers
from framework.runtime.queries import MAX_LIMIT
from framework.runtime.restore import Restorer
from framework.state.base import partition_path
from framework.state.memory import MemoryBackend
from framework.state.rocksdb.readonly import ReadOnlyPartition

Source = Literal["auto", "live", "local", "changelog"]
_RESTORE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class StoreRow:
    partition: int
    source: str  # "local" or "changelog"
    entry: Entry

    def as_dict(self) -> dict[str, Any]:
        return {"partition": self.partition, "source": self.source, **self.entry.as_dict()}


@dataclass
class StoreReader:
    """The partitions of one store, each from its source; ``notes`` say what to know about them."""

    layout: StoreLayout
    partitions: dict[int, tuple[str, Readable]]
    notes: list[str] = field(default_factory=list)
    _opened: list[ReadOnlyPartition] = field(default_factory=list)

    def get(self, key: str) -> list[StoreRow]:
        """Every state entry of record key ``key`` (one per state name, window or map key)."""
        raw, layout = self.layout.encode_key(key), self.layout
        return [StoreRow(p, source, e) for p, (source, part) in sorted(self.partitions.items())
                for k, v in key_pairs(part, raw) for e in layout.entries(p, k, v)]

    def scan(self, prefix: str | None = None, limit: int | None = None, low: str | None = None,
             high: str | None = None) -> list[StoreRow]:
        """State entries in partition and key order whose record key, as text, starts with
        ``prefix`` and lies from ``low`` to ``high`` (excluded; ``KeyFilter``); at most
        ``limit``. Reads every entry: keys are stored length first, so keys with a common
        prefix are not next to each other."""
        layout = self.layout
        keep = KeyFilter(prefix, None if low is None else layout.parse_key(low),
                         None if high is None else layout.parse_key(high))
        rows: list[StoreRow] = []
        for p, (source, part) in sorted(self.partitions.items()):
            for k, v in state_pairs(part):
                for e in layout.entries(p, k, v):
                    if keep(e.key):
                        rows.append(StoreRow(p, source, e))
                        if limit is not None and len(rows) >= limit:
                            return rows
        return rows

    def close(self) -> None:
        for part in self._opened:
            part.close()


def open_store(pipeline: Pipeline, store: str, state_root: Path, settings: Mapping[str, Any],
               source: Source = "auto") -> StoreReader:
    """The partitions of ``store`` of service ``pipeline``, from ``source`` (module docstring)."""
    layout = StoreLayout(pipeline, store)  # an unknown store fails here, naming the known ones
    root = state_root.resolve() / pipeline.name / store
    local = [] if source == "changelog" else _local_partitions(root)
    if source == "local" and not local:
        raise RuntimeProblem(f"no local copy of store {store!r} under {root}: run this where a member of the service "
                          "ran (FW_STATE_DIR names its state directory), or read the changelog (--source changelog)")
    reader = StoreReader(layout, {})
    try:
        for p in local:
            part = ReadOnlyPartition(partition_path(state_root.resolve(), pipeline.name, store, p),
                                     f"{pipeline.name}/{store} partition {p}")
            reader._opened.append(part)
            reader.partitions[p] = ("local", part)
        if source != "local":
            _add_changelog_partitions(reader, pipeline, store, settings, root, bool(local))
    except BaseException:
        reader.close()
        raise
    return reader


def _local_partitions(root: Path) -> list[int]:
    """Partition directories under ``root`` holding a RocksDB database."""
    if not root.is_dir():
        return []
    return sorted(int(d.name) for d in root.iterdir() if d.name.isdigit() and (d / "CURRENT").exists())


def _add_changelog_partitions(reader: StoreReader, pipeline: Pipeline, store: str, settings: Mapping[str, Any],
                              root: Path, have_local: bool) -> None:
    topic = pipeline.restore_topic(store)
    try:
        cluster = Cluster(settings)
    except EnvironmentProblem as exc:
        if not have_local:
            raise
        reader.notes.append(f"local copies only, not checked against the changelog: {exc}")
        return
    try:
        found = cluster.topic_partitions(topic)
    finally:
        cluster.close()
    if found is None:  # no suggestion: the near names on the cluster are other services' changelogs
        raise RuntimeProblem(f"no local copy of store {store!r} under {root} and no changelog topic {topic!r} on "
                             f"{cluster.bootstrap}: service {pipeline.name!r} has not run there yet; start it "
                             f"(fw run), or name the place it ran with FW_STATE_DIR / FW_BOOTSTRAP_SERVERS")
    partitions = found
    _note_stale(reader, settings, topic)
    missing = [p for p in partitions if p not in reader.partitions]
    if missing:
        for p, part in _restore(pipeline, store, settings, len(partitions), missing).items():
            reader.partitions[p] = ("changelog", part)


def _note_stale(reader: StoreReader, settings: Mapping[str, Any], topic: str) -> None:
    local = {p: part for p, (src, part) in reader.partitions.items() if isinstance(part, ReadOnlyPartition)}
    if not local:
        return
    incarnation = topic_ids(admin_client(settings), [topic])[topic]
    ends = end_offsets(settings, [topic])
    for p, part in sorted(local.items()):
        if part.changelog_id is not None and part.changelog_id != incarnation:
            reader.notes.append(f"partition {p}: the local copy reflects an older incarnation of {topic} (it was "
                                "created anew, by a reset or a replay bootstrap): a member starting here rebuilds it")
        elif part.changelog_offset is not None and ends.get((topic, p), 0) - part.changelog_offset > 1:
            # > 1: the transaction's commit marker after the copy's last record takes an offset
            reader.notes.append(f"partition {p}: the local copy reflects {topic} up to offset "
                                f"{part.changelog_offset}, and it ends at {ends[(topic, p)]}: a member may have "
                                "written since; --source changelog reads the committed state")


class _NoOutput:
    """A restore produces nothing: the runner's output is never called."""

    def produce(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int,
                headers: Headers = None, partition: int | None = None) -> None:
        raise StateError("a store restored for reading produced a record")

    def produce_changelog(self, topic: str, partition: int, key: bytes, value: bytes | None,
                          headers: Headers) -> None:
        raise StateError("a store restored for reading produced a changelog record")


def _restore(pipeline: Pipeline, store: str, settings: Mapping[str, Any], tasks: int,
             partitions: list[int]) -> dict[int, Readable]:
    """``partitions`` of ``store`` rebuilt in memory from the changelogs, by the runtime's restore."""
    backend = rebuild_stores(pipeline, settings, tasks, partitions)
    return {p: backend.open(pipeline.name, store, p) for p in partitions}


def rebuild_stores(pipeline: Pipeline, settings: Mapping[str, Any], tasks: int,
                   partitions: list[int]) -> MemoryBackend:
    """Every store of ``partitions`` rebuilt in memory, as a member starting without local
    state restores them (the runtime's ``Restorer`` over a ``TaskRunner``): each changelog read
    to its end (read_committed), a table read from its own topic up to the group's committed
    offset there. Of a stopped service, that is its state as of its last checkpoint."""
    backend = MemoryBackend()
    runner = TaskRunner(pipeline, backend, _NoOutput(), partitions=tasks)
    admin = admin_client(settings)
    reader = ChangelogReader(settings, f"fw-state-{uuid.uuid4().hex[:8]}")  # assigns, never joins the group
    committed: dict[tuple[str, int], int] = {}
    if any(pipeline.table_source(s) is not None for s in pipeline.store_names()):
        cluster = Cluster(settings)  # a table's own topic: read up to what the service processed
        try:
            committed = cluster.committed(pipeline.name)
        finally:
            cluster.close()
    restorer = Restorer(runner, reader, lambda topics: topic_ids(admin, topics), lambda _p: None,
                        lambda tps: {tp: committed.get(tp) for tp in tps})
    try:
        restorer.start(partitions)
        deadline = time.monotonic() + _RESTORE_TIMEOUT_S
        while restorer.busy:
            if time.monotonic() > deadline:
                raise StateError(f"rebuilding the stores of {pipeline.name!r} from their changelogs did not reach "
                                 f"their ends in {_RESTORE_TIMEOUT_S:.0f}s ({restorer.restored_records} records)")
            restorer.step()
    finally:
        restorer.close()
    return backend


def table_entries(pipeline: Pipeline, settings: Mapping[str, Any], tasks: int, store: str, partition: int,
                  start: int, end: int, reader: str) -> Iterator[tuple[bytes, bytes]]:
    """Partition ``partition`` of ``store``, a table read from its own topic, rebuilt in memory
    from that topic's committed records in ``[start, end)`` by the runtime's restore
    (``TaskRunner.restore``: the table step's own code): the entries a member restores when
    ``end`` is the group's committed offset. ``reader`` names the consumer (it never joins)."""
    backend = MemoryBackend()
    runner = TaskRunner(pipeline, backend, _NoOutput(), partitions=tasks)
    topic = pipeline.restore_topic(store)
    item = StoreRestore(partition, store, (topic, partition), start, end)
    for batch in read_range(settings, reader, topic, partition, start, end):
        runner.restore(item, [(cast(int, m.offset()), m.key(), m.value(), m.timestamp()[1]) for m in batch])
    return backend.open(pipeline.name, store, partition).iter_range(b"", None)


_ASK_TIMEOUT_S = 15.0  # a member forwards and fans out: it may wait on the others first


def ask_live(settings: Mapping[str, Any], pipeline: Pipeline, store: str, key: str | None = None, *,
             prefix: str | None = None, low: str | None = None, high: str | None = None,
             limit: int | None = None) -> list[StoreRow] | None:
    """``fw state get`` (``key``) or ``scan`` asked of a running member of the service (any:
    it forwards and fans out), or None when no member's endpoint answers. A member's refusal
    (a partition restoring, an unknown store) is a ``RuntimeProblem`` with its words."""
    StoreLayout(pipeline, store)  # an unknown store fails here, naming the known ones
    try:
        _, members = group_members(admin_client(settings), pipeline.name)
    except (KafkaClientError, EnvironmentProblem):
        return None
    endpoints = [e for e in (parse_client_id(c, pipeline.name, h).endpoint for c, h, _ in members) if e]
    if key is not None:
        path = f"/stores/{quote(store, safe='')}/{quote(key, safe='')}"
    else:
        query = {"prefix": prefix, "from": low, "to": high, "limit": str(min(limit or MAX_LIMIT, MAX_LIMIT))}
        path = f"/stores/{quote(store, safe='')}?{urlencode({k: v for k, v in query.items() if v is not None})}"
    for endpoint in sorted(endpoints):
        code, body = ask_json(endpoint + path, _ASK_TIMEOUT_S)
        if code == 200:
            return [_live_row(r) for r in body["entries"]]
        if code:
            raise RuntimeProblem(f"{endpoint}{path}: {body.get('error') if isinstance(body, dict) else body}")
    return None


def _live_row(row: Mapping[str, Any]) -> StoreRow:
    lag = f", lag {row['lag_records']}" if row.get("lag_records") is not None else ""
    source = row["member"] if row["source"] == "active" else f"{row['member']} (standby{lag})"
    window = (row["window_start"], row["window_end"]) if "window_start" in row else None
    return StoreRow(row["partition"], source, Entry("state", row["state"], row["key"], row["value"], window,
                                                    row.get("map_key")))
