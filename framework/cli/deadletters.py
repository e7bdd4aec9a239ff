"""``fw dead-letters SERVICE`` (list them, grouped) and ``fw dead-letters redrive SERVICE``.

The logic is in ``framework.ops.deadletters``; this module parses options and prints.
"""

from __future__ import annotations

import click

from framework.cli import output as out
from framework.cli.ops import _common, _settings
from framework.ops import deadletters as D
from framework.ops.targets import service_pipeline


class _ListByDefault(click.Group):
    """``fw dead-letters SERVICE`` is ``fw dead-letters list SERVICE``: a first argument that
    names no subcommand (and is not --help) starts the listing."""

    default_command = "list"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


@click.group(cls=_ListByDefault)
def dead_letters() -> None:
    """A service's dead letters: fw dead-letters SERVICE lists them grouped by step and error;
    fw dead-letters redrive SERVICE feeds them back, once the code is fixed, to the step each
    failed at, exactly once across runs."""


_SINCE_HELP = "Only dead letters of records stamped at or after this time (ISO 8601 or ms since the epoch)."


@dead_letters.command("list")
@click.argument("service")
@click.option("--since", default=None, metavar="TIME", help=_SINCE_HELP)
@click.option("--step", default=None, help="Only the dead letters of this step.")
@_common
def dead_letters_list(service: str, since: str | None, step: str | None, as_json: bool,
                      config_file: str | None) -> None:
    """SERVICE's dead letters grouped by step and error: how many, the first and last
    timestamp, one example's topic[partition]@offset; 'again' counts dead letters of
    re-driven records, 'redriven' those re-driven already."""
    pipeline = service_pipeline(service, "dead-letters")
    start = D.since_ms(since)
    D.check_step(pipeline, step)
    settings = _settings(config_file)
    groups = D.group_letters(D.read_letters(settings, pipeline), since=start, step=step,
                             redriven=D.read_redriven(settings, pipeline.name))
    if as_json:
        out.emit_json({"service": pipeline.name, "topic": pipeline.dead_letter.name,
                       "groups": [g.as_dict() for g in groups]})
        return
    if not groups:
        click.echo(f"no dead letters in {pipeline.dead_letter.name}" + (f" since {since}" if since else ""))
        return
    out.table(f"{pipeline.dead_letter.name}: {sum(g.count for g in groups)} dead letters",
              ["step", "error type", "error", "count", "first", "last", "example", "again", "redriven"],
              [(g.step, g.kind, g.error, str(g.count), out.when(g.first), out.when(g.last), g.example, str(g.again),
                str(g.redriven)) for g in groups], fold=["error"])


@dead_letters.command("redrive")
@click.argument("service")
@click.option("--step", default=None, help="Only the dead letters of this step.")
@click.option("--since", default=None, metavar="TIME", help=_SINCE_HELP)
@click.option("--dry-run", is_flag=True, help="Show what would be re-driven; write nothing.")
@_common
def dead_letters_redrive(service: str, step: str | None, since: str | None, dry_run: bool, as_json: bool,
                         config_file: str | None) -> None:
    """Feed SERVICE's dead letters back to the step each failed at (after the code was fixed):
    each goes once, whatever runs before (the ledger topic <service>-redrives). Those that fail again
    become new dead letters with the header fw.redrive.of naming the one re-driven."""
    pipeline = service_pipeline(service, "dead-letters redrive")
    start = D.since_ms(since)
    plan = D.redrive(_settings(config_file), pipeline, step=step, since=start, dry_run=dry_run)
    if as_json:
        out.emit_json(plan.as_dict())
        return
    verb = "would re-drive" if dry_run else "re-drove"
    lines = [f"{verb} {r.of} to step {r.step!r} ({r.topic}[{r.partition}])" for r in plan.items]
    lines += [f"not re-driven {w}: {why}" for w, why in plan.refused]
    if plan.done:
        lines.append(f"already re-driven (the ledger {pipeline.name}-redrives): {len(plan.done)}")
    lines.append(f"{verb} {len(plan.items)} dead letter(s)" + ("; dry run: nothing was written" if dry_run else ""))
    out.lines(lines)
