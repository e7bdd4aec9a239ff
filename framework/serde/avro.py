"""The Avro serde, in one of three encodings (``.avsc`` files: ``framework.serde.schemas``).

- **single-object** (Avro specification, ``framework.serde.single_object``): the marker
  ``C3 01``, the writer schema's 8-byte fingerprint, the binary body. No registry needed; a
  reader refuses records of schemas it does not know.
- **registry**, the Confluent wire format, as written by every Confluent serializer in
  every language::

      byte 0      magic byte 0
      bytes 1-4   schema id, 4 bytes big-endian (the registry's global id)
      bytes 5-    the Avro binary body, without any schema or file header

  Readers resolve the writer's schema (fetched by id) against their own reader schema, so
  producers and consumers can evolve their schemas independently within the registry's
  compatibility rules (e.g. a field added with a default).
- **raw**: the bare binary body. Nothing in the bytes says which schema wrote them, so a
  record of another schema that happens to decode is read as a record of this one.
"""

from __future__ import annotations

import copy
import struct
from collections.abc import Iterable
from io import BytesIO
from typing import Any, Literal

import fastavro
from fastavro.schema import SchemaParseException, UnknownType, to_parsing_canonical_form

from framework.errors import ConfigError
from framework.serde.base import DecodeError, describe_bytes, hex_bytes
from framework.serde.evolution import unreadable
from framework.serde.registry import SchemaRegistryClient, SchemaRegistryError
from framework.serde.schemas import full_name, load_schema, schema_files
from framework.serde.single_object import HEADER_SIZE, SchemaStore, fingerprint, fingerprint_hex

__all__ = ["ENCODINGS", "AvroSerde", "Encoding", "load_schema", "schema_files"]

_schemaless_reader = fastavro.schemaless_reader

Encoding = Literal["raw", "single-object", "registry"]
ENCODINGS: tuple[Encoding, ...] = ("raw", "single-object", "registry")

_MAGIC = 0
_HEADER = struct.Struct(">bI")  # magic byte, schema id
_HEADER_SIZE = _HEADER.size
_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


