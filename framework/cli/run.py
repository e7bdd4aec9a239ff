"""``fw run module:pipeline``: run a service."""

from __future__ import annotations

import importlib
import sys

import click

from framework.errors import ConfigError
from framework.logs import configure_logging
from framework.pipeline.definition import Pipeline


def load_pipeline(target: str) -> Pipeline:
    """Import ``module:attribute`` (a Pipeline, or a function returning one)."""
    module_name, _, attr = target.partition(":")
    if not attr:
        raise ConfigError(f"expected module:pipeline, got {target!r} (e.g. services.even_odd.pipeline:pipeline)")
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")
    module = importlib.import_module(module_name)
    obj = getattr(module, attr, None)
    if obj is None:
        names = [n for n, v in vars(module).items() if isinstance(v, Pipeline)]
        raise ConfigError(f"{module_name} has no attribute {attr!r}; pipelines there: {names}")
    pipeline = obj() if callable(obj) and not isinstance(obj, Pipeline) else obj
    if not isinstance(pipeline, Pipeline):
        raise ConfigError(f"{target} is a {type(pipeline).__name__}, not a Pipeline")
    return pipeline


@click.command()
@click.argument("target")
@click.option("--processes", "-p", default=1, show_default=True, help="Group members to run (one per core).")
@click.option("--instance-id", default=None, help="This member's id (names its transactional.id).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="A TOML configuration file (else FW_CONFIG).")
@click.option("--log-level", default="INFO", show_default=True)
def run(target: str, processes: int, instance_id: str | None, config_file: str | None, log_level: str) -> None:
    """Run the service defined by TARGET (module:pipeline) until SIGTERM or SIGINT."""
    configure_logging(log_level)  # text, or JSON lines with FW_LOG_FORMAT=json (children too)
    from pathlib import Path

    from framework.config import Config

    config = Config.load(Path(config_file) if config_file else None)
    if processes > 1:
        from framework.runtime.processes import supervise

        extra = ["--log-level", log_level] + (["--config", config_file] if config_file else [])
        sys.exit(supervise(target, processes, extra, config))
    from framework.runtime.service import run_service

    pipeline = load_pipeline(target)
    run_service(pipeline, config, instance_id)
