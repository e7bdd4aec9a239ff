"""``fw demo``: the main job on the embedded default (a local broker it starts itself)."""

from __future__ import annotations

import click

from framework.broker import LocalBroker


@click.command()
@click.option("--service", "service", default=None,
              help="Run this service's demo (services/<name>/demo.py) instead of the sensors demo.")
@click.option("--records", type=int, default=None,
              help="How many records to produce [default: 5000 readings; 1000 with --service].")
@click.option("--sensors", default=8, show_default=True, help="How many sensors produce them (sensors demo).")
@click.option("--seed", default=7, show_default=True, help="Seed of the generated input.")
@click.option("--keep-topics", is_flag=True, help="Keep the run's topics (deleted by default).")
def demo(service: str | None, records: int | None, sensors: int, seed: int, keep_topics: bool) -> None:
    """Start the local broker, produce generated input, run a service, print and check results.

    Without --service: the sensors service. With --service NAME: any service whose package
    declares a demo (services/NAME/demo.py), its results checked against a direct
    computation. Every run uses its own topics and consumer group (a random suffix on their
    names), so runs never see each other's records.
    """
    from framework.demo import run_demo
    from framework.demos import demo_packages, run_service_demo

    count = records if records is not None else (5000 if service in (None, "sensors") else 1000)
    if count < 1 or sensors < 1:
        raise click.BadParameter("--records and --sensors must be positive")
    if service is not None and service != "sensors" and service.replace("-", "_") not in demo_packages():
        raise click.BadParameter(f"{service!r} has no demo; services with one: sensors, "
                                 f"{', '.join(demo_packages())}", param_hint="--service")
    status = LocalBroker().start()
    click.echo(f"broker: {status.bootstrap}")
    if service in (None, "sensors"):
        lines = run_demo(status.bootstrap, count, sensors=sensors, keep_topics=keep_topics, seed=seed)
    else:
        lines = run_service_demo(status.bootstrap, service, count, seed=seed, keep_topics=keep_topics)
    for line in lines:
        click.echo(line)
