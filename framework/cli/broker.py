"""``fw broker start|status|stop|fetch``: the local Apache Kafka broker, or a local cluster of
several nodes (``--nodes``) and each of its nodes (``--node``)."""

from __future__ import annotations

import sys

import click

from framework.broker import LocalBroker
from framework.broker.cluster import LocalCluster, is_cluster
from framework.broker.local import SECURITY_MODES

_NODE_HELP = "One node of the local cluster (1 to its size)."


@click.group()
def broker() -> None:
    """Manage the local Apache Kafka broker (KRaft): one node, or a cluster of several."""


@broker.command()
@click.option("--security", type=click.Choice(SECURITY_MODES), default=None,
              help="Client listener of a new broker: plaintext (default), or SASL/SCRAM-SHA-512 with "
                   "ACLs, over TLS with sasl_ssl. An existing broker keeps the mode it was set up with.")
@click.option("--nodes", type=click.IntRange(min=2), default=None,
              help="A local cluster of this many nodes (3: replication factor 3, min.insync.replicas 2), "
                   "on consecutive port pairs from FW_BROKER_PORT.")
@click.option("--node", type=int, default=None, help=_NODE_HELP)
def start(security: str | None, nodes: int | None, node: int | None) -> None:
    """Start the broker, the cluster or one node of it (idempotent); print the bootstrap address.

    A secured broker's client settings (its super user's) are in ``<broker dir>/client.env``:
    load them with ``set -a; . <broker dir>/client.env; set +a``."""
    if nodes is not None or node is not None or is_cluster():
        if security not in (None, "plaintext"):
            raise click.UsageError("a local cluster is plaintext: --security is for a single broker")
        cluster = LocalCluster(nodes=nodes)
        click.echo(cluster.start(node).bootstrap)
        return
    b = LocalBroker(security=security)
    status = b.start()
    click.echo(status.bootstrap)
    if status.security != "plaintext" and not status.external:
        click.echo(f"security {status.security}: the super user's client settings are in {b.client_env} "
                   f"(set -a; . {b.client_env}; set +a)", err=True)


@broker.command()
def status() -> None:
    """Tell whether the broker (every node of a cluster) runs, where, where its logs are, and a
    cluster's under-replicated partitions. Exit 1 when nothing runs."""
    if is_cluster():
        cst = LocalCluster().status()
        click.echo("\n".join(cst.describe()))
        sys.exit(0 if cst.running else 1)
    st = LocalBroker().status()
    click.echo(st.describe())
    sys.exit(0 if st.running else 1)


@broker.command()
@click.option("--wipe", is_flag=True, help="Also delete the broker's data directory.")
@click.option("--node", type=int, default=None, help=_NODE_HELP)
@click.option("--kill", is_flag=True, help="SIGKILL instead of a clean shutdown (SIGTERM).")
def stop(wipe: bool, node: int | None, kill: bool) -> None:
    """Stop the broker, the cluster or one node of it (a no-op when it is not running)."""
    if is_cluster():
        if wipe and node is not None:
            raise click.UsageError("--wipe deletes the whole cluster: give it without --node")
        cluster = LocalCluster()
        was_running = cluster.wipe() if wipe else cluster.stop(node, kill=kill)
    elif node is not None:
        raise click.UsageError("--node names a node of a local cluster, and none is set up (fw broker start --nodes 3)")
    else:
        b = LocalBroker()
        if kill:
            raise click.UsageError("--kill is for the nodes of a local cluster")
        was_running = b.wipe() if wipe else b.stop()
    click.echo("stopped" if was_running or wipe else "not running")


@broker.command()
def fetch() -> None:
    """Resolve the Kafka server jars from Maven Central into the cache."""
    click.echo(LocalBroker().fetch())
