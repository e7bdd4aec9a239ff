"""``fw broker start|status|stop|fetch``: the local Apache Kafka broker."""

from __future__ import annotations

import sys

import click

from framework.broker import LocalBroker
from framework.broker.local import SECURITY_MODES


@click.group()
def broker() -> None:
    """Manage the local single-node Apache Kafka broker (KRaft)."""


@broker.command()
@click.option("--security", type=click.Choice(SECURITY_MODES), default=None,
              help="Client listener of a new broker: plaintext (default), or SASL/SCRAM-SHA-512 with "
                   "ACLs, over TLS with sasl_ssl. An existing broker keeps the mode it was set up with.")
def start(security: str | None) -> None:
    """Start the broker (idempotent) and print its bootstrap address.

    A secured broker's client settings (its super user's) are in ``<broker dir>/client.env``:
    load them with ``set -a; . <broker dir>/client.env; set +a``."""
    b = LocalBroker(security=security)
    status = b.start()
    click.echo(status.bootstrap)
    if status.security != "plaintext" and not status.external:
        click.echo(f"security {status.security}: the super user's client settings are in {b.client_env} "
                   f"(set -a; . {b.client_env}; set +a)", err=True)


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
