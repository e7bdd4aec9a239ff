"""``fw new project DIR``: a standalone project that depends on the framework as a package.

It holds ``pyproject.toml`` (the framework as its one dependency), ``services/`` with one
service made from the keyed template, ``schemas/``, ``tests/``, ``docker-compose.yml`` with
the configuration of the Prometheus it runs (``deploy/prometheus/prometheus.yml``), the
Kubernetes manifests (``deploy/kubernetes/``: ``framework.scaffold.kubernetes``), a
``Dockerfile``, ``.gitignore``, ``README.md`` and ``scripts/`` (``bootstrap.sh``, ``test``,
``demo``, ``ci``, ``vendor``). The framework is not published on a package index, so the
dependency names where this framework came from (``framework_spec``).
"""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

import framework
from framework.errors import ConfigError
from framework.scaffold.names import project_name, service_names
from framework.scaffold.render import FileSet, render_tree
from framework.scaffold.service import (
    COMPOSE,
    KUSTOMIZATION,
    PROMETHEUS,
    TEMPLATES,
    Result,
    service_files,
)

DISTRIBUTION = "kstreamflow"
DEFAULT_SERVICE = "spend"
# Template names without their leading dot: package data globs skip dotfiles.
_RENAMED = {"gitignore": ".gitignore"}
_PACKAGES = ("tests/__init__.py", "tests/topology/__init__.py", "tests/integration/__init__.py")


def framework_spec() -> str:
    """The requirement that installs this framework where it came from.

    From the installed distribution's PEP 610 ``direct_url.json``: a local directory or
    archive gives ``kstreamflow @ file:///...``, a VCS checkout ``kstreamflow @
    git+URL@commit``. Without one, a framework imported from a checkout (a source tree with
    its ``pyproject.toml``) gives that checkout, else ``kstreamflow>=<version>``.
    """
    # Every copy of the metadata on sys.path: a checkout's own egg-info (no direct_url.json)
    # can come before the installed one when run from the checkout's root.
    versions = []
    for dist in metadata.distributions(name=DISTRIBUTION):
        versions.append(dist.version)
        spec = _direct_url_spec(dist.read_text("direct_url.json"))
        if spec:
            return spec
    checkout = Path(framework.__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").is_file() and f'name = "{DISTRIBUTION}"' in (checkout / "pyproject.toml").read_text():
        return f"{DISTRIBUTION} @ {checkout.as_uri()}"
    if versions:
        return f"{DISTRIBUTION}>={versions[0]}"
    raise ConfigError(f"cannot tell where the {DISTRIBUTION} framework comes from; pass --framework "
                      f"'{DISTRIBUTION} @ file:///path/to/checkout'")


def _direct_url_spec(text: str | None) -> str | None:
    if not text:
        return None
    info = json.loads(text)
    url = str(info.get("url", ""))
    vcs = info.get("vcs_info")
    if vcs and url:
        commit = vcs.get("commit_id") or vcs.get("requested_revision")
        return f"{DISTRIBUTION} @ {vcs['vcs']}+{url}" + (f"@{commit}" if commit else "")
    return f"{DISTRIBUTION} @ {url}" if url else None


def new_project(directory: Path, *, service: str = DEFAULT_SERVICE, framework: str | None = None,
                force: bool = False) -> Result:
    """Create the project in ``directory`` (created if missing). An existing file with other
    content is a conflict (``ConfigError``, nothing written) unless ``force``; running it
    again changes nothing."""
    root = directory.resolve()
    if root.exists() and not root.is_dir():
        raise ConfigError(f"{directory} exists and is not a directory; choose another path")
    names = service_names(service)
    spec = framework or framework_spec()
    project = project_name(root.name)
    context = {"project": project, "framework_spec": spec, "package": names.package,
               "service": names.service, "target": names.target, "templates": TEMPLATES}
    files = FileSet(root)
    for rel, text in render_tree("project", context).items():
        rel = _RENAMED.get(rel, rel)
        files.files[rel] = text
        if rel.startswith("scripts/") and "." not in Path(rel).name:
            files.executable.add(rel)
    for rel in _PACKAGES:
        files.files[rel] = ""
    files.files["services/__init__.py"] = ""
    service_set = service_files(root, names, "keyed", files.files[COMPOSE], replace_entry=False,
                                prometheus_text=files.files[PROMETHEUS],
                                kustomization_text=files.files[KUSTOMIZATION], project=project)
    files.files.update(service_set.files)
    changes = files.changes()
    if changes.different and not force:
        raise ConfigError(f"{directory} already holds other versions of {', '.join(changes.different)}; "
                          "pass --force to overwrite them, or choose a new directory")
    written = files.write(changes, force=force)
    return Result(root=root, names=names, written=written,
                  overwritten=[p for p in changes.different if p in written], unchanged=changes.same)
