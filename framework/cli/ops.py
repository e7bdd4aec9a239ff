"""``fw topics``, ``fw group`` and ``fw state``: look at topics, consumer groups and stores.

Every command takes ``--json`` (for scripts) and ``--config`` (a TOML file, else
FW_CONFIG; the cluster is ``FW_BOOTSTRAP_SERVERS`` as for ``fw run``). The logic is in
``framework.ops``; this module parses options and prints (``framework.cli.output``).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

import click

from framework.cli import output as out
from framework.errors import RuntimeProblem
from framework.ops import cleanup as C
from framework.ops import groups as G
from framework.ops import skips as Sk
from framework.ops import state as St
from framework.ops import tail as Tl
from framework.ops import topics as T
from framework.ops.targets import (
    client_settings,
    is_target,
    load_config,
    load_service,
    service_pipeline,
)
from framework.pipeline.definition import Pipeline
from framework.runtime.topics import internal_topics

F = TypeVar("F", bound=Callable[..., Any])
_POSITION_HELP = "earliest, latest, a time (ISO 8601 or ms since the epoch) or topic:partition:offset[,...]"


def _common(f: F) -> F:
    f = click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts) instead of a table.")(f)
    f = click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
                     help="A TOML configuration file (else FW_CONFIG).")(f)
    return f


def _settings(config_file: str | None) -> dict[str, Any]:
    return client_settings(load_config(config_file))


# -- topics ------------------------------------------------------------------------------

@click.group()
def topics() -> None:
    """List, describe, create and read topics."""


@topics.command("list")
@click.option("--all", "include_all", is_flag=True, help="Also Kafka's own topics (__consumer_offsets...).")
@_common
def topics_list(include_all: bool, as_json: bool, config_file: str | None) -> None:
    """Topics with partitions, replication and, for a service's own, what they are."""
    rows = T.list_topics(_settings(config_file), include_all)
    if as_json:
        out.emit_json([r.__dict__ for r in rows])
        return
    out.table(None, ["topic", "partitions", "replication", "internal"],
              [(r.name, str(r.partitions), str(r.replication), r.internal) for r in rows])


@topics.command("describe")
@click.argument("topic")
@_common
def topics_describe(topic: str, as_json: bool, config_file: str | None) -> None:
    """Partitions (leader, replicas, in-sync replicas, start and end offsets) and config overrides."""
    _print_detail(T.describe_topic(_settings(config_file), topic), as_json)


@topics.command("create")
@click.argument("topic")
@click.option("--partitions", "-p", type=int, required=True, help="Number of partitions.")
@click.option("--replication", "-r", type=int, default=-1, help="Replication factor (default: the broker's).")
@click.option("--config", "configs", multiple=True, metavar="K=V", help="A topic config (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts) instead of a table.")
def topics_create(topic: str, partitions: int, replication: int, configs: tuple[str, ...], as_json: bool) -> None:
    """Create TOPIC (an error when it exists)."""
    _print_detail(T.create_topic(_settings(None), topic, partitions, replication, configs), as_json)


@topics.command("delete")
@click.argument("names", nargs=-1, metavar="[TOPIC]...")
@click.option("--matching", default=None, metavar="REGEX",
              help="Also every topic whose whole name matches REGEX (asks first, unless --yes).")
