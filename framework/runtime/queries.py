"""Live queries of a running service's stores, answered by any member (docs/queries.md).

``GET /stores/<store>/<key>`` and ``GET /stores/<store>?prefix=&from=&to=&limit=`` reach the
member's HTTP thread (``framework.observe.server``), which calls ``LiveQueries.answer``.
A key's partition is the one Kafka's default partitioner gives the key serde's bytes (what
the producers and the repartition topics use); the member then

- reads the partition itself when it runs its task: the store's committed data in RocksDB
  (``RocksDBPartition.read_chunk``, in chunks the task's ``close`` waits for), so what the
  last checkpoint committed, never the task's write cache;
- answers 503 with the restore's progress when it restores the partition;
- forwards the request to the member the consumer group gives the partition (its endpoint is
  in its ``client.id``, ``framework.observe.endpoint``), once: the forwarded request carries
  ``X-FW-Forwarded`` and is never passed on;
- answers from its standby copy, with the copy's lag, when the owner does not answer (or the
  request was forwarded to it and the task has left meanwhile);
- else answers 503 saying that no member answers for the partition.

A scan covers every partition (or those of ``partitions=``): the member reads its own,
asks each owner once for its partitions, and merges the entries in key order, keeping
``limit``. A scan answers 503 unless every partition was read: a partial scan would look
like a complete one. The decisions are pure functions (``route``, ``merge_rows``), tested
without a broker.

The stores queried are those a pipeline names: its stateful steps' and its global tables'.
The internal ``_time`` store (each task's clock) is neither listed nor answered: its
watermarks are on ``/status``.
"""

from __future__ import annotations

import difflib
import heapq
import re
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from framework.engine.entries import (
    Entry,
    KeyFilter,
    StoreLayout,
    key_order,
    key_pairs,
    state_pairs,
)
from framework.engine.globals import GLOBAL_PARTITION
from framework.engine.partitioner import partition_for
from framework.errors import ConfigError, KafkaClientError, StateError
from framework.kafka.groups import group_members
from framework.observe.endpoint import ask_json, parse_client_id
from framework.observe.server import FORWARDED
from framework.pipeline import steps as S
from framework.pipeline.definition import TIME_STORE

DEFAULT_LIMIT = 100  # entries a scan returns unless ``limit`` says otherwise
MAX_LIMIT = 10_000  # a scan's answer is one JSON document: it stays of a size a member can build
_CHUNK = 1_000  # pairs read per hold of a partition's close lock
_ASK_TIMEOUT_S = 10.0  # how long an owner has to answer a forwarded query
_NOT_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")  # a '%' that starts no percent-escape


def route(held: str | None, owner: str | None, me: str, forwarded: bool) -> str:
    """What a member does with a query for a partition: ``held`` is what it holds of it
    (``running``, ``restoring``, ``standby`` or None), ``owner`` the instance the group gives
    it to (None: nobody, a rebalance under way). ``local``, ``restoring``, ``forward``,
    ``standby`` (the owner is this member's to skip) or ``none``."""
    if held in ("running", "restoring"):
        return "local" if held == "running" else "restoring"
    if owner is not None and owner != me and not forwarded:
        return "forward"
    return "standby" if held == "standby" else "none"


