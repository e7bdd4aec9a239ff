"""``fw demo``: the main job on the embedded default (a local broker it starts itself)."""

from __future__ import annotations

import click

from framework.broker import LocalBroker


@click.command()
@click.option("--records", default=5000, show_default=True, help="How many readings to produce.")
@click.option("--sensors", default=8, show_default=True, help="How many sensors produce them.")
@click.option("--keep-topics", is_flag=True, help="Keep the run's topics (deleted by default).")
def demo(records: int, sensors: int, keep_topics: bool) -> None:
    """Start the local broker, produce sensor readings, run the sensors service, print results.

    Every run uses its own topics and consumer group (a random suffix on their names), so
    runs never see each other's records.
    """
    from framework.demo import run_demo

    if records < 1 or sensors < 1:
        raise click.BadParameter("--records and --sensors must be positive")
    status = LocalBroker().start()
    click.echo(f"broker: {status.bootstrap}")
    for line in run_demo(status.bootstrap, records, sensors=sensors, keep_topics=keep_topics):
        click.echo(line)
