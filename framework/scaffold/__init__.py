"""Scaffolding for ``fw new``: services and projects from Jinja2 templates (package data).

``new_service`` writes a service from one of ``TEMPLATES`` into a project;
``new_project`` writes a standalone project that depends on the framework as a package.
Names are validated in ``names``, ``docker-compose.yml`` is edited in ``compose`` (keeping
its comments and order), ``deploy/prometheus/prometheus.yml`` in ``prometheus``, the
Kubernetes manifests and their kustomization are written in ``kubernetes``, templates are
rendered in ``render``.
"""

from framework.scaffold.project import framework_spec, new_project
from framework.scaffold.service import (
           DEFAULT_TEMPLATE,
           FIRST_RUN,
           TEMPLATE_SUMMARIES,
           TEMPLATES,
           Result,
           find_project_root,
           new_service,
)

__all__ = ["DEFAULT_TEMPLATE", "FIRST_RUN", "TEMPLATES", "TEMPLATE_SUMMARIES", "Result", "find_project_root", "framework_spec", "new_project",
           "new_service"]
