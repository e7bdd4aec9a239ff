"""Why one Avro schema cannot read what another wrote: the field-level reasons behind a
registry's "incompatible", by Avro's schema resolution rules.

The registry decides whether a change is compatible; this module says why not, field by
field, in the registry's terms. A compatibility level names who must read whose records:

    BACKWARD   the new schema reads records written with the latest old one
    FORWARD    the latest old schema reads records written with the new one
    FULL       both
    *_TRANSITIVE   the same against every old version, not only the latest
    NONE       nothing is checked

A reader cannot read a writer's records when (Avro specification, "Schema Resolution"):

- a reader's record field is missing from the writer (by name or the reader's aliases) and
  has no default;
- a type differs in a way Avro cannot promote (int → long, float, double; long → float,
  double; float → double; string ↔ bytes are the promotions), e.g. long → int;
- a named type (record, enum, fixed) has another name and no alias for the old one;
- an enum symbol the writer may write is not the reader's, and the reader's enum has no
  default; a fixed type changes its size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import fastavro

__all__ = ["LEVELS", "Problem", "explain", "reading_problems", "unreadable"]

LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
          "FULL_TRANSITIVE")
_PROMOTIONS = {"int": {"long", "float", "double"}, "long": {"float", "double"}, "float": {"double"},
               "string": {"bytes"}, "bytes": {"string"}}
_NAMED = ("record", "error", "enum", "fixed")


@dataclass(frozen=True)
class Problem:
    """Why ``reader`` cannot read what ``writer`` wrote, at ``path`` (``unit``,
    ``location.lat``, ``readings[].unit``; empty for the whole record).

    ``kind`` is ``missing`` (a reader field the writer lacks, without a default), ``type``
    (an unpromotable type), ``name`` (a named type renamed without an alias), ``symbol``
    (an enum symbol the reader lacks, without an enum default: ``detail`` is the symbol) or
    ``size`` (a fixed type's size). ``reader_type`` and ``writer_type`` describe both sides.
    """

    path: str
    kind: str
    reader_type: str
    writer_type: str
    detail: str = ""


def reading_problems(reader: Any, writer: Any) -> list[Problem]:
    """Every reason the Avro schema ``reader`` cannot read records written with ``writer``
    (both as JSON: dict, list or name); empty when it can."""
    readers: dict[str, Any] = {}
    writers: dict[str, Any] = {}
    resolver = _Resolver(fastavro.parse_schema(reader, named_schemas=readers), readers,
                         fastavro.parse_schema(writer, named_schemas=writers), writers)
    return resolver.problems


def unreadable(reader: Any, writer: Any) -> list[str]:
    """One line per reason ``reader`` cannot read what ``writer`` wrote, e.g. "field `unit`
    added without a default: old records cannot be read"; empty when it can."""
    return [_backward(p) for p in reading_problems(reader, writer)]


def explain(level: str, new: Any, previous: Sequence[tuple[int, Any]]) -> list[str]:
    """One line per reason ``new`` breaks ``level`` against ``previous`` (the subject's
    versions as ``(version, schema)``, oldest first), e.g. "field `unit` added without a
    default: old records cannot be read (BACKWARD)"; empty when it breaks nothing."""
    level = level.upper()
    if level == "NONE" or not previous:
        return []
    against = list(previous) if level.endswith("_TRANSITIVE") else [previous[-1]]
    latest = previous[-1][0]
    lines: list[str] = []
    for version, old in reversed(against):  # the latest first: the likeliest to matter
        where = "" if version == latest else f", against version {version}"
        if level.startswith(("BACKWARD", "FULL")):
            lines += [_backward(p) + f" ({level}{where})" for p in reading_problems(new, old)]
        if level.startswith(("FORWARD", "FULL")):
            lines += [_forward(p) + f" ({level}{where})" for p in reading_problems(old, new)]
    return list(dict.fromkeys(lines))


def _backward(p: Problem) -> str:
    """The new schema (reader) cannot read old records (writer)."""
    damage = "old records cannot be read"
    if p.kind == "missing":
        return f"field `{p.path}` added without a default: {damage}"
    if p.kind == "symbol":
        return f"{_what(p)} lost symbol `{p.detail}` and has no default symbol: {damage}"
    return f"{_what(p)} {_change(p, p.writer_type, p.reader_type)}: {damage}"


def _forward(p: Problem) -> str:
    """The old schema (reader) cannot read new records (writer)."""
    damage = "new records cannot be read with the old schema"
    if p.kind == "missing":
        return f"field `{p.path}` removed without a default in the old schema: {damage}"
    if p.kind == "symbol":
        return f"{_what(p)} gained symbol `{p.detail}`, which the old schema lacks and has no default for: {damage}"
    return f"{_what(p)} {_change(p, p.reader_type, p.writer_type)}: {damage}"


def _what(p: Problem) -> str:
    return f"field `{p.path}`" if p.path else "the schema"


def _change(p: Problem, old: str, new: str) -> str:
    if p.kind == "name":
        return f"renamed from {old} to {new} without an alias"
    if p.kind == "size":
        return f"changed size: {p.detail}"
    return f"type changed from {old} to {new}, which Avro cannot promote"


class _Resolver:
    """Avro's resolution of one writer schema against one reader schema, collecting every
    mismatch instead of stopping at the first."""

    def __init__(self, reader: Any, readers: dict[str, Any], writer: Any, writers: dict[str, Any]) -> None:
        self._readers, self._writers = readers, writers
        self._seen: set[tuple[str, str, str]] = set()  # recursive named types resolve once
        self.problems: list[Problem] = []
        self._resolve(reader, writer, "")

    def _resolve(self, reader: Any, writer: Any, path: str) -> None:
        reader, writer = _deref(reader, self._readers), _deref(writer, self._writers)
        if isinstance(writer, list):  # every branch the writer may have written
            before = len(self.problems)
            for branch in writer:
                self._resolve(reader, branch, path)
            # a branch the reader lacks is a change of the whole union: show the union
            self.problems[before:] = [replace(p, writer_type=_describe(writer)) if p.path == path and p.kind == "type"
                                      else p for p in self.problems[before:]]
            return
        if isinstance(reader, list):  # the first reader branch that matches
            match = next((b for b in reader if _matches(_deref(b, self._readers), writer)), None)
            if match is None:
                self._problem(path, "type", reader, writer)
            else:
                self._resolve(match, writer, path)
            return
        r_type, w_type = _type(reader), _type(writer)
        if r_type != w_type:
            if w_type not in _PROMOTIONS or r_type not in _PROMOTIONS[w_type]:
                self._problem(path, "type", reader, writer)
            return
        if r_type in _NAMED:
            self._named(reader, writer, path)
        elif r_type == "array":
            self._resolve(reader["items"], writer["items"], f"{path}[]")
        elif r_type == "map":
            self._resolve(reader["values"], writer["values"], f"{path}{{}}")

    def _named(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        if not _names_match(reader, writer):
            self._problem(path, "name", reader, writer)
            return
        key = (reader["name"], writer["name"], path)
        if key in self._seen:
            return
        self._seen.add(key)
        kind = _type(reader)
        if kind == "enum":
            if "default" not in reader:
                for symbol in writer["symbols"]:
                    if symbol not in reader["symbols"]:
                        self._problem(path, "symbol", reader, writer, symbol)
        elif kind == "fixed":
            if reader["size"] != writer["size"]:
                self._problem(path, "size", reader, writer, f"{writer['size']} bytes written, {reader['size']} read")
        else:
            self._fields(reader, writer, path)

    def _fields(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        written = {f["name"]: f for f in writer["fields"]}
        for field in reader["fields"]:
            names = [field["name"], *field.get("aliases", [])]
            source = next((written[n] for n in names if n in written), None)
            where = f"{path}.{field['name']}" if path else field["name"]
            if source is not None:
                self._resolve(field["type"], source["type"], where)
            elif "default" not in field:
                self._problem(where, "missing", field["type"], None)

    def _problem(self, path: str, kind: str, reader: Any, writer: Any, detail: str = "") -> None:
        self.problems.append(Problem(path, kind, _describe(reader), _describe(writer), detail))


def _deref(schema: Any, named: dict[str, Any]) -> Any:
    """A named type's definition for its name; any other schema as it is."""
    if isinstance(schema, str) and schema in named:
        return named[schema]
    return schema


def _type(schema: Any) -> str:
    if isinstance(schema, dict):
        inner = schema["type"]
        return inner if isinstance(inner, str) else _type(inner)
    return str(schema)


def _short(name: str) -> str:
    return name.rpartition(".")[2]


def _names_match(reader: dict[str, Any], writer: dict[str, Any]) -> bool:
    """Same unqualified name (as Avro's own checker compares them), or a reader alias of
    the writer's name."""
    aliases = set(reader.get("aliases", []))
    return _short(reader["name"]) == _short(writer["name"]) or bool(
        {writer["name"], _short(writer["name"])} & (aliases | {_short(a) for a in aliases}))


def _matches(reader: Any, writer: Any) -> bool:
    """Whether a reader union branch is the one for ``writer`` (same type, a promotion, or
    the same named type)."""
    r_type, w_type = _type(reader), _type(writer)
    if r_type in _NAMED and w_type == r_type:
        return _names_match(reader, writer)
    return r_type == w_type or r_type in _PROMOTIONS.get(w_type, ())


def _describe(schema: Any) -> str:
    """``long``, ``demo.Number``, ``array<long>``, ``map<string>``, ``[null, string]``."""
    if schema is None:
        return "nothing"
    if isinstance(schema, list):
        return "[" + ", ".join(_describe(b) for b in schema) + "]"
    if isinstance(schema, dict):
        kind = _type(schema)
        if kind in _NAMED:
            return str(schema["name"])
        if kind == "array":
            return f"array<{_describe(schema['items'])}>"
        if kind == "map":
            return f"map<{_describe(schema['values'])}>"
        return kind
    return str(schema)
