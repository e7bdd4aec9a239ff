"""``fw registry start|status|stop|fetch``: the local schema registry (Apicurio Registry, in
its Confluent-compatible API mode)."""

from __future__ import annotations

import sys

import click

from framework.broker.registry import LocalRegistry


@click.group()
def registry() -> None:
    """Manage the local schema registry (Confluent-compatible API, in-memory storage)."""


@registry.command()
def start() -> None:
    """Start the registry (idempotent) and print its URL, the value for FW_SCHEMA_REGISTRY_URL."""
    click.echo(LocalRegistry().start().url)


@registry.command()
def status() -> None:
    """Tell whether the registry runs, where, and where its log is. Exit 1 when not running."""
    st = LocalRegistry().status()
    click.echo(st.describe())
    sys.exit(0 if st.running else 1)


@registry.command()
def stop() -> None:
    """Stop the registry (a no-op when it is not running). Its schemas are kept in memory
    only, so they are gone."""
    click.echo("stopped" if LocalRegistry().stop() else "not running")


@registry.command()
def fetch() -> None:
    """Resolve the registry from Maven Central into the cache."""
    click.echo(LocalRegistry().fetch())
