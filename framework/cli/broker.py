"""``fw broker start|status|stop|fetch``: the local Apache Kafka broker."""

from __future__ import annotations

import sys

import click

from framework.broker import LocalBroker


@click.group()
def broker() -> None:
    """Manage the local single-node Apache Kafka broker (KRaft)."""


@broker.command()
def start() -> None:
    """Start the broker (idempotent) and print its bootstrap address."""
    status = LocalBroker().start()
    click.echo(status.bootstrap)


@broker.command()
def status() -> None:
    """Tell whether the broker runs, where, and where its logs are. Exit 1 when not running."""
    st = LocalBroker().status()
    click.echo(st.describe())
    sys.exit(0 if st.running else 1)


@broker.command()
@click.option("--wipe", is_flag=True, help="Also delete the broker's data directory.")
def stop(wipe: bool) -> None:
    """Stop the broker (a no-op when it is not running)."""
    b = LocalBroker()
    was_running = b.wipe() if wipe else b.stop()
    click.echo("stopped" if was_running or wipe else "not running")


@broker.command()
def fetch() -> None:
    """Resolve the Kafka server jars from Maven Central into the cache."""
    click.echo(LocalBroker().fetch())