@click.option("--dry-run", is_flag=True, help="Show what would be deleted; delete nothing.")
@click.option("--force", is_flag=True, help="Delete topics that running services use, too.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask before deleting the topics --matching finds.")
@_common
def topics_delete(names: tuple[str, ...], matching: str | None, dry_run: bool, force: bool, yes: bool,
                  as_json: bool, config_file: str | None) -> None:
    """Delete the TOPICs and, with --matching, every topic whose name matches. Refused (nothing
    deleted) for a topic a running service uses, unless --force."""
    if not names and matching is None:
        raise click.UsageError("name the topics to delete, or give --matching REGEX")
    settings = _settings(config_file)
    plan = T.plan_delete(settings, names, matching, force)
    if plan.topics and matching is not None and not (yes or dry_run):
        click.confirm(f"delete {len(plan.topics)} topics: {', '.join(plan.topics)}?", abort=True, err=True)
    if plan.topics and not dry_run:
        T.apply_delete(settings, plan)
    if as_json:
        out.emit_json({**plan.as_dict(), "deleted": not dry_run})
        return
    used = [f"used by a running service (--force): {t}: {why}" for t, why in plan.in_use.items()]
    would = "would be deleted" if dry_run else "deleted"
    out.lines([*used, f"topics {would}: {_listed(plan.topics)}" + ("; dry run: nothing was changed" if dry_run else "")])


def _print_detail(detail: Any, as_json: bool) -> None:
    if as_json:
        out.emit_json(T.detail_dict(detail))
        return
    kind = T.internal_kind(detail.name)
    out.lines([f"topic {detail.name}" + (f" ({kind})" if kind else "") + f"  id {detail.topic_id}",
               "config overrides: " + (", ".join(f"{k}={v}" for k, v in detail.config.items()) or "none")])
    out.table(None, ["partition", "leader", "replicas", "isr", "start", "end"],
              [(str(p.partition), str(p.leader), ",".join(map(str, p.replicas)), ",".join(map(str, p.isr)),
                str(p.start), str(p.end)) for p in detail.partitions])


@topics.command("tail")
@click.argument("topic")
@click.option("--service", "service", default=None, metavar="MODULE:PIPELINE",
              help="Decode with the serdes this service gives the topic.")
@click.option("--schema", default=None, metavar="NAME", help="Decode values with this Avro schema (schemas/).")
@click.option("-n", "--lines", "last", type=int, default=None,
              help=f"Without --from: the last N records (default {Tl.DEFAULT_LAST}); with --from: the first N from there.")
@click.option("--from", "start", default=None, help=f"Start here instead: {_POSITION_HELP}.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing records as they arrive (Ctrl-C stops).")
@_common
def topics_tail(topic: str, service: str | None, schema: str | None, last: int | None, start: str | None, follow: bool,
                as_json: bool, config_file: str | None) -> None:
    """Print TOPIC's committed records: key, value, timestamp, partition, offset, headers."""
    if service and schema:
        raise click.UsageError("--service and --schema both decode: give one")
    decoder = (Tl.service_decoder(load_service(service), topic) if service
               else Tl.schema_decoder(schema) if schema else Tl.RAW)
    stop = threading.Event()
    if follow:  # Ctrl-C (or SIGTERM) ends a follow between reads, the reader closed on the way out
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
    shown = 0
    for r in Tl.tail(_settings(config_file), topic, decoder, start=start, last=last, follow=follow,
                     stopped=stop.is_set):
        if as_json:
            out.emit_json(r.as_dict(), lines=True)
        else:
            out.lines([_tail_line(r)])
        shown += 1
    if not shown and not as_json and not follow:
        out.lines([f"no committed records in {topic} from there"])


def _tail_line(r: Tl.TailRow) -> str:
    """One record on one line, the same with and without ``-f``: ``[partition]@offset``, the
    time, the key, then the value and headers, or for a dead letter what failed where (the
    input record, the repartition record, the step, the error) and its value."""
    head = f"[{r.partition}]@{r.offset}  {out.when(r.timestamp)}  {out.shown(r.key)}"
    value = f"! {r.where}: {r.error} (raw: {out.shown(r.value)})" if r.error else out.shown(r.value)
    if r.dead_letter is not None:
        return f"{head}  {r.dead_letter.described()}  value: {value}"
    return f"{head}  {value}" + (f"  {out.shown(r.headers)}" if r.headers else "")


# -- group -------------------------------------------------------------------------------

@click.group()
def group() -> None:
    """Describe and reset a service's consumer group; skip a record it stops at."""


