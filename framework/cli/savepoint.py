"""``fw savepoint create | list | describe | restore``: a service's state and positions, running
or stopped, kept as files, and put back onto a stopped service (docs/savepoints.md); ``fw
rescale``: the three steps of a rescale. The logic is in ``framework.savepoint``; this module
parses options and prints (``framework.cli.output``). Every refusal is a ``RuntimeProblem``
(``fw`` exits 1); a wrong argument is a usage error (2)."""

from __future__ import annotations

import base64
import json
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from framework.cli import output as out
from framework.cli.ops import _common, _listed, _settings
from framework.errors import RuntimeProblem
from framework.ops.targets import client_settings, is_target, load_config, service_pipeline
from framework.pipeline.definition import Pipeline
from framework.savepoint.manifest import (
    Listed,
    Manifest,
    StoreInfo,
    list_savepoints,
    savepoint_root,
)

if TYPE_CHECKING:
    from framework.savepoint.restore import RestorePlan


@click.group()
def savepoint() -> None:
    """Snapshot a service's state and positions (running: its members held at a checkpoint
    meanwhile; or stopped), list and describe the savepoints, restore one onto the stopped
    service."""


@savepoint.command("create")
@click.argument("service")
@click.option("--path", "path", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="The savepoint's directory (default: FW_SAVEPOINT_DIR, else ./savepoints, /<service>/<time>).")
@click.option("--master", default=None,
              help="Make the stores with Spark on this master (local[*], spark://host:7077): state larger than this "
                   "process's memory. Without it, they are rebuilt in this process.")
@click.option("--conf", "confs", multiple=True, metavar="K=V", help="A Spark setting (repeatable; with --master).")
@click.option("--hold", "hold_s", type=click.FloatRange(min=1, max=600), default=300, show_default=True,
              help="A running service: how long its members are held at a checkpoint at most (the savepoint is "
                   "void if reading it takes longer).")
@_common
def savepoint_create(service: str, path: Path | None, master: str | None, confs: tuple[str, ...], hold_s: float,
                     as_json: bool, config_file: str | None) -> None:
    """Write a savepoint of SERVICE (module:pipeline, or its name with services/<package>/pipeline.py
    here): every store of every task, the group's offsets and the repartition topics' records
    in flight. A running service's members are held at a checkpoint (their inputs paused)
    while it is read."""
    from framework.savepoint.create import create_savepoint

    if confs and master is None:
        raise click.UsageError("--conf sets Spark's settings: give --master too")
    pipeline = service_pipeline(service, "savepoint create")
    stores_by = None if master is None else SparkStores(pipeline.target or service, master, confs, config_file)
    where, manifest = create_savepoint(_settings(config_file), pipeline, path, stores_by, hold_s)
    where = where.resolve()
    if as_json:
        out.emit_json({"path": str(where), **_summary(manifest)})
        return
    _describe(where, manifest)
    out.lines([f"savepoint written to {where}"])


class SparkStores:
    """``fw savepoint create --master``: the stores written by a Spark job (the replay's
    ``spark-submit`` machinery, ``framework.replay.snapshot``) from the ranges a restore reads,
    instead of in this process's memory."""

    def __init__(self, target: str, master: str, confs: tuple[str, ...], config_file: str | None) -> None:
        self.target, self.master, self.confs, self.config_file = target, master, confs, config_file

    def __call__(self, directory: Path, settings: Mapping[str, Any], pipeline: Pipeline, tasks: int,
                 committed: Mapping[tuple[str, int], int]) -> dict[str, StoreInfo]:
        from framework.cli.replay import run_job
        from framework.replay.plan import ReplayPlan, definition_of
        from framework.savepoint.create import restore_ranges, store_info
        from framework.savepoint.files import STORES_RESULT as RESULT

        stores = pipeline.store_names()
        plan = ReplayPlan(target=self.target, service=pipeline.name, run_id=uuid.uuid4().hex[:10],
                          bootstrap_servers=load_config(self.config_file).kafka.bootstrap_servers, partitions=tasks,
                          ranges=restore_ranges(settings, pipeline, committed), stages=[],
                          definition=definition_of(pipeline),
                          savepoint={"path": str(directory.resolve()),
                                     "stores": {s: pipeline.restore_topic(s) for s in stores},
                                     "tables": [s for s in stores if pipeline.table_source(s) is not None]})
        # the job's progress on stderr: stdout is the savepoint's description (or its JSON)
        code = run_job(plan, self.target, "savepoint", self.master, self.confs, False, self.config_file,
                       to_stderr=True)
        if code != 0:
            raise RuntimeProblem(f"the Spark job that writes the savepoint's stores failed (exit code {code}; its "
                                 "output above says why): no savepoint was written")
        result = json.loads((directory / RESULT).read_text())
        (directory / RESULT).unlink()
        return {s: store_info(pipeline, s, {p: int(result["counts"][s].get(str(p), 0)) for p in range(tasks)},
                              None if result["signatures"][s] is None else base64.b64decode(result["signatures"][s]))
                for s in stores}