def row_order(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """Entries in key order; a key's entries by partition, state, window and map key."""
    return (key_order(row.get("key")), row.get("partition", -1), str(row.get("state")),
            row.get("window_start") or 0, str(row.get("map_key")))


def merge_rows(parts: Iterable[tuple[list[dict[str, Any]], bool]], limit: int) -> tuple[list[dict[str, Any]], bool]:
    """The first ``limit`` entries, in key order, of partial answers ``(entries, truncated)``;
    and whether entries were left out (here or in a part)."""
    parts = list(parts)
    rows = sorted((r for part, _ in parts for r in part), key=row_order)
    return rows[:limit], len(rows) > limit or any(t for _, t in parts)


def unquote_strict(text: str, what: str) -> str:
    """``text`` (a path segment) percent-decoded as UTF-8; a ``ConfigError`` naming ``what``
    when it is not a valid encoding: a ``%`` without two hex digits after it, or escapes that
    are not UTF-8. (``urllib.parse.unquote`` keeps the first as it is and replaces the second,
    so a key nobody wrote would be looked up.)"""
    bad = _NOT_ESCAPE.search(text)
    if bad is not None:
        raise ConfigError(f"{what} {text!r} is not URL-encoded: {text[bad.start():bad.start() + 3]!r} is no "
                          "percent-escape. Fix: encode it (a '%' is %25)")
    try:
        return urllib.parse.unquote(text, errors="strict")
    except UnicodeDecodeError:
        raise ConfigError(f"{what} {text!r} is not URL-encoded UTF-8. Fix: encode the text's UTF-8 "
                          "bytes") from None


def scan_limit(text: str | None) -> int:
    """``limit=``: 1 to ``MAX_LIMIT``, ``DEFAULT_LIMIT`` when not given."""
    if text is None or text == "":
        return DEFAULT_LIMIT
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise ConfigError(f"limit={text!r}: give a whole number from 1 to {MAX_LIMIT}")
    return int(text)


class _Chunked:
    """A live RocksDB partition read a chunk at a time (``read_chunk``): the owning task may
    close it between two chunks, never during one."""

    def __init__(self, part: Any) -> None:
        self.part = part

    def iter_range(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        while True:
            chunk = self.part.read_chunk(start, end, _CHUNK)
            yield from chunk
            if len(chunk) < _CHUNK:
                return
            start = chunk[-1][0] + b"\x00"  # the next key after the last one read


class _Unavailable(Exception):
    """A query this member cannot answer: the HTTP status and the answer's body."""

    def __init__(self, code: int, body: dict[str, Any]) -> None:
        super().__init__(body.get("error"))
        self.code, self.body = code, body


class LiveQueries:
    """Answers ``/stores/...`` for one ``framework.runtime.service.Service``, from the
    member's HTTP thread (module docstring). It only looks up what the loop holds (dict
    lookups) and reads committed data; it never changes anything of the member."""

    def __init__(self, service: Any) -> None:
        self.svc = service

    # -- requests ---------------------------------------------------------------------------

    def answer(self, path: str, params: dict[str, str], forwarded: bool) -> tuple[int, dict[str, Any]]:
        """``(HTTP status, JSON body)`` for ``path`` (``/stores/<store>[/<key>]``)."""
        _, _, rest = path.partition("/stores")
        store, _, key = rest.lstrip("/").partition("/")
        try:
            store, key = unquote_strict(store, "store"), unquote_strict(key, "key")
            stores = self._stores()
            if not store:
                return 200, {"stores": stores}
            if store not in stores:
                raise _Unavailable(404, {"error": self._unknown(store, stores)})
            if getattr(self.svc, "restorer", None) is None:  # set last of what a query reads
                raise _Unavailable(503, {"error": "the member is starting: it answers queries once it has joined "
                                                  "its group; ask again"})
            layout = StoreLayout(self.svc.pipeline, store)
            if isinstance(layout.step, S.GlobalTable):
                return self._global(layout, key, params)
            owners = _Owners(self.svc)
            if key:
                return self._get(layout, key, forwarded, owners)
            return self._scan(layout, params, forwarded, owners)
        except ConfigError as exc:
            return 400, {"error": str(exc)}
        except _Unavailable as exc:
            return exc.code, exc.body

    def _stores(self) -> list[str]:
        """The stores a query may name: the stateful steps' and the global tables'."""
        pipeline = self.svc.pipeline
        return [s for s in pipeline.store_names() if s != TIME_STORE] + [g.name for g in pipeline.global_tables()]

    def _unknown(self, store: str, stores: list[str]) -> str:
        known = ", ".join(stores) or "none (no stateful step)"
        if store == TIME_STORE:
            return (f"store {store!r} is internal (each task's clock) and not queried here: the watermarks are on "
                    f"/status, and fw state reads it with --source local or changelog; the stores: {known}")
        close = difflib.get_close_matches(store, stores, 1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"{self.svc.pipeline.name!r} has no store {store!r}; its stores: {known}{hint}"

    def _global(self, layout: StoreLayout, key: str, params: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """A global table: every member holds all of it, so this one answers (what its
        checkpoints wrote), once it has read the table to its end at start (before that, a
        part of the table would pass for all of it: 503)."""
        p = GLOBAL_PARTITION
        if not self.svc.globals_read:  # set in Service.__init__, before the server starts
            raise _Unavailable(503, {"error": f"global table {layout.store!r} is being read to its end on member "
                                              f"{self.svc.instance_id} before it starts: ask again when it is done",
                                     "store": layout.store, "member": self.svc.instance_id})
        if key:
            raw = layout.encode_key(key)
            base = {"store": layout.store, "key": layout.decode_key(raw), "partition": p}
            return 200, {**base, **self._read(layout, p, "global", lambda part: key_pairs(part, raw))}
        limit = scan_limit(params.get("limit"))
        keep = KeyFilter(params.get("prefix") or None, *(layout.parse_key(params[b]) if params.get(b) else None
                                                          for b in ("from", "to")))
        rows = self._read(layout, p, "global", state_pairs, keep, limit + 1)["entries"]
        return 200, {"store": layout.store, "partitions": [p], "entries": rows[:limit], "truncated": len(rows) > limit}

    def _get(self, layout: StoreLayout, key: str, forwarded: bool, owners: _Owners) -> tuple[int, dict[str, Any]]:
        raw = layout.encode_key(key)
        p = partition_for(raw, self.svc.partitions)
        base = {"store": layout.store, "key": layout.decode_key(raw), "partition": p}
        held = self._held(p)
        how = route(held, owners.instance(p, held), self.svc.instance_id, forwarded)
        why = None
        if how == "forward":
            endpoint = owners.endpoint(p)
            code, body = self._ask(endpoint, f"/stores/{_q(layout.store)}/{_q(key)}")
            if code:
                return code, body
            why = f"its owner at {endpoint} did not answer ({body})"
        if how == "local":
            return 200, {**base, **self._read(layout, p, "active", lambda part: key_pairs(part, raw))}
        if how == "restoring":
            raise self._restoring(layout.store, p)
        if self._held(p) == "standby":
            return 200, {**base, **self._read(layout, p, "standby", lambda part: key_pairs(part, raw))}
        raise self._nobody(layout.store, p, why)

    def _scan(self, layout: StoreLayout, params: dict[str, str], forwarded: bool,
              owners: _Owners) -> tuple[int, dict[str, Any]]:
        limit = scan_limit(params.get("limit"))
        keep = KeyFilter(params.get("prefix") or None, *(layout.parse_key(params[b]) if params.get(b) else None
                                                          for b in ("from", "to")))
        wanted = self._partitions(params.get("partitions"))
        parts: list[tuple[list[dict[str, Any]], bool]] = []
        missing: list[dict[str, Any]] = []
        by_owner: dict[str, list[int]] = {}
        for p in wanted:
            held = self._held(p)
            how = route(held, owners.instance(p, held), self.svc.instance_id, forwarded)
            if how == "forward":
                by_owner.setdefault(owners.endpoint(p), []).append(p)
            else:
                self._scan_here(layout, p, how, keep, limit, parts, missing)
        for endpoint, ps in sorted(by_owner.items()):
            query = {k: v for k, v in params.items() if k != "partitions"}
            query.update(partitions=",".join(map(str, ps)), limit=str(limit))
            code, body = self._ask(endpoint, f"/stores/{_q(layout.store)}?{urllib.parse.urlencode(query)}")
            if code == 200:
                parts.append((body["entries"], bool(body.get("truncated"))))
                continue
            if code and isinstance(body, dict) and body.get("unavailable"):
                missing += body["unavailable"]
                continue
            for p in ps:  # the owner did not answer: standby copies here, if any
                self._scan_here(layout, p, "standby" if self._held(p) == "standby" else "none", keep, limit,
                                parts, missing, why=f"its owner {endpoint} did not answer ({body})")
        if missing:
            shown = "; ".join(f"partition {m['partition']}: {m['error']}" for m in missing)
            return 503, {"error": f"store {layout.store!r} cannot be scanned whole now: {shown}",
                         "store": layout.store, "unavailable": missing}
        entries, truncated = merge_rows(parts, limit)
        return 200, {"store": layout.store, "partitions": wanted, "entries": entries, "truncated": truncated}

    def _scan_here(self, layout: StoreLayout, p: int, how: str, keep: KeyFilter, limit: int,
                   parts: list[tuple[list[dict[str, Any]], bool]], missing: list[dict[str, Any]],
                   why: str | None = None) -> None:
        try:
            if how not in ("local", "standby"):
                raise self._restoring(layout.store, p) if how == "restoring" else self._nobody(layout.store, p, why)
            read = self._read(layout, p, "active" if how == "local" else "standby", state_pairs, keep, limit + 1)
        except _Unavailable as exc:
            missing.append({"partition": p, **exc.body})
            return
        rows = read["entries"]
        parts.append((rows[:limit], len(rows) > limit))

    # -- reading ----------------------------------------------------------------------------

    def _read(self, layout: StoreLayout, p: int, source: str, pairs: Any, keep: KeyFilter | None = None,
              limit: int | None = None) -> dict[str, Any]:
        """The entries of partition ``p`` that ``pairs(part)`` yields (and ``keep`` keeps; the
        first ``limit`` in key order), with who answered: this member, as the task's owner
        (``active``), from its copy (``standby``, with ``lag_records``), or from its copy of a
        global table (``global``)."""
        svc = self.svc
        if source == "global":  # this process's copy, whichever it took
            part = svc.runner.globals.tables[layout.store].store.backend
        else:
            part = svc.backend.opened(svc.pipeline.name, layout.store, p)
        if part is None:
            raise _Unavailable(503, self._moved(layout.store, p))
        member = {"member": svc.instance_id, "source": source}
        if source == "standby":
            member["lag_records"] = self._standby_lag(layout.store, p)
        try:
            found = self._entries(layout, p, pairs(_Chunked(part)), keep)
            rows = [{"partition": p, **member, **e.as_dict()} for e in found]
        except StateError as exc:
            if not part.closed:
                raise
            raise _Unavailable(503, self._moved(layout.store, p)) from exc
        if limit is not None:
            rows = heapq.nsmallest(limit, rows, key=row_order)
        return {**member, "entries": rows}

    @staticmethod
    def _entries(layout: StoreLayout, p: int, pairs: Iterable[tuple[bytes, bytes]],
                 keep: KeyFilter | None) -> Iterator[Entry]:
        for k, v in pairs:
            for e in layout.entries(p, k, v):
                if keep is None or keep(e.key):
                    yield e

    def _standby_lag(self, store: str, p: int) -> int | None:
        """Changelog records the copy has not applied yet, as of its reader's last fetch."""
        standby = self.svc.standby
        for item in list(standby.tasks.get(p, [])) if standby is not None else []:
            if item.store == store:
                end, position = standby.reader.fetched_end(item.changelog), standby.position.get(item.changelog)
                return None if end is None or position is None else max(end - position, 0)
        return None

    # -- where partitions are ---------------------------------------------------------------

    def _held(self, p: int) -> str | None:
        svc = self.svc
        if p in svc.runner.tasks:
            return "running"
        if p in svc.restorer.pending:
            return "restoring"
        return "standby" if svc.standby is not None and p in svc.standby.tasks else None

    def _ask(self, endpoint: str, path: str) -> tuple[int, Any]:
        if not endpoint:
            return 0, "its owner moved"
        return ask_json(endpoint + path, _ASK_TIMEOUT_S, {FORWARDED: self.svc.instance_id})

    def _partitions(self, text: str | None) -> list[int]:
        n = self.svc.partitions
        if not text:
            return list(range(n))
        try:
            wanted = sorted({int(x) for x in text.split(",")})
        except ValueError:
            raise ConfigError(f"partitions={text!r}: give partition numbers separated by commas") from None
        if wanted[0] < 0 or wanted[-1] >= n:
            raise ConfigError(f"partitions={text!r}: the service has partitions 0 to {n - 1}")
        return wanted

    # -- answers it cannot give -------------------------------------------------------------

    def _restoring(self, store: str, p: int) -> _Unavailable:
        """503 with the restore's progress, from the member's last published status."""
        status = getattr(self.svc.observer, "status", None) or {}
        stores = (status.get("restore") or {}).get("stores") or []
        mine = [s for s in stores if s.get("store") == store and s.get("partition") == p]
        restored = sum(s.get("restored", 0) for s in mine)
        remaining = sum(s.get("remaining", 0) for s in mine)
        return _Unavailable(503, {
            "error": f"store {store!r} partition {p} is restoring on member {self.svc.instance_id}: {restored} "
                     f"records restored, {remaining} to restore; ask again when it is done",
            "store": store, "partition": p, "member": self.svc.instance_id,
            "restore": {"restored": restored, "remaining": remaining}})

    def _moved(self, store: str, p: int) -> dict[str, Any]:
        return {"error": f"store {store!r} partition {p} left member {self.svc.instance_id} while it was read "
                         "(a rebalance); ask again", "store": store, "partition": p}

    def _nobody(self, store: str, p: int, why: str | None = None) -> _Unavailable:
        reason = why or "the group gives it to no member now (a rebalance, or no member runs it)"
        return _Unavailable(503, {
            "error": f"no member answers for store {store!r} partition {p}: {reason}, and member "
                     f"{self.svc.instance_id} holds no copy of it; ask again", "store": store, "partition": p})


class _Owners:
    """Who the group gives each partition to, asked of the group coordinator once per
    request, and only when the request needs it."""

    def __init__(self, service: Any) -> None:
        self.svc = service
        self._by_partition: dict[int, tuple[str, str | None]] | None = None

    def instance(self, p: int, held: str | None) -> str | None:
        """The instance that owns ``p`` (this member's, when it runs or restores it)."""
        if held in ("running", "restoring"):
            return str(self.svc.instance_id)
        owner = self._members().get(p)
        return owner[0] if owner is not None and owner[1] else None

    def endpoint(self, p: int) -> str:
        owner = self._members().get(p)
        return owner[1] if owner is not None and owner[1] else ""

    def _members(self) -> dict[int, tuple[str, str | None]]:
        """partition -> (instance, endpoint) of the member holding it; empty when the
        coordinator does not answer."""
        if self._by_partition is None:
            svc, out = self.svc, {}
            try:
                _, members = group_members(svc.admin, svc.pipeline.name)
            except KafkaClientError:
                members = []
            inputs = set(svc.inputs)
            for client_id, host, held in members:
                advertised = parse_client_id(client_id, svc.pipeline.name, host)
                out.update({p: (advertised.instance, advertised.endpoint) for topic, p in held if topic in inputs})
            self._by_partition = out
        return self._by_partition


def _q(text: str) -> str:
    return urllib.parse.quote(text, safe="")