def _group_target(service: str) -> tuple[str, Any]:
    if is_target(service):
        pipeline = load_service(service)
        return pipeline.name, pipeline
    return service, None


@group.command("describe")
@click.argument("service")
@_common
def group_describe(service: str, as_json: bool, config_file: str | None) -> None:
    """Members, assignment, committed offsets, end offsets and lag of SERVICE's group
    (SERVICE: module:pipeline, or a consumer-group id)."""
    name, pipeline = _group_target(service)
    view = G.describe_group(_settings(config_file), name, pipeline)
    if as_json:
        out.emit_json(view.as_dict())
        return
    out.lines([f"group {view.info.group}  state {view.info.state}  members {len(view.info.members)}"])
    if view.info.members:
        out.table("members", ["client id", "host", "assigned"],
                  [(m.client_id, m.host, ", ".join(f"{t}[{p}]" for t, p in m.assignment)) for m in view.info.members],
                  fold=("assigned",))
    out.table("offsets", ["topic", "partition", "committed", "end", "lag", "member"],
              [(r.topic, str(r.partition), _n(r.committed), str(r.end), _n(r.lag), r.member or "-")
               for r in view.partitions])


def _n(value: int | None) -> str:
    return "-" if value is None else str(value)


@group.command("reset")
@click.argument("service")
@click.option("--to", "to", required=True, help=f"Where the sources start again: {_POSITION_HELP}.")
@click.option("--dry-run", is_flag=True, help="Show what would change; change nothing.")
@_common
def group_reset(service: str, to: str, dry_run: bool, as_json: bool, config_file: str | None) -> None:
    """Start SERVICE (module:pipeline, or its name with services/<package>/pipeline.py here)
    over: sources to --to, every internal topic of the service (its releases' changelogs and
    repartition topics) emptied or deleted, its local stores here deleted. Outputs and dead
    letters stay. Refused while the group has members."""
    pipeline = service_pipeline(service, "group reset")  # its internal topics, emptied too, are in its definition
    config = load_config(config_file)
    settings = client_settings(config)
    plan = G.plan_reset(settings, pipeline, to, config.state.dir)
    if not dry_run:
        G.apply_reset(settings, plan)
    if as_json:
        out.emit_json(plan.as_dict())
        return
    out.table(f"offsets of group {plan.group}", ["topic", "partition", "before", "after"],
              [(t, str(p), _n(b), str(a)) for (t, p), (b, a) in sorted(plan.offsets.items())])
    would = "would be " if dry_run else ""
    out.lines([f"other committed offsets {would}deleted: {_listed(f'{t}[{p}]' for t, p in plan.forgotten)}",
               f"internal topics {would}created anew, empty: {_listed(plan.recreated)}",
               (f"internal topics {would}deleted (of stores and steps the pipeline no longer has): "
                f"{_listed(plan.deleted)}"),
               f"local state {would}deleted from {plan.state_dir}: {_listed(plan.local)}",
               *plan.notes, "dry run: nothing was changed" if dry_run else "reset done"])


@group.command("skip")
@click.argument("service")
@click.argument("record", metavar="TOPIC:PARTITION:OFFSET")
@click.option("--reason", default="", metavar="TEXT",
              help="Why: kept with the entry and on the record's dead letter (fw.skip.reason).")
