"""``fw run module:pipeline``: run a service."""

from __future__ import annotations

import sys

import click

from framework.logs import configure_logging
from framework.pipeline.loading import load_pipeline


def _instance_id(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """Refuse an id with a ``$(VAR)`` reference in it: a runtime that does not expand it (podman
    kube play, unlike the kubelet) gives every member the same id, and members of one id fence
    each other's transactions in turn, each taking all the partitions back, without end."""
    if value is not None and "$(" in value:
        raise click.BadParameter(
            f"{value!r} holds a $(VAR) reference nobody expanded (Kubernetes expands them in a container's "
            "command, podman kube play does not): every member would run with this one id and fence the others. "
            "Fix: give each member its own id, e.g. its pod's name", param_hint="--instance-id")
    return value


@click.command()
@click.argument("target")
@click.option("--processes", "-p", default=1, show_default=True, help="Group members to run (one per core).")
@click.option("--instance-id", default=None, callback=_instance_id,
              help="This member's stable id: names its transactional.id and makes it a static group member "
                   "(group.instance.id), which takes its partitions back without a rebalance when restarted "
                   "within the session timeout. With --processes N, child i is ID-i.")
@click.option("--dynamic-membership", is_flag=True, hidden=True,
              help="The instance id names the transactional.id only (children of --processes without an id).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="A TOML configuration file (else FW_CONFIG).")
@click.option("--log-level", default="INFO", show_default=True)
def run(target: str, processes: int, instance_id: str | None, dynamic_membership: bool, config_file: str | None,
        log_level: str) -> None:
    """Run the service defined by TARGET (module:pipeline) until SIGTERM or SIGINT."""
    configure_logging(log_level)  # text, or JSON lines with FW_LOG_FORMAT=json (children too)
    from pathlib import Path

    from framework.config import Config

    config = Config.load(Path(config_file) if config_file else None)
    if processes > 1:
        from framework.runtime.processes import supervise

        extra = ["--log-level", log_level] + (["--config", config_file] if config_file else [])
        sys.exit(supervise(target, processes, extra, config, instance_id))
    from framework.runtime.service import run_service

    pipeline = load_pipeline(target)
    run_service(pipeline, config, instance_id, static_membership=not dynamic_membership)
