"""``fw schemas check``: would the registry accept the project's ``.avsc`` files as the next
versions of its subjects?

1. Read every ``.avsc`` file of the schemas directory (the one ``load_schema`` searches).
2. Ask the registry for every subject's latest schema; a subject belongs to a file when that
   schema is an Avro schema with the file's full name (``sensor.Reading``).
3. For each such subject, ask the registry whether the file's schema is compatible under the
   subject's level (its own, else the global one). The registry's answer decides.
4. For a refused change, find the fields that break the level from the two schemas
   (``framework.serde.evolution``): against the latest version, or against every version
   for a ``_TRANSITIVE`` level.

Apicurio Registry reports ``NONE`` for a subject without a level of its own, even when a
global level applies; as ``NONE`` never refuses anything, a refusal under ``NONE`` is
explained under the global level.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fastavro
from fastavro.schema import SchemaParseException, to_parsing_canonical_form

from framework.errors import ConfigError
from framework.serde.evolution import explain
from framework.serde.registry import SchemaRegistryClient, SchemaRegistryError
from framework.serde.schemas import schema_files

_ENV_URL = "FW_SCHEMA_REGISTRY_URL"


@dataclass(frozen=True)
class SchemaCheck:
    """One line of the report: a file's schema against one subject (``subject`` None: no
    subject has the file's schema, or the file cannot be read, ``error`` says why).

    ``compatible`` is the registry's verdict (None when nothing was asked), ``level`` the
    compatibility level it applied, ``version`` the subject's latest version, ``unchanged``
    whether the file is that version, and ``reasons`` the fields that break the level.
    """

    file: str
    schema: str | None
    subject: str | None = None
    level: str | None = None
    version: int | None = None
    compatible: bool | None = None
    unchanged: bool = False
    reasons: list[str] = field(default_factory=list)
    error: str | None = None


def client_for(url: str | None, env: Mapping[str, str] | None = None) -> SchemaRegistryClient:
    """The registry client of ``url`` (else ``FW_SCHEMA_REGISTRY_URL``), with the
    credentials of ``FW_SCHEMA_REGISTRY_USER`` / ``_PASSWORD``."""
    env = dict(os.environ if env is None else env)
    if url:
        env[_ENV_URL] = url
    client = SchemaRegistryClient.from_env(env)
    if client is None:
        raise ConfigError("no schema registry: set FW_SCHEMA_REGISTRY_URL or pass --registry URL "
                          "(`fw registry start` runs a local one and prints its URL)")
    return client


def check(client: SchemaRegistryClient, schemas_dir: str | os.PathLike[str] | None = None) -> list[SchemaCheck]:
    """Every ``.avsc`` file against its subjects; files without a subject get one line too."""
    directory, files = schema_files(schemas_dir)
    if not files:
        raise ConfigError(f"no .avsc files in {directory}; pass --dir or set FW_SCHEMAS_DIR")
    by_name = _subjects_by_name(client)
    results: list[SchemaCheck] = []
    for path, schema in files:
        shown = _shown(path)
        if isinstance(schema, ConfigError):
            results.append(SchemaCheck(shown, None, error=str(schema)))
            continue
        name = _full_name(schema)
        subjects = by_name.get(name, [])
        if not subjects:
            results.append(SchemaCheck(shown, name, error="no subject in the registry has this schema"))
        results += [_check_subject(client, shown, name, schema, subject, latest)
                    for subject, latest in subjects]
    return results


def failed(results: list[SchemaCheck]) -> bool:
    """Whether any change is incompatible, or any file unreadable."""
    return any(r.compatible is False or r.schema is None for r in results)


def _subjects_by_name(client: SchemaRegistryClient) -> dict[str, list[tuple[str, Any]]]:
    """Full name -> the subjects (sorted) whose latest schema is an Avro named type of that
    name, each with that schema."""
    try:
        subjects = client.subjects()
    except SchemaRegistryError as exc:
        raise SchemaRegistryError(
            f"{exc}; check that the registry runs (a local one: fw registry start) and that "
            "FW_SCHEMA_REGISTRY_URL (or --registry) names its API root", exc.status, exc.error_code) from None
    found: dict[str, list[tuple[str, Any]]] = {}
    for subject in sorted(subjects):
        latest = client.version(subject)
        if latest.schema_type != "AVRO":
            continue
        try:
            schema = json.loads(latest.schema)
            name = _full_name(schema)
        except (ValueError, TypeError, KeyError, SchemaParseException):
            continue  # a primitive or union (no full name to match a file by), or not valid Avro
        found.setdefault(name, []).append((subject, latest))
    return found


def _check_subject(client: SchemaRegistryClient, file: str, name: str, schema: dict[str, Any], subject: str,
                   latest: Any) -> SchemaCheck:
    level = client.compatibility(subject) or client.compatibility() or "NONE"
    unchanged = _canonical(schema) == _canonical(json.loads(latest.schema))
    if client.is_compatible(subject, schema):
        return SchemaCheck(file, name, subject, level, latest.version, True, unchanged)
    if level == "NONE":  # NONE refuses nothing: the subject has no level of its own, the global one applies
        level = client.compatibility() or level
    reasons = explain(level, schema, _previous(client, subject, level, latest))
    if not reasons:
        why = f"the registry refuses it under {level}, for a reason not found in the fields"
        reasons = [f"{why} (its own: POST /compatibility/subjects/{subject}/versions?verbose=true)"]
    return SchemaCheck(file, name, subject, level, latest.version, False, unchanged, reasons)


def _previous(client: SchemaRegistryClient, subject: str, level: str, latest: Any) -> list[tuple[int, Any]]:
    """The versions ``level`` checks against, oldest first, as ``(version, schema)``."""
    if not level.upper().endswith("_TRANSITIVE"):
        return [(latest.version, json.loads(latest.schema))]
    return [(v, json.loads(client.version(subject, v).schema)) for v in client.versions(subject)]


def _full_name(schema: Any) -> str:
    if not isinstance(schema, dict) or "name" not in schema:
        raise TypeError("not a named schema")
    parsed: dict[str, Any] = fastavro.parse_schema(schema)  # type: ignore[assignment]
    return str(parsed["name"])  # namespace.name, as parsing qualifies it


def _canonical(schema: Any) -> str:
    return str(to_parsing_canonical_form(fastavro.parse_schema(schema)))


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
