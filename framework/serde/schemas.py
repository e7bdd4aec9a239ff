"""The repository's Avro schemas: ``.avsc`` files found by full name, file stem or path.

``load_schema`` and ``schema_files`` search one directory: the ``schemas_dir`` argument,
else ``$FW_SCHEMAS_DIR``, else ``./schemas``, else the ``schemas/`` of this checkout. Each
file is read and checked once per version (its modification time).
"""

from __future__ import annotations

import copy
import difflib
import json
import os
from pathlib import Path
from typing import Any

import fastavro
from fastavro.schema import SchemaParseException, UnknownType

from framework.errors import ConfigError

__all__ = ["full_name", "load_schema", "schema_files"]

_ENV_SCHEMAS_DIR = "FW_SCHEMAS_DIR"
_CHECKOUT_SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"

# path -> (mtime_ns, schema): each file is read and checked once per version.
_FILES: dict[Path, tuple[int, dict[str, Any]]] = {}


def load_schema(
    name_or_path: str | os.PathLike[str], schemas_dir: str | os.PathLike[str] | None = None
) -> dict[str, Any]:
    """An Avro schema (as a new dict) from a ``.avsc`` file.

    ``name_or_path`` is a full name (``"sensor.Reading"``: namespace + name inside any
    file), a file stem (``"reading"``), or a path (``"schemas/reading.avsc"``). The
    directory searched is ``schemas_dir``, else ``$FW_SCHEMAS_DIR``, else ``./schemas``,
    else the ``schemas/`` of this checkout. Raises ``ConfigError`` for an unknown name
    (with close matches and the directory searched) or an unreadable or invalid file.
    """
    directory, why = _schemas_dir(schemas_dir)
    text = os.fspath(name_or_path)
    if isinstance(name_or_path, Path) or text.endswith(".avsc") or os.sep in text or "/" in text:
        path = Path(text).expanduser()
        if not path.is_absolute() and not path.exists():
            path = directory / path
        if not path.is_file():
            raise ConfigError(f"Avro schema file {text!r} not found (also looked in {directory})")
        return copy.deepcopy(_read_file(path))
    index, broken = _index(directory)
    found = index.get(text)
    if found is not None:
        return copy.deepcopy(_read_file(found))
    if text in broken:
        raise broken[text]
    raise ConfigError(_unknown_message(text, index, broken, directory, why))


def schema_files(
    schemas_dir: str | os.PathLike[str] | None = None,
) -> tuple[Path, list[tuple[Path, dict[str, Any] | ConfigError]]]:
    """The directory ``load_schema`` searches (the same rules) and every ``.avsc`` file under
    it, sorted, each with its schema or the ``ConfigError`` that says why it cannot be read."""
    directory, _ = _schemas_dir(schemas_dir)
    files: list[tuple[Path, dict[str, Any] | ConfigError]] = []
    for path in sorted(directory.rglob("*.avsc")) if directory.is_dir() else []:
        try:
            files.append((path, copy.deepcopy(_read_file(path))))
        except ConfigError as exc:
            files.append((path, exc))
    return directory, files


def _schemas_dir(explicit: str | os.PathLike[str] | None) -> tuple[Path, str]:
    if explicit is not None:
        return Path(explicit), "schemas_dir argument"
    from_env = os.environ.get(_ENV_SCHEMAS_DIR)
    if from_env:
        return Path(from_env), _ENV_SCHEMAS_DIR
    local = Path.cwd() / "schemas"
    if local.is_dir():
        return local, "./schemas"
    return _CHECKOUT_SCHEMAS, "the framework checkout"


def _index(directory: Path) -> tuple[dict[str, Path], dict[str, ConfigError]]:
    """Full name and file stem -> file; unreadable files by stem, to report them."""
    if not directory.is_dir():
        return {}, {}
    index: dict[str, Path] = {}
    broken: dict[str, ConfigError] = {}
    for path in sorted(directory.rglob("*.avsc")):
        try:
            schema = _read_file(path)
        except ConfigError as exc:
            broken[path.stem] = exc
            continue
        index.setdefault(path.stem, path)
        index.setdefault(full_name(schema), path)
    return index, broken


def _read_file(path: Path) -> dict[str, Any]:
    path = path.resolve()
    try:
        mtime = path.stat().st_mtime_ns
        cached = _FILES.get(path)
        if cached is not None and cached[0] == mtime:
            return cached[1]
        schema = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read Avro schema {path}: {exc}") from exc
    if not isinstance(schema, dict) or "name" not in schema:
        raise ConfigError(f"Avro schema {path} is not a named schema (a JSON object with a name)")
    try:
        fastavro.parse_schema(schema)
    except (SchemaParseException, UnknownType, ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"invalid Avro schema in {path}: {exc}") from exc
    _FILES[path] = (mtime, schema)
    return schema


def full_name(schema: dict[str, Any]) -> str:
    """``namespace.name`` of a named schema (its name alone when that is already full)."""
    name = str(schema["name"])
    namespace = schema.get("namespace")
    return f"{namespace}.{name}" if namespace and "." not in name else name


def _unknown_message(
    name: str, index: dict[str, Path], broken: dict[str, ConfigError], directory: Path, why: str
) -> str:
    message = f"unknown Avro schema {name!r}: no .avsc file in {directory} (from {why}) defines it"
    lowered = {known.lower(): known for known in index}  # "Reading" should find "reading"
    close = [lowered[c] for c in difflib.get_close_matches(name.lower(), lowered, 3, 0.5)]
    if close:
        message += f"; did you mean {', '.join(repr(c) for c in close)}?"
    elif index:
        message += f"; known: {', '.join(sorted(index))}"
    if not directory.is_dir():
        message += f"; the directory does not exist (set {_ENV_SCHEMAS_DIR} to the right one)"
    if broken:
        message += f"; unreadable files skipped: {', '.join(sorted(broken))}"
    return message
