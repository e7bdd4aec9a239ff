"""``fw describe SERVICE``: the service's topology, read from its code.

The rendering is ``framework.ops.describe``'s; this module reads the target and prints.
"""

from __future__ import annotations

import click

from framework.ops import describe as D
from framework.ops.targets import service_pipeline


@click.command()
@click.argument("service")
@click.option("--format", "fmt", type=click.Choice(sorted(D.FORMATS)), default="text", show_default=True,
              help="text: an indented tree; json: Pipeline.describe()'s data; mermaid: a flowchart to paste "
                   "into any Mermaid renderer.")
def describe(service: str, fmt: str) -> None:
    """Print SERVICE's topology: its sources with their serdes and watermark strategies,
    every step with its parameters, the stores and their changelogs, the internal topics
    (repartition, changelog), the outputs, late outputs and dead letters.

    SERVICE is module:pipeline, or a service's name in its project's root. Nothing is
    asked of the cluster: the topology is what the code defines.
    """
    click.echo(D.render(service_pipeline(service, "describe"), fmt))
