"""``fw new service``: a service from a template, with its schemas, tests and compose entry.

The files (paths relative to the project root; ``<package>`` is e.g. ``fraud_alerts``):

- ``services/<package>/__init__.py`` and ``services/<package>/pipeline.py``;
- ``schemas/<package>.<record>.avsc`` for each input and output record;
- ``tests/topology/test_<package>.py`` (TestDriver) and ``tests/integration/test_<package>.py``
  (real broker, through ``framework.testing.kafka.ServiceRun``);
- the service's entry in ``docker-compose.yml``;
- its scrape target in ``deploy/prometheus/prometheus.yml``, when the project has that file;
- its Kubernetes manifests, ``deploy/kubernetes/services/<service>.yaml`` (listed in
  ``deploy/kubernetes/kustomization.yaml``) and ``deploy/kubernetes/replay/<service>.yaml``,
  when the project has that kustomization (``framework.scaffold.kubernetes``).

Creating the same service twice changes nothing; a file that exists with other content is
a conflict, reported before anything is written, and replaced only with ``force``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from framework.errors import ConfigError
from framework.scaffold import compose, kubernetes, prometheus
from framework.scaffold.names import ServiceNames, service_names
from framework.scaffold.render import Changes, FileSet, render_tree

TEMPLATE_SUMMARIES: dict[str, str] = {
    "stateless": "filter/map",
    "keyed": "key_by + rolling aggregate",
    "windowed": "event-time tumbling window",
    "join": "two-stream interval join",
    "process": "state and a timer",
    "enrich": "a stream joined with a table as of event time",
    "lookup": "an async call to an HTTP service per record",
}
"""Each template of ``fw new service --template`` and what it shows, in one phrase: the one
list that the CLI help and the generated project's README are made from."""
TEMPLATES = tuple(TEMPLATE_SUMMARIES)
FIRST_RUN: dict[str, tuple[str, ...]] = {
    "enrich": (
        "First run: {service}-enriched stays empty until the customers' watermark passes each order's time.",
        "To see output, send a later customer update (timestamp more than BOUND_MS past the orders)",
        "to every partition of {service}-customers, or give the customers' table an idle_timeout_ms",
        "(its WatermarkStrategy in services/{package}/pipeline.py; the framework's docs/tables.md):",
        "a partition without updates that long stops holding orders back, and a later order releases them.",
    ),
}
"""What a template's first run shows that surprises, and how to see output: lines that
``fw new service`` prints after its next steps (``{service}`` and ``{package}`` filled in)."""
DEFAULT_TEMPLATE = "keyed"
COMPOSE = "docker-compose.yml"
PROMETHEUS = prometheus.PROMETHEUS
KUSTOMIZATION = kubernetes.KUSTOMIZATION
ADDED_TO = (PROMETHEUS, KUSTOMIZATION)  # files a service is only ever added to: never a conflict


@dataclass(frozen=True)
class Result:
    """What a ``new_service`` or ``new_project`` call did, by relative path."""

    root: Path
    names: ServiceNames
    written: list[str]
    overwritten: list[str]
    unchanged: list[str]

    @property
    def changed(self) -> bool:
        return bool(self.written)


def find_project_root(start: Path) -> Path:
    """The nearest directory from ``start`` upwards with a ``pyproject.toml`` and a
    ``services/`` directory; ``ConfigError`` when there is none."""
    start = start.resolve()
    for directory in (start, *start.parents):
        if (directory / "pyproject.toml").is_file() and (directory / "services").is_dir():
            return directory
    raise ConfigError(f"no project here: no pyproject.toml next to a services/ directory in {start} or above; "
                      "run this inside a project, or create one with `fw new project DIR`")


