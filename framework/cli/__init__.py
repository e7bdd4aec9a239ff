"""The ``fw`` command line: broker, registry, run, demo, replay, archive and the operations commands."""

from __future__ import annotations

import sys
import traceback

import click

from framework.cli.acls import acls
from framework.cli.broker import broker
from framework.cli.demo import demo
from framework.cli.doctor import doctor
from framework.cli.new import new
from framework.cli.ops import group, state, topics
from framework.cli.registry import registry
from framework.cli.replay import archive, replay
from framework.cli.run import run
from framework.cli.schemas import schemas
from framework.cli.status import status
from framework.errors import FrameworkError, UsageError
from framework.kafka.connect import client_failure
from framework.logs import debugging


@click.group()
@click.version_option(package_name="kstreamflow")
def cli() -> None:
    """Flink-style stateful stream processing on Apache Kafka."""


cli.add_command(broker)
cli.add_command(demo)
cli.add_command(run)
cli.add_command(replay)
cli.add_command(archive)
cli.add_command(topics)
cli.add_command(group)
cli.add_command(state)
cli.add_command(status)
cli.add_command(new)
cli.add_command(doctor)
cli.add_command(acls)
cli.add_command(registry)
cli.add_command(schemas)


def main() -> None:
    """Entry point of ``fw``: every error is one line on stderr, saying what is wrong and how
    to fix it. Exit status 2 for a wrong command, argument, setting, target or pipeline (fixed
    by asking differently), 1 for everything else. ``FW_DEBUG=1`` (or ``--log-level DEBUG``)
    prints the traceback too."""
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:  # one line, not click's usage block
        names, ctx = [], exc.ctx
        while ctx is not None and ctx.parent is not None:  # the subcommands, not the program's name
            names.append(ctx.info_name or "")
            ctx = ctx.parent
        said = exc.format_message()
        hint = "" if said.endswith(")") or "\n" in said else f" (see {' '.join(['fw', *reversed(names)])} --help)"
        _fail(f"{said}{hint}", exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except FrameworkError as exc:
        _fail(str(exc), 2 if isinstance(exc, UsageError) else 1)
    except Exception as exc:  # noqa: BLE001 - a client's own error, or a bug: one line still
        said = client_failure(exc)
        _fail(said or f"internal error {type(exc).__name__}: {exc} (FW_DEBUG=1 shows where; please report it)", 1)


def _fail(message: str, code: int) -> None:
    if debugging():
        traceback.print_exc()
    click.echo(f"error: {message}", err=True)
    sys.exit(code)
