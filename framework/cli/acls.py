"""``fw acls SERVICE --principal User:NAME [--grant]``: the ACLs a service needs."""

from __future__ import annotations

import click

from framework.cli import output as out
from framework.kafka.acl import grant
from framework.ops.targets import client_settings, load_config, load_service
from framework.runtime.topics import service_grants


@click.command()
@click.argument("target")
@click.option("--principal", required=True, help="Who runs the service, e.g. User:orders-svc.")
@click.option("--grant", "apply", is_flag=True,
              help="Create the ACLs (the configured client must be allowed to: an admin's settings).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts) instead of a table.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="A TOML configuration file (else FW_CONFIG).")
def acls(target: str, principal: str, apply: bool, as_json: bool, config_file: str | None) -> None:
    """List the ACLs a member of TARGET (module:pipeline) needs on a cluster with an
    authorizer, as Kafka's kafka-acls arguments; with --grant, create them."""
    if not principal.startswith("User:"):
        raise click.BadParameter(f"{principal!r} is not a principal; write User:NAME", param_hint="--principal")
    pipeline = load_service(target)
    grants = service_grants(pipeline)
    if apply:
        grant(client_settings(load_config(config_file)), principal, grants)
    if as_json:
        out.emit_json([{"resource": g.resource, "name": g.name, "pattern": "prefixed" if g.prefixed else "literal",
                        "operation": g.operation, "kafka_acls": g.kafka_acls_args()} for g in grants])
        return
    title = f"{'granted to' if apply else 'needed by'} {principal} for service {pipeline.name}"
    out.table(title, ["resource", "name", "pattern", "operation", "kafka-acls --add --allow-principal ... "],
              [(g.resource, g.name, "prefixed" if g.prefixed else "literal", g.operation.upper(),
                g.kafka_acls_args()) for g in grants])