@savepoint.command("list")
@click.argument("service", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts) instead of a table.")
def savepoint_list(service: str | None, as_json: bool) -> None:
    """The savepoints under FW_SAVEPOINT_DIR (default ./savepoints), of SERVICE (its name, or
    module:pipeline) when given. One whose manifest does not read is listed too, and said on
    stderr in one line with the fix; the command then exits 1, as a restore of it would."""
    name = service_pipeline(service, "savepoint list").name if service and is_target(service) else service
    found = list_savepoints(savepoint_root(), name)
    if as_json:
        out.emit_json([{"path": str(s.path.resolve()), "size": s.size, **_summary(s.manifest)} if s.manifest else
                       {"path": str(s.path.resolve()), "size": s.size, "service": s.path.parent.name,
                        "unreadable": s.unreadable.reason if s.unreadable else None} for s in found])
    else:
        out.table(None, ["savepoint", "service", "created", "stores", "entries", "size"],
                  [_listed_row(s) for s in found])
        unreadable = sum(1 for s in found if s.manifest is None)
        out.lines([f"{len(found)} savepoint{'' if len(found) == 1 else 's'} under {savepoint_root()}"
                   + (f", {unreadable} of them unreadable" if unreadable else "")])
    failed = [(s.path, s.unreadable) for s in found if s.unreadable is not None]
    for path, why in failed:  # one line each: which savepoint, why, and the fix
        click.echo(f"error: savepoint {path} cannot be read: {why.reason}. Fix: {why.fix}", err=True)
    if failed:
        sys.exit(1)


def _listed_row(s: Listed) -> tuple[str, ...]:
    if s.manifest is None:
        return (str(s.path), s.path.parent.name, "unreadable (below)", "-", "-", _size(s.size))
    m = s.manifest
    return (str(s.path), m.service, m.created, str(len(m.stores)), str(sum(i.total for i in m.stores.values())),
            _size(s.size))


