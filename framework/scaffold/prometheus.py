"""A service's scrape target in ``deploy/prometheus/prometheus.yml``, added like its compose entry.

The Prometheus that ``docker-compose.yml`` runs scrapes one static job, ``services``, whose
targets are the service containers' endpoints, ``<service>:9400``. A new service's target
goes into that list in alphabetical order; the file is edited with ruamel.yaml in
round-trip mode, so comments, order and quoting stay as they are.
"""

from __future__ import annotations

from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from framework.errors import ConfigError
from framework.observe.server import DEFAULT_PORT
from framework.scaffold.compose import dump, parse

PROMETHEUS = "deploy/prometheus/prometheus.yml"
JOB = "services"  # the scrape job that lists every service container
PORT = DEFAULT_PORT  # FW_OBSERVE__PORT of every service container (docker-compose.yml's x-service)


def target(service: str) -> str:
    return f"{service}:{PORT}"


def with_target(text: str, service: str, where: str = PROMETHEUS) -> str:
    """``text`` with ``<service>:9400`` among the targets of the ``services`` job; unchanged
    when it is there already. ``ConfigError`` when the file has no such job to add it to."""
    doc = parse(text, where)
    targets = _targets(doc, where)
    wanted = target(service)
    if wanted in targets:
        return text
    if not targets:
        targets.fa.set_block_style()
    pos = next((i for i, t in enumerate(targets) if str(t) > wanted), len(targets))
    targets.insert(pos, wanted)
    return dump(doc)


def targets_of(text: str, where: str = PROMETHEUS) -> list[str]:
    """The targets of the ``services`` job."""
    return [str(t) for t in _targets(parse(text, where), where)]


def _targets(doc: Any, where: str) -> CommentedSeq:
    fix = (f"add a scrape job `job_name: {JOB}` with `static_configs: [{{targets: [...]}}]` "
           f"to {where}, or remove the file")
    jobs = doc.get("scrape_configs") if isinstance(doc, CommentedMap) else None
    job = next((j for j in jobs or () if isinstance(j, CommentedMap) and j.get("job_name") == JOB),
               None)
    if job is None:
        raise ConfigError(f"{where} has no scrape job {JOB!r} for the services' endpoints; {fix}")
    statics = job.get("static_configs")
    first = statics[0] if isinstance(statics, CommentedSeq) and statics else None
    targets = first.get("targets") if isinstance(first, CommentedMap) else None
    if not isinstance(targets, CommentedSeq):
        raise ConfigError(f"the scrape job {JOB!r} in {where} has no static targets list; {fix}")
    return targets
