"""``fw doctor``: check this machine and the configured cluster, one line per check.

The checks are in ``framework.ops.doctor``; this module prints them as they finish (or
all of them as JSON with ``--json``) and sets the exit status.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from framework.cli import output as out
from framework.cli.ops import _common
from framework.kafka.probe import CLOCK_TOPIC
from framework.ops import doctor as D
from framework.ops.targets import service_pipeline


@click.command()
@click.argument("service", required=False)
@click.option("--skip-clock", is_flag=True,
              help=f"Do not compare the clocks: the comparison writes three small records to {CLOCK_TOPIC}.")
@_common
def doctor(service: str | None, skip_clock: bool, as_json: bool, config_file: str | None) -> None:
    """Check this machine and the configured cluster: Python and the framework's version,
    Java 17+, Maven, the local broker's jars, the cluster (reachable, brokers and
    controller, settings transactions need), the broker's clock, the schema registry if one
    is configured, pyspark and Spark's Kafka connector, and the state directory (writable by
    this user, created if missing, and the free space under it).

    Prints a line per check, ✓ passed, ! warning, ✗ failed (with the fix on the same
    line), - skipped; exit status 1 when any check failed. Each check has a time limit, so
    an unreachable cluster is reported within seconds.

    The clock check writes three small records to the topic __fw_doctor (created on first
    use with LogAppendTime and 10 minutes' retention): Kafka has no other way to tell a
    client the broker's time. The skew is the broker's append time minus the midpoint of
    the local send and acknowledgement times; warning above 1 s, failure above 30 s.

    With SERVICE (module:pipeline, or a service's name in its project's root) also how the
    cluster keeps each of its topics: replication factor and min.insync.replicas, with a
    warning when a cluster of two brokers or more keeps one on a single node.
    """
    pipeline = service_pipeline(service, "doctor") if service else None
    config_check, config = D.load_config(Path(config_file) if config_file else None)
    todo = D.steps(config, clock=not skip_clock, service=pipeline)
    if as_json:
        checks = [config_check, *D.run(todo)]
        out.emit_json(checks)
    else:
        symbols = D.SYMBOLS if _can_print(D.SYMBOLS) else D.ASCII_SYMBOLS
        checks = [config_check]
        click.echo(D.line(config_check, symbols))
        for check in D.run(todo):
            checks.append(check)
            click.echo(D.line(check, symbols))
        click.echo(D.summary(checks))
    sys.exit(D.exit_code(checks))


def _can_print(symbols: dict[D.Status, str]) -> bool:
    """Whether stdout's encoding has ✓ and ✗ (a C locale's ASCII has not)."""
    try:
        "".join(symbols.values()).encode(sys.stdout.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return False
    return True