class AvroSerde:
    """Avro records <-> bytes, with one reader/writer schema parsed at construction.

    ``schema`` is an Avro schema (dict, union list or primitive name) or the name of a
    ``.avsc`` schema for ``load_schema``. ``encoding`` frames the Avro body:

    - ``"single-object"``: the Avro single-object encoding (marker ``C3 01``, the writer
      schema's CRC-64-AVRO fingerprint, the body). ``deserialize`` reads records written
      with this schema or with one of ``writer_schemas`` (the spec's schema store: each is
      resolved into this schema, and must be readable as it); any other fingerprint, and
      bytes without the marker, are refused.
    - ``"registry"`` (the default with a ``registry``): the Confluent wire format.
      ``serialize`` registers the schema under the subject once and prefixes its id;
      ``deserialize`` decodes any registered writer schema into this reader schema. The
      subject is ``subject`` if given, else ``<topic>-key`` / ``<topic>-value`` from ``bind``.
    - ``"raw"`` (the default without one): the bare body. It cannot tell one schema from
      another: bytes another schema wrote are decoded into this one's record whenever they
      happen to fit. Use it only for topics whose every producer writes this schema.

    Errors: a record that does not match the schema raises fastavro's ``TypeError`` /
    ``ValueError``; bytes that do not decode raise ``DecodeError`` (a ``ValueError``)
    naming the encoding, the schema, what was expected and what was found; registry
    failures other than an unknown schema id raise ``SchemaRegistryError``; a schema, an
    encoding or writer schemas that do not fit together raise ``ConfigError``.
    """

    __slots__ = ("_explicit", "_header", "_parsed", "_registry", "_store", "_subject", "_writers", "encoding",
                 "schema")

    def __init__(
        self,
        schema: Any,
        *,
        registry: SchemaRegistryClient | None = None,
        subject: str | None = None,
        encoding: Encoding | None = None,
        writer_schemas: Iterable[Any] = (),
    ) -> None:
        schema = _named(schema)
        self.schema: Any = _without_fastavro_hints(schema)  # JSON form, for the registry
        self._parsed: Any = _parse(schema)
        writer_schemas = tuple(writer_schemas)
        self.encoding: Encoding = _encoding(encoding, registry, writer_schemas)
        self._registry = registry
        self._subject = subject
        self._explicit = subject is not None
        self._header: bytes | None = None  # what every record starts with (registry: once registered)
        # schema id -> parsed writer schema, or None when it decodes as our own schema.
        # Shared with bound copies: ids are global, so the cache is valid for any subject.
        self._writers: dict[int, Any] = {}
        self._store: SchemaStore | None = None
        if self.encoding == "single-object":
            writers = [self._readable(_parse(w)) for w in writer_schemas]
            self._store = SchemaStore(self._parsed, writers, self.describe)
            self._header = self._store.header

    @property
    def subject(self) -> str | None:
        """The registry subject this serde registers under (``None`` until bound)."""
        return self._subject

    @property
    def registry(self) -> SchemaRegistryClient | None:
        return self._registry

    @property
    def fingerprint(self) -> int:
        """CRC-64-AVRO fingerprint of the schema's Parsing Canonical Form (unsigned 64-bit)."""
        return fingerprint(self._parsed)

    def describe(self) -> str:
        """The serde as errors name it: ``Avro (single-object, schema demo.Number fingerprint
        0x...)``, ``Avro (raw, schema demo.Number)``, ``Avro (registry, subject numbers-value,
        schema demo.Number)``."""
        name = _name(self.schema)
        if self.encoding == "single-object":
            return f"Avro (single-object, schema {name} fingerprint {fingerprint_hex(self.fingerprint)})"
        if self.encoding == "registry" and self._subject is not None:
            return f"Avro (registry, subject {self._subject}, schema {name})"
        return f"Avro ({self.encoding}, schema {name})"

    def serialize(self, obj: Any) -> bytes:
        # A new BytesIO per call costs ~30 ns (measured) and keeps the serde safe to share
        # between threads; reusing one buffer saved nothing measurable.
        buf = BytesIO()
        header = self._header
        if header is None and self._registry is not None:
            header = self._register()
        if header is not None:
            buf.write(header)
        fastavro.schemaless_writer(buf, self._parsed, obj)
        return buf.getvalue()

    def deserialize(self, data: bytes) -> Any:
        if self._store is not None:
            return self._read(data, HEADER_SIZE, self._store.writer(data))
        if self._registry is None:  # plain Avro: ``_read``'s common case inline; it explains a failure
            buf = BytesIO(data)
            try:
                value = _schemaless_reader(buf, self._parsed)
            except Exception:  # noqa: BLE001 - _read raises the DecodeError that names it
                return self._read(data, 0, None)
            return value if buf.tell() == len(data) else self._read(data, 0, None)
        if len(data) < _HEADER_SIZE:
            raise DecodeError(self.describe(), f"the Confluent wire format (a {_HEADER_SIZE}-byte header: magic byte "
                                               "00 and a 4-byte schema id)", describe_bytes(data))
        magic, schema_id = _HEADER.unpack_from(data)
        if magic != _MAGIC:
            raise DecodeError(self.describe(), "the magic byte 00 of the Confluent wire format",
                              describe_bytes(data), "was it written without a schema registry?")
        writer = self._writers.get(schema_id, _MISSING)
        if writer is _MISSING:
            writer = self._writer_schema(schema_id)
        return self._read(data, _HEADER_SIZE, writer)

    def _read(self, data: bytes, start: int, writer: Any) -> Any:
        """The one Avro datum in ``data[start:]``, written with ``writer`` (``None``: our own
        schema). It must take every byte: bytes left over mean the record was written with
        another schema or is not Avro (decoding a prefix would invent a record)."""
        buf = BytesIO(data)  # shares the bytes, no copy
        buf.seek(start)
        try:
            if writer is None:
                value = fastavro.schemaless_reader(buf, self._parsed)
            else:
                value = fastavro.schemaless_reader(buf, writer, self._parsed)
        except Exception as exc:
            raise DecodeError(self.describe(), self._datum(writer), describe_bytes(data[start:]),
                              f"{type(exc).__name__}: {exc}") from exc
        left = len(data) - buf.tell()
        if left:
            raise DecodeError(self.describe(), self._datum(writer),
                              f"{describe_bytes(data[start:])} with {left} left after it",
                              "written with another schema, or not Avro")
        return value

    def _datum(self, writer: Any) -> str:
        name = _name(self.schema if writer is None else writer)
        header = {"single-object": HEADER_SIZE, "registry": _HEADER_SIZE}.get(self.encoding)
        where = f" after the {header}-byte header" if header else ""
        return f"the binary encoding of one {name}{where}"

    def bind(self, topic: str, is_key: bool) -> AvroSerde:
        """This serde for ``topic``: with a registry and no explicit subject, a copy whose
        subject follows the TopicNameStrategy (``<topic>-key`` / ``<topic>-value``)."""
        if self.encoding != "registry" or self._explicit:
            return self
        subject = f"{topic}-key" if is_key else f"{topic}-value"
        if subject == self._subject:
            return self
        clone = copy.copy(self)
        clone._subject = subject
        clone._header = None
        return clone

    def _register(self) -> bytes:
        if self._subject is None:
            raise ConfigError(
                "AvroSerde with a schema registry has no subject: pass subject=... or use it "
                "through bind(topic, is_key) (the pipeline does that for its topics)"
            )
        assert self._registry is not None
        schema_id = self._registry.register(self._subject, self.schema)
        self._writers[schema_id] = None  # our own bytes decode with our own schema
        self._header = _HEADER.pack(_MAGIC, schema_id)
        return self._header

    def _writer_schema(self, schema_id: int) -> Any:
        """Fetch and parse a writer schema once; ``None`` if it is equivalent to ours. An id
        the registry does not know is this record's fault: a ``DecodeError``."""
        assert self._registry is not None
        try:
            writer = self._registry.get_schema(schema_id)
        except SchemaRegistryError as exc:
            if exc.status != 404:
                raise
            raise DecodeError(self.describe(), f"a schema id the registry at {self._registry.url} knows",
                              f"id {schema_id} ({hex_bytes(_HEADER.pack(_MAGIC, schema_id))})",
                              f"the registry answered: {exc}") from exc
        parsed = fastavro.parse_schema(writer)
        # Same canonical form = same binary layout: skip schema resolution on every record.
        same = to_parsing_canonical_form(parsed) == to_parsing_canonical_form(self._parsed)
        self._writers[schema_id] = None if same else parsed
        return self._writers[schema_id]

    def _readable(self, writer: Any) -> Any:
        """A writer schema of the store, once checked to be readable as ours (Avro schema
        resolution); ``ConfigError`` naming every reason it is not."""
        reasons = unreadable(self._parsed, writer)
        if reasons:
            raise ConfigError(f"AvroSerde({_name(self.schema)!r}) cannot read records written with "
                              f"{_name(writer)} (fingerprint {fingerprint_hex(fingerprint(writer))}), given in "
                              f"writer_schemas: {'; '.join(reasons)}. Fix: change the schema so it reads that one (a "
                              "default for each field it adds, an alias for a renamed type), or leave that "
                              "schema out of writer_schemas")
        return writer

    def __repr__(self) -> str:
        return (f"AvroSerde({_name(self.schema)!r}, encoding={self.encoding!r}, registry={self._registry!r}, "
                f"subject={self._subject!r})")


