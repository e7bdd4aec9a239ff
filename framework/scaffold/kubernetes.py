"""A service's Kubernetes manifests in ``deploy/kubernetes/``, and its line in the kustomization.

``fw new project`` writes ``deploy/kubernetes/config.yaml`` (the ConfigMap every service takes
its ``FW_`` settings from) and ``kustomization.yaml``; per service, ``fw new project`` and
``fw new service`` write:

- ``deploy/kubernetes/services/<service>.yaml``: a headless Service, a StatefulSet (each pod's
  name its ``--instance-id``, a volume per pod for its state) and a PodDisruptionBudget;
- ``deploy/kubernetes/replay/<service>.yaml``: a Job that runs ``fw replay`` (started by hand,
  so not in the kustomization);
- ``services/<service>.yaml`` in the kustomization's ``resources``, in alphabetical order among
  the other services' files, the file edited with ruamel.yaml in round-trip mode (comments,
  order and quoting stay).

What the manifests say about the image (its user, where it keeps state and schemas) is the
project's ``Dockerfile``'s; the port is the endpoint's default (``framework.observe.server``).
The project's name (the ConfigMap's and the image's) is ``[project] name`` of its
``pyproject.toml``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from framework.errors import ConfigError
from framework.observe.server import DEFAULT_PORT
from framework.scaffold.compose import dump, parse
from framework.scaffold.names import ServiceNames, project_name
from framework.scaffold.render import environment

DIRECTORY = "deploy/kubernetes"
KUSTOMIZATION = f"{DIRECTORY}/kustomization.yaml"
CONFIG = f"{DIRECTORY}/config.yaml"
PORT = DEFAULT_PORT  # FW_OBSERVE__PORT of every member, as in docker-compose.yml
STATE_DIR = "/var/lib/fw/state"  # FW_STATE_DIR of the Dockerfile: the state volume's mount
SCHEMAS_DIR = "/app/schemas"  # FW_SCHEMAS_DIR of the Dockerfile
UID = 10001  # the Dockerfile's user fw
REPLAY_HOME = "/var/lib/fw/home"  # FW_HOME of a replay Job: fw replay's caches
# Final batch, async calls in flight (5 s), the final checkpoint's flush, offsets and commit
# (each bounded by processing.revoke_timeout_ms, 30 s by default) and leaving the group.
GRACE_S = 120
# A StatefulSet's pods carry the label controller-revision-hash=<name>-<10 characters>,
# and a label value holds at most 63.
MAX_NAME = 52


def service_manifest(service: str) -> str:
    return f"{DIRECTORY}/services/{service}.yaml"


def replay_manifest(service: str) -> str:
    return f"{DIRECTORY}/replay/{service}.yaml"


def manifests(names: ServiceNames, project: str) -> dict[str, str]:
    """The service's two manifest files, by path relative to the project root."""
    if len(names.service) > MAX_NAME:
        raise ConfigError(f"service name {names.service!r} is {len(names.service)} characters long: Kubernetes "
                          f"takes at most {MAX_NAME} for a StatefulSet (its pods' labels hold its name and a "
                          f"hash); choose a shorter name, or delete {DIRECTORY}/ from the project")
    context = {"service": names.service, "target": names.target, "project": project, "port": PORT,
               "state_dir": STATE_DIR, "schemas_dir": SCHEMAS_DIR, "uid": UID, "grace_s": GRACE_S,
               "replay_home": REPLAY_HOME}
    env = environment()
    return {service_manifest(names.service): env.get_template("kubernetes/service.yaml.j2").render(**context),
            replay_manifest(names.service): env.get_template("kubernetes/replay.yaml.j2").render(**context)}


def project_of(root: Path) -> str:
    """The project's name: ``[project] name`` of its ``pyproject.toml``, else the one ``fw new
    project`` derives from the directory's name."""
    try:
        name = tomllib.loads((root / "pyproject.toml").read_text()).get("project", {}).get("name")
    except (OSError, tomllib.TOMLDecodeError):
        name = None
    return project_name(name if isinstance(name, str) and name else root.name)


def with_resource(text: str, service: str, where: str = KUSTOMIZATION) -> str:
    """``text`` with ``services/<service>.yaml`` among the kustomization's resources, in
    alphabetical order among the services' files (after the other files when it is the first);
    unchanged when it is there already. ``ConfigError`` when the file has no ``resources`` list."""
    doc = parse(text, where)
    resources = _resources(doc, where)
    wanted = f"services/{service}.yaml"
    if wanted in resources:
        return text
    if not resources:
        resources.fa.set_block_style()
    ours = [i for i, r in enumerate(resources) if str(r).startswith("services/")]
    pos = next((i for i in ours if str(resources[i]) > wanted), ours[-1] + 1 if ours else len(resources))
    resources.insert(pos, wanted)
    return dump(doc)


def resources_of(text: str, where: str = KUSTOMIZATION) -> list[str]:
    """The kustomization's ``resources``."""
    return [str(r) for r in _resources(parse(text, where), where)]


def _resources(doc: Any, where: str) -> CommentedSeq:
    resources = doc.get("resources") if isinstance(doc, CommentedMap) else None
    if not isinstance(resources, CommentedSeq):
        raise ConfigError(f"{where} has no `resources` list to add the service's manifest to; add "
                          "`resources: [config.yaml]`, or delete the file")
    return resources
