"""The ``fw`` command line: broker, run, demo, replay and archive."""

from __future__ import annotations

import sys

import click

from framework.cli.broker import broker
from framework.cli.demo import demo
from framework.cli.doctor import doctor
from framework.cli.new import new
from framework.cli.ops import group, state, topics
from framework.cli.replay import archive, replay
from framework.cli.run import run
from framework.cli.status import status
from framework.errors import FrameworkError


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


def main() -> None:
    """Entry point of ``fw``: framework errors print one line, not a traceback."""
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except FrameworkError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
