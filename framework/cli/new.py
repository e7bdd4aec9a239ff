"""``fw new service NAME`` and ``fw new project DIR``: scaffolding from templates."""

from __future__ import annotations

import os
from pathlib import Path

import click

from framework.scaffold import (
    DEFAULT_TEMPLATE,
    FIRST_RUN,
    TEMPLATE_SUMMARIES,
    TEMPLATES,
    Result,
    find_project_root,
    new_project,
    new_service,
)
from framework.scaffold.project import DEFAULT_SERVICE


@click.group()
def new() -> None:
    """Create a service or a project from templates."""


@new.command("service")
@click.argument("name")
@click.option("--template", type=click.Choice(TEMPLATES), default=DEFAULT_TEMPLATE, show_default=True,
              help="; ".join(f"{name}: {what}" for name, what in TEMPLATE_SUMMARIES.items()) + ".")
@click.option("--force", is_flag=True, help="Overwrite files that exist with other content.")
def service(name: str, template: str, force: bool) -> None:
    """Create service NAME (e.g. fraud-alerts) in the project around the current directory:
    its pipeline, Avro schemas, tests, docker-compose.yml entry and, when the project has
    deploy/kubernetes/, its Kubernetes manifests."""
    result = new_service(find_project_root(Path.cwd()), name, template, force=force)
    _report(result, f"service {result.names.service}")
    if result.changed:
        _next_steps(result)
        for line in FIRST_RUN.get(template, ()):
            click.echo(line.format(service=result.names.service, package=result.names.package))


@new.command("project")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--service", "service_name", default=DEFAULT_SERVICE, show_default=True,
              help="Name of its first service (keyed template).")
@click.option("--framework", "framework_spec", default=None,
              help="The framework requirement to write into pyproject.toml "
                   "(default: where this framework was installed from).")
@click.option("--force", is_flag=True, help="Overwrite files that exist with other content.")
def project(directory: Path, service_name: str, framework_spec: str | None, force: bool) -> None:
    """Create a standalone project in DIRECTORY that depends on this framework as a package."""
    result = new_project(directory, service=service_name, framework=framework_spec, force=force)
    _report(result, f"project {directory}")
    if result.changed:
        where = os.path.relpath(result.root)
        click.echo("\nNext steps:")
        click.echo(f"  cd {where}")
        click.echo("  scripts/test     # creates .venv, installs the project and the framework, runs the tests")
        click.echo(f"  scripts/demo     # runs {result.names.service} over sample input on a local broker")
        click.echo(f"  fw new service NAME --template {'|'.join(TEMPLATES)}   # inside .venv: another service")


def _report(result: Result, what: str) -> None:
    if not result.changed:
        click.echo(f"{what}: nothing changed, every file is already as generated ({result.root})")
        return
    for rel in result.written:
        verb = "overwrote" if rel in result.overwritten else "wrote"
        click.echo(f"{verb} {rel}")


def _next_steps(result: Result) -> None:
    package, svc = result.names.package, result.names.service
    click.echo("\nNext steps:")
    click.echo(f"  scripts/test tests/topology/test_{package}.py tests/integration/test_{package}.py")
    click.echo(f"  fw run {result.names.target}   # on the broker at FW_BOOTSTRAP_SERVERS or `fw broker start`")
    click.echo(f"  docker compose up -d --build {svc}   # deploy it next to the broker")
    if any(rel.startswith("deploy/kubernetes/services/") for rel in result.written):
        click.echo("  kubectl apply -k deploy/kubernetes   # or on Kubernetes, its image pushed first")
