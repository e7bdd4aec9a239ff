"""The ``fw`` command line: broker, registry, run, demo, replay, archive and the operations commands."""

from __future__ import annotations

import importlib
import sys
import traceback

import click

from framework.errors import FrameworkError, UsageError
from framework.kafka.connect import client_failure
from framework.logs import debugging

# Each subcommand's module, imported when the command runs (or --help lists them all): the
# commands together import 0.5 s of CPU more than any one needs, paid before `fw replay`'s
# spark-submit and at every other command's start.
_COMMANDS = {
    "broker": "broker", "demo": "demo", "run": "run", "replay": "replay", "archive": "replay", "topics": "ops",
    "group": "ops", "state": "ops", "status": "status", "new": "new", "doctor": "doctor", "acls": "acls",
    "registry": "registry", "schemas": "schemas", "savepoint": "savepoint", "rescale": "savepoint",
    "produce": "produce", "describe": "describe", "dead-letters": "deadletters",
}


class _Commands(click.Group):
    """The ``fw`` group, its subcommands loaded on first use (``_COMMANDS``)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = _COMMANDS.get(cmd_name)
        if module is None:
            return None
        command: click.Command = getattr(importlib.import_module(f"framework.cli.{module}"), cmd_name.replace("-", "_"))
        return command


@click.group(cls=_Commands)
@click.version_option(package_name="kstreamflow")
def cli() -> None:
    """Flink-style stateful stream processing on Apache Kafka."""


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
        failure = client_failure(exc)
        _fail(failure or f"internal error {type(exc).__name__}: {exc} (FW_DEBUG=1 shows where; please report it)", 1)


def _fail(message: str, code: int) -> None:
    if debugging():
        traceback.print_exc()
    click.echo(f"error: {message}", err=True)
    sys.exit(code)
