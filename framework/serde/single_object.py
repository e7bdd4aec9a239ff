"""Avro single-object encoding (Avro specification, "Single-object encoding"): every record
names the schema that wrote it, without a registry.

    bytes 0-1   the marker C3 01
    bytes 2-9   the CRC-64-AVRO (Rabin) fingerprint of the writer schema's Parsing
                Canonical Form, 8 bytes little-endian
    bytes 10-   the Avro binary body

The reader keeps a *schema store*: the fingerprints of the schemas it can read (its own and
the writer schemas it is given), each with the writer schema to resolve against its own. A
record with another fingerprint was written with a schema the reader does not know, and is
refused instead of being decoded into a record that never existed.

Fingerprints are shown as the 64-bit value in hex, as Java prints
``Long.toHexString(SchemaNormalization.parsingFingerprint64(schema))``: ``"int"`` is
``0x7275d51a3f395c8f``, in the header ``8F 5C 39 3F 1A D5 75 72``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from fastavro.schema import fingerprint as _fastavro_fingerprint
from fastavro.schema import to_parsing_canonical_form

from framework.serde.base import DecodeError, guess_format, hex_bytes

__all__ = ["HEADER_SIZE", "MARKER", "SchemaStore", "fingerprint", "fingerprint_hex"]

MARKER = b"\xc3\x01"
HEADER_SIZE = len(MARKER) + 8


def _fingerprint_bytes(schema: Any) -> bytes:
    """The 8 header bytes of ``schema`` (any form fastavro parses, parsed or not)."""
    # fastavro gives the hex of the little-endian bytes: exactly what the header holds.
    return bytes.fromhex(_fastavro_fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))


def fingerprint(schema: Any) -> int:
    """CRC-64-AVRO of the Parsing Canonical Form of ``schema``, as an unsigned 64-bit int
    (Java's ``SchemaNormalization.parsingFingerprint64`` as a signed long: the same bits)."""
    return int.from_bytes(_fingerprint_bytes(schema), "little")


def fingerprint_hex(value: int | bytes) -> str:
    """``0x7275d51a3f395c8f``: a fingerprint (an int, or its 8 header bytes) in hex."""
    if isinstance(value, bytes):
        value = int.from_bytes(value, "little")
    return f"0x{value:016x}"


class SchemaStore:
    """The writer schemas a reader knows, by fingerprint; ``header`` is what its own records
    start with.

    ``reader`` is the reader's parsed schema, ``writers`` parsed schemas it may also meet
    (each already checked to be readable as ``reader``). ``describe()`` names the serde in
    the ``DecodeError`` of a record without the marker or with an unknown fingerprint.
    """

    __slots__ = ("_describe", "_writers", "header")

    def __init__(self, reader: Any, writers: Iterable[Any], describe: Callable[[], str]) -> None:
        own = _fingerprint_bytes(reader)
        self.header = MARKER + own
        self._describe = describe
        # fingerprint -> the writer schema to resolve, or None: read with the reader's own.
        self._writers: dict[bytes, Any] = {own: None}
        for writer in writers:
            self._writers.setdefault(_fingerprint_bytes(writer), writer)

    @property
    def fingerprints(self) -> list[int]:
        """The fingerprints this store knows, its own first."""
        return [int.from_bytes(fp, "little") for fp in self._writers]

    def writer(self, data: bytes) -> Any:
        """The writer schema of a record (``None``: the reader's own), after checking its
        header; ``DecodeError`` without the marker or with a fingerprint not in the store."""
        if data[:2] != MARKER or len(data) < HEADER_SIZE:
            raise self._bad_header(data)
        found = data[2:HEADER_SIZE]
        writer = self._writers.get(found, _UNKNOWN)
        if writer is _UNKNOWN:
            known = ", ".join(fingerprint_hex(fp) for fp in self._writers)
            plural = "s" if len(self._writers) > 1 else ""
            raise DecodeError(self._describe(), f"a writer schema it knows (fingerprint{plural} {known})",
                              f"fingerprint {fingerprint_hex(found)}",
                              "the record was written with another schema; if the topic may carry it, "
                              "add that schema to the serde's writer_schemas")
        return writer

    def _bad_header(self, data: bytes) -> DecodeError:
        if data[:2] != MARKER:
            guess = guess_format(data)
            found = hex_bytes(data[:2]) + (f" ({guess})" if guess else "") if data else "no bytes"
            return DecodeError(self._describe(), f"the marker {hex_bytes(MARKER)}", found)
        return DecodeError(self._describe(), f"the marker {hex_bytes(MARKER)} and an 8-byte schema fingerprint",
                           f"{len(data)} bytes")


_UNKNOWN = object()