@click.option("--remove", is_flag=True, help="Take the record out of the skip list instead.")
@_common
def group_skip(service: str, record: str, reason: str, remove: bool, as_json: bool, config_file: str | None) -> None:
    """Put one record in SERVICE's skip list: the record a member under on_error=fail
    stopped at (its error names it topic[partition]@offset; for a record behind a key_by,
    either coordinates of "orders[0]@42 (through shop-by-user-repartition[1]@7)" will do).
    When a step raises on that record again, the member sends it to the dead-letter topic
    (headers fw.skipped, fw.skip.reason), logs one warning and goes on; the records before and
    after it are processed as ever, exactly once, and the group's offsets are not moved. A
    record that succeeds is processed as ever.

    The list is the compacted topic <service>-skips, which every member reads at its first
    failure. Refused while the group has members (stop them, skip, start them again), for a
    topic the service does not read, and for an offset its partition does not hold. Adding an
    entry twice or removing a missing one changes nothing. fw group skips SERVICE lists them.
    """
    if remove and reason:
        raise click.UsageError("--reason goes with adding a record, not with --remove")
    config = load_config(config_file)
    settings = client_settings(config)
    change = Sk.plan_skip(settings, service_pipeline(service, "group skip"), record, reason, remove=remove)
    Sk.apply_skip(settings, change, internal_topics(config.kafka))
    if as_json:
        out.emit_json(change.as_dict())
        return
    where, listed = change.entry.where, f"the skip list of service {change.service}"
    if not change.changed:
        out.lines([f"{where} is {'not ' if remove else ''}in {listed}{'' if remove else ' already'}: nothing changed"])
    elif remove:
        out.lines([f"removed {where} from {listed}: a member stops at it again if a step raises on it"])
    else:
        because = f" ({change.entry.reason})" if change.entry.reason else ""
        then = "when a step raises on it, a member under on_error=fail dead-letters it and goes on"
        out.lines([f"added {where} to {listed}{because}: {then}. Start the service again"])


@group.command("skips")
@click.argument("service")
@_common
def group_skips(service: str, as_json: bool, config_file: str | None) -> None:
    """The records in SERVICE's skip list (fw group skip), with their reasons and when each was added."""
    pipeline = service_pipeline(service, "group skips")
    entries = Sk.read_skips(_settings(config_file), pipeline.name)
    if as_json:
        out.emit_json([s.as_dict() for s in entries])
        return
    if not entries:
        out.lines([f"the skip list of service {pipeline.name} is empty"])
        return
    out.table(f"skip list of service {pipeline.name}", ["record", "added", "reason"],
              [(s.where, s.at or "-", s.reason or "-") for s in entries], fold=("reason",))


def _listed(names: Iterable[str]) -> str:
    return ", ".join(sorted(names)) or "none"


# -- state -------------------------------------------------------------------------------

@click.group()
def state() -> None:
    """Read a service's stores (local RocksDB copies, their changelogs, or the running service), or drop one."""


def _source_option(f: F) -> F:
    return cast(F, click.option(
        "--source", type=click.Choice(["auto", "live", "local", "changelog"]), default="auto", show_default=True,
        help="live: asked of the running service over HTTP; local: this host's RocksDB copies (FW_STATE_DIR); "
             "changelog: rebuilt from the changelog; auto: live when a member answers, else local copies where "
             "present and the changelog for the other partitions.")(f))


def _open(service: str, store: str, source: str, config_file: str | None,
          live: Callable[[Pipeline, dict[str, Any]], list[St.StoreRow] | None]) -> St.StoreReader | list[St.StoreRow]:
    """The running service's answer (``--source live``, or ``auto`` when a member answers),
    else a reader of the local copies and changelogs."""
    config = load_config(config_file)
    pipeline, settings = service_pipeline(service, "state"), client_settings(config)
    if source in ("auto", "live"):
        rows = live(pipeline, settings)
        if rows is not None:
            return rows
        if source == "live":
            raise RuntimeProblem(f"no member of {pipeline.name!r} answers queries: the service does not run, or its "
                                 "members' endpoints are off or unreachable from here (fw status "
                                 f"{pipeline.name}). Fix: start it, or read --source local or changelog")
    return St.open_store(pipeline, store, config.state.dir, settings, cast(St.Source, source))


def _rows(opened: St.StoreReader | list[St.StoreRow], read: Callable[[St.StoreReader], list[St.StoreRow]],
          as_json: bool) -> None:
    if isinstance(opened, list):
        _print_rows(opened, [], as_json)
        return
    try:
        _print_rows(read(opened), opened.notes, as_json)
    finally:
        opened.close()