@savepoint.command("describe")
@click.argument("path", type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")
def savepoint_describe(path: Path, as_json: bool) -> None:
    """The manifest of the savepoint at PATH: service, pipeline, stores, offsets, records in flight."""
    manifest = Manifest.load(path)
    if as_json:
        out.emit_json({"path": str(path), **_summary(manifest), "manifest": manifest})
        return
    _describe(path, manifest)


@savepoint.command("restore")
@click.argument("service")
@click.argument("path", type=click.Path(file_okay=False, path_type=Path))
@click.option("--allow-dropped-state", is_flag=True,
              help="Restore even though the savepoint holds stores the pipeline no longer has (left out).")
@click.option("--partitions", type=click.IntRange(min=1), default=None,
              help="The partition count of the service's sources, when it is not the savepoint's: rescales it.")
@click.option("--dry-run", is_flag=True,
              help="Read and check every file as a restore does, show what would change; change nothing.")
@_common
def savepoint_restore(service: str, path: Path, allow_dropped_state: bool, partitions: int | None, dry_run: bool,
                      as_json: bool, config_file: str | None) -> None:
    """Put the savepoint at PATH back onto SERVICE (module:pipeline, or its name with
    services/<package>/pipeline.py here), which must be stopped:
    its changelogs, repartition topics and group offsets become the savepoint's; its local
    state here is deleted. Every file is read and checked against the manifest first: a
    damaged savepoint is refused before anything changes. With --partitions N, onto sources
    of N partitions: each key's state goes to the partition the partitioner gives it there."""
    from framework.savepoint.restore import apply_restore, plan_restore

    config = load_config(config_file)
    settings = client_settings(config)
    plan = plan_restore(settings, service_pipeline(service, "savepoint restore"), path, config.state.dir,
                        allow_dropped=allow_dropped_state, partitions=partitions)
    if not dry_run:
        apply_restore(settings, plan)
    _print_restore(path, plan, dry_run, as_json)


@click.command("rescale")
@click.argument("service")
@click.option("--partitions", type=click.IntRange(min=1), required=True,
              help="The new partition count, more than the service's (Kafka only adds partitions).")
@click.option("--path", "path", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="The savepoint's directory (default: FW_SAVEPOINT_DIR, else ./savepoints, /<service>/<time>).")
@_common
def rescale(service: str, partitions: int, path: Path | None, as_json: bool, config_file: str | None) -> None:
    """Rescale SERVICE (module:pipeline, or its name with services/<package>/pipeline.py here), stopped and with every record of its sources
    processed, to more partitions: a savepoint, partitions added to the sources, and the
    savepoint restored onto them (docs/savepoints.md, Rescaling)."""
    from framework.savepoint.restore import rescale_service

    config = load_config(config_file)
    pipeline = service_pipeline(service, "rescale")
    where, plan = rescale_service(client_settings(config), pipeline, partitions, config.state.dir, path)
    _print_restore(where, plan, False, as_json)


def _print_restore(path: Path, plan: RestorePlan, dry_run: bool, as_json: bool) -> None:
    if as_json:
        out.emit_json(plan.as_dict())
        return
    would = "would be " if dry_run else ""
    written = ", ".join(f"{s} ({n} entries)" for s, n in sorted(plan.written.items())) or "none"
    onto = "" if plan.rescale is None else f" (rescaled from {plan.manifest.partitions} to {plan.rescale.tasks} partitions)"
    checked = "SHA-256 and rows as its manifest lists" if plan.verified.checksummed else (
        "rows as its manifest counts; it lists no checksums (an earlier release made it)")
    out.lines([f"savepoint {path} onto service {plan.service}{onto}",
               f"files read and checked: {len(plan.verified.digests)} ({checked})",
               f"stores {would}written: {written}"])
    out.table(f"offsets of group {plan.service} {would}committed", ["topic", "partition", "offset"],
              [(t, str(p), str(o)) for (t, p), o in sorted(plan.offsets.items())])
    out.lines([f"topics {would}created anew: {_listed(plan.recreated)}",
               f"records in flight {would}written back: "
               + (", ".join(f"{t} ({n})" for t, n in sorted(plan.in_flight.items())) or "none"),
               f"stores the savepoint does not have, starting empty: {_listed(plan.empty)}",
               f"local state {would}deleted from {plan.state_dir}: {_listed(plan.local)}",
               *plan.notes, "dry run: nothing was changed" if dry_run else "savepoint restored"])


def _summary(manifest: Manifest) -> dict[str, object]:
    return {"service": manifest.service, "created": manifest.created, "partitions": manifest.partitions,
            "stores": {s: {"entries": i.total, "partitions": i.entries} for s, i in manifest.stores.items()},
            "pipeline_hash": manifest.pipeline.get("hash"), "held": manifest.held}


def _describe(path: Path, m: Manifest) -> None:
    out.lines([f"savepoint {path}", (f"service {m.service} ({m.target or '-'})  created {m.created}  "
                                     f"partitions {m.partitions}  format {m.format}  state format {m.state_format}"),
               f"pipeline {m.pipeline.get('hash')}: {len(m.pipeline.get('steps', []))} steps",
               ("members held at a checkpoint while it was read: " + ", ".join(m.held)) if m.held
               else "the service was stopped"])
    out.table("stores", ["store", "changelog", "entries", *(f"[{p}]" for p in range(m.partitions))],
              [(s, i.changelog or "(its own topic)", str(i.total), *(str(i.entries.get(p, 0)) for p in range(m.partitions)))
               for s, i in sorted(m.stores.items())])
    out.table("committed offsets of the group", ["topic", "partition", "offset"],
              [(t, str(p), str(o)) for t, parts in sorted(m.offsets.items()) for p, o in sorted(parts.items())])
    out.table("records in flight (repartition topics)",
              ["topic", "partition", "from", "to"],
              [(t, str(p), str(r.committed[p]), str(r.end[p])) for t, r in sorted(m.repartition.items())
               for p in sorted(r.end)])
    out.lines([f"{r.records} records in flight in {t}" for t, r in sorted(m.repartition.items())])


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)
