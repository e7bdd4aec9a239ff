"""``fw demo``: the main job on the embedded default (a local broker it starts itself)."""

from __future__ import annotations

import click

from framework.broker import LocalBroker


@click.command()
@click.option("--records", default=5000, show_default=True, help="How many input records to produce.")
def demo(records: int) -> None:
    """Start the local broker, produce sensor readings, run the demo pipeline, print results."""
    from framework.demo import run_demo

    status = LocalBroker().start()
    click.echo(f"broker: {status.bootstrap}")
    for line in run_demo(status.bootstrap, records):
        click.echo(line)