@state.command("drop")
@click.argument("service")
@click.argument("store")
@click.option("--dry-run", is_flag=True, help="Show what would be deleted; delete nothing.")
@_common
def state_drop(service: str, store: str, dry_run: bool, as_json: bool, config_file: str | None) -> None:
    """Delete STORE of SERVICE (module:pipeline, or its name with services/<package>/pipeline.py
    here), a store of an earlier release the pipeline no longer has: its changelog and its
    local copies here. Refused for a store the pipeline has, and while the group has members."""
    config = load_config(config_file)
    settings = client_settings(config)
    plan = C.plan_drop(settings, service_pipeline(service, "state drop"), store, config.state.dir)
    if not dry_run:
        C.apply_drop(settings, plan)
    if as_json:
        out.emit_json(plan.as_dict())
        return
    would = "would be " if dry_run else ""
    out.lines([f"changelog {would}deleted: {plan.changelog or 'none'}",
               f"local state {would}deleted from {plan.state_dir}: {_listed(plan.local)}",
               *plan.notes, "dry run: nothing was changed" if dry_run else f"store {store} dropped"])


@state.command("get")
@click.argument("service")
@click.argument("store")
@click.argument("key")
@_source_option
@_common
def state_get(service: str, store: str, key: str, source: str, as_json: bool, config_file: str | None) -> None:
    """The entries of KEY (the store's key type; JSON for non-string keys) in STORE of SERVICE."""
    opened = _open(service, store, source, config_file, lambda p, s: St.ask_live(s, p, store, key))
    _rows(opened, lambda reader: reader.get(key), as_json)


@state.command("scan")
@click.argument("service")
@click.argument("store")
@click.option("--prefix", default=None, metavar="KEY", help="Only keys whose text starts with KEY.")
@click.option("--from", "low", default=None, metavar="KEY", help="Only keys from KEY on (the key type).")
@click.option("--to", "high", default=None, metavar="KEY", help="Only keys before KEY (the key type).")
@click.option("--limit", default=100, show_default=True,
              help="At most this many entries (0: all; asked of a running service: at most 10000).")
@_source_option
@_common
def state_scan(service: str, store: str, prefix: str | None, low: str | None, high: str | None, limit: int,
               source: str, as_json: bool, config_file: str | None) -> None:
    """The entries of STORE of SERVICE: by partition and key, or (asked of a running service) in key order."""
    opened = _open(service, store, source, config_file,
                   lambda p, s: St.ask_live(s, p, store, prefix=prefix, low=low, high=high, limit=limit or None))
    _rows(opened, lambda reader: reader.scan(prefix, limit or None, low, high), as_json)


def _print_rows(rows: list[St.StoreRow], notes: list[str], as_json: bool) -> None:
    if as_json:
        out.emit_json({"entries": [r.as_dict() for r in rows], "notes": notes})
        return
    windowed = any(r.entry.window for r in rows)
    mapped = any(r.entry.map_key is not None for r in rows)
    columns = ["partition", "source", "state", "key", *(["window start", "window end"] if windowed else []),
               *(["map key"] if mapped else []), "value"]
    out.table(None, columns, [_state_cells(r, windowed, mapped) for r in rows], fold=("value",))
    out.lines([f"{len(rows)} entr{'y' if len(rows) == 1 else 'ies'}", *(f"note: {n}" for n in notes)])


def _state_cells(r: St.StoreRow, windowed: bool, mapped: bool) -> list[str]:
    e = r.entry
    cells = [str(r.partition), r.source, e.state, out.shown(e.key)]
    if windowed:
        cells += [out.when(e.window[0]), out.when(e.window[1])] if e.window else ["-", "-"]
    if mapped:
        cells.append(out.shown(e.map_key))
    return [*cells, out.shown(e.value)]
