"""Names of a generated service: validated once, then derived from each other.

A service has three spellings, as the existing services do: the Python package
(``services/fraud_alerts``), the service name (``fraud-alerts``: consumer group, compose
entry, prefix of its topics) and the Avro namespace (the package). ``fraud-alerts`` and
``fraud_alerts`` name the same service.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass

from framework.errors import ConfigError

# Longest service name: its longest derived topic (``<service>-<step>-repartition``, or a
# changelog) must stay within Kafka's 249 characters with room for a test suffix.
MAX_LENGTH = 100
# Top-level directories of a project and the framework itself: a service package named so
# would shadow them or overwrite their tests.
RESERVED = frozenset({"framework", "services", "schemas", "scripts", "tests"})
_TOPIC_CHARS = re.compile(r"^[A-Za-z0-9._-]+$")
_PROJECT = re.compile(r"^[a-z0-9]([a-z0-9_-]*[a-z0-9])?$")


@dataclass(frozen=True)
class ServiceNames:
    """The spellings of one service: ``package`` (``fraud_alerts``), ``service``
    (``fraud-alerts``), and ``title`` (``Fraud alerts``, for docstrings)."""

    package: str
    service: str

    @property
    def title(self) -> str:
        return self.package.replace("_", " ").capitalize()

    @property
    def target(self) -> str:
        """What ``fw run`` takes: ``services.<package>.pipeline:pipeline``."""
        return f"services.{self.package}.pipeline:pipeline"


def service_names(name: str) -> ServiceNames:
    """Validate ``name`` (``fraud-alerts`` or ``fraud_alerts``) and derive its spellings.

    Raises ``ConfigError`` with one line saying what is wrong and what to type instead.
    """
    if not name:
        raise ConfigError("the service name is empty; give one such as fraud-alerts")
    if not _TOPIC_CHARS.match(name):
        bad = sorted({c for c in name if not _TOPIC_CHARS.match(c)})
        raise ConfigError(f"service name {name!r} has {_quoted(bad)}, which Kafka topic names cannot hold; "
                          f"use lowercase letters, digits, '-' and '_' (e.g. {_suggest(name)!r})")
    package = name.replace("-", "_")
    if not package.isidentifier() or "." in name:
        raise ConfigError(f"service name {name!r} does not make a Python package name; start with a letter and "
                          f"use lowercase letters, digits, '-' and '_' (e.g. {_suggest(name)!r})")
    if name != name.lower():
        raise ConfigError(f"service name {name!r} has capitals; use lowercase ({name.lower()!r})")
    if keyword.iskeyword(package) or package in RESERVED or package.startswith("_") or package.endswith("_"):
        raise ConfigError(f"service name {name!r} is reserved or a Python keyword; choose another "
                          f"(e.g. {package.strip('_') + '_service'!r})")
    if len(name) > MAX_LENGTH:
        raise ConfigError(f"service name {name!r} is {len(name)} characters long; use at most {MAX_LENGTH} "
                          "(it prefixes every topic of the service)")
    return ServiceNames(package=package, service=package.replace("_", "-"))


def project_name(directory_name: str) -> str:
    """The distribution and compose project name for a project directory: lowercase, with
    '-' for spaces and '_'; raises ``ConfigError`` when nothing usable is left."""
    name = re.sub(r"[^a-z0-9-]+", "-", directory_name.lower()).strip("-")
    if not _PROJECT.match(name):
        raise ConfigError(f"cannot make a project name from directory {directory_name!r}; "
                          "use a directory name with letters or digits, e.g. my-streams")
    return name


def _quoted(chars: list[str]) -> str:
    return ", ".join(repr(c) for c in chars)


def _suggest(name: str) -> str:
    cleaned = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    if not cleaned or not cleaned[0].isalpha():
        cleaned = f"service-{cleaned}" if cleaned else "my-service"
    return cleaned