_MISSING = object()


def _named(schema: Any) -> Any:
    """A ``.avsc`` name loaded; any other schema as it is."""
    if isinstance(schema, str) and schema not in _PRIMITIVES:
        return load_schema(schema)
    return schema


def _parse(schema: Any) -> Any:
    """``schema`` (or the ``.avsc`` schema it names) parsed; ``ConfigError`` when invalid."""
    try:
        return fastavro.parse_schema(_named(schema))
    except (SchemaParseException, UnknownType, ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"invalid Avro schema: {exc}") from exc


def _encoding(encoding: Encoding | None, registry: SchemaRegistryClient | None,
              writer_schemas: tuple[Any, ...]) -> Encoding:
    """The encoding asked for, checked against the registry and writer schemas given."""
    if encoding is None:
        encoding = "raw" if registry is None else "registry"
    if encoding not in ENCODINGS:
        raise ConfigError(f"unknown Avro encoding {encoding!r}; choose one of {', '.join(ENCODINGS)}")
    if encoding == "registry" and registry is None:
        raise ConfigError("Avro encoding 'registry' needs a registry client: pass registry=SchemaRegistryClient"
                          ".from_env() with FW_SCHEMA_REGISTRY_URL set (or use encoding='single-object')")
    if encoding != "registry" and registry is not None:
        raise ConfigError(f"Avro encoding {encoding!r} takes no registry: leave registry out, or use "
                          "encoding='registry'")
    if encoding != "single-object" and writer_schemas:
        raise ConfigError(f"writer_schemas are for encoding='single-object', not {encoding!r}"
                          + (" (the registry knows the writers' schemas)" if encoding == "registry" else ""))
    return encoding


def _name(schema: Any) -> str:
    """``demo.Number``, ``long``, ``array``, ``union``: a schema as messages name it."""
    if isinstance(schema, dict):
        return full_name(schema) if "name" in schema else str(schema.get("type"))
    return "union" if isinstance(schema, list) else str(schema)


def _without_fastavro_hints(schema: Any) -> Any:
    """An already-parsed schema minus fastavro's private top-level keys (valid Avro JSON)."""
    if isinstance(schema, dict) and "__fastavro_parsed" in schema:
        return {k: v for k, v in schema.items() if not k.startswith("__")}
    return schema