def service_files(root: Path, names: ServiceNames, template: str, compose_text: str, *,
                  replace_entry: bool, prometheus_text: str | None = None,
                  kustomization_text: str | None = None, project: str = "") -> FileSet:
    """The files of a new service below ``root``; ``compose_text`` is the compose file to
    add its entry to (an existing entry is rebuilt only with ``replace_entry``),
    ``prometheus_text``, when given, the Prometheus configuration to add its target to, and
    ``kustomization_text``, when given, the kustomization to list its Kubernetes manifests
    in (written for project ``project``: its ConfigMap and image)."""
    if template not in TEMPLATES:
        raise ConfigError(f"unknown template {template!r}; choose one of {', '.join(TEMPLATES)}")
    context = {"package": names.package, "service": names.service, "title": names.title,
               "target": names.target, "kind": template}
    files = FileSet(root)
    for rel, text in {**render_tree("service/common", context), **render_tree(f"service/{template}", context)}.items():
        files.files[_destination(rel, names.package)] = text
    if not (root / "services" / "__init__.py").exists():
        files.files["services/__init__.py"] = ""
    files.files[COMPOSE] = compose.with_service(compose_text, names.service, names.target, replace=replace_entry,
                                                where=str(root / COMPOSE))
    if prometheus_text is not None:
        files.files[PROMETHEUS] = prometheus.with_target(prometheus_text, names.service,
                                                         where=str(root / PROMETHEUS))
    if kustomization_text is not None:
        files.files.update(kubernetes.manifests(names, project or kubernetes.project_of(root)))
        files.files[KUSTOMIZATION] = kubernetes.with_resource(kustomization_text, names.service,
                                                              where=str(root / KUSTOMIZATION))
    return files


def _destination(template_path: str, package: str) -> str:
    """Where a rendered service template goes: ``pipeline.py`` -> ``services/<package>/...``,
    ``schema.<record>.avsc`` -> ``schemas/<package>.<record>.avsc``, ``test_<kind>.py`` ->
    ``tests/<kind>/test_<package>.py``."""
    name = Path(template_path).name
    if name.startswith("schema."):
        return f"schemas/{package}.{name.removeprefix('schema.')}"
    if name.startswith("test_"):
        kind = name.removeprefix("test_").removesuffix(".py")
        return f"tests/{kind}/test_{package}.py"
    return f"services/{package}/{name}"


def new_service(root: Path, name: str, template: str = DEFAULT_TEMPLATE, *, force: bool = False) -> Result:
    """Create service ``name`` from ``template`` in the project at ``root``.

    Raises ``ConfigError`` (one line: what and how to fix) for a bad name, an unknown
    template, or files that exist with other content when not ``force``.
    """
    names = service_names(name)
    compose_path = root / COMPOSE
    compose_text = compose_path.read_text() if compose_path.exists() else ""
    entry = compose.service_entry(compose.load(compose_text, str(compose_path)), names.service)
    entry_differs = entry is not None and not compose.entry_matches(compose_text, names.service, names.target)
    prometheus_path = root / PROMETHEUS
    prometheus_text = prometheus_path.read_text() if prometheus_path.is_file() else None
    kustomization_path = root / KUSTOMIZATION
    kustomization_text = kustomization_path.read_text() if kustomization_path.is_file() else None
    files = service_files(root, names, template, compose_text, replace_entry=force,
                          prometheus_text=prometheus_text, kustomization_text=kustomization_text)
    changes = files.changes()
    if COMPOSE in changes.different and entry is None:
        changes.different.remove(COMPOSE)  # an entry added to the file is not a conflict
        changes.new.append(COMPOSE)
    for added_to in ADDED_TO:  # only ever a line added, never one changed
        if added_to in changes.different:
            changes.different.remove(added_to)
            changes.new.append(added_to)
    conflicts = [p for p in changes.different if p != COMPOSE]
    conflicts += [f"{COMPOSE} (entry {names.service!r})"] if entry_differs else []
    if conflicts and not force:
        raise ConfigError(f"service {names.service!r} exists with other content in {', '.join(conflicts)}; "
                          "pass --force to overwrite those files, or choose another name")
    return _apply(files, changes, names, force)


def _apply(files: FileSet, changes: Changes, names: ServiceNames, force: bool) -> Result:
    written = files.write(changes, force=force)
    return Result(root=files.root, names=names, written=written,
                  overwritten=[p for p in changes.different if p in written], unchanged=changes.same)
