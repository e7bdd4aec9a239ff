"""The serde protocol: bytes <-> Python values for record keys and values, and the error a
serde raises for bytes it cannot decode.

``None`` never reaches a serde: a ``None`` key or value (a tombstone) passes through the
framework as ``None``. A serde that needs to know where it is used (the Confluent
schema-registry subject ``<topic>-key`` / ``<topic>-value``) gets it through ``bind``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["DecodeError", "Serde", "describe_bytes", "guess_format", "hex_bytes"]


@runtime_checkable
class Serde(Protocol):
    def serialize(self, obj: Any) -> bytes: ...

    def deserialize(self, data: bytes) -> Any: ...

    def bind(self, topic: str, is_key: bool) -> Serde:
        """A serde for this topic and side; most serdes return themselves."""
        ...


class DecodeError(ValueError):
    """Bytes a serde cannot decode, as one line that names the serde, what it expected and
    what it found: ``Avro (single-object, schema demo.Number fingerprint 0x...) expected the
    marker C3 01, found 7B 22 (JSON?)``. A ``ValueError``, like every serde's decode failure:
    the runtime wraps it in a ``DeserializationError`` with the record's coordinates.

    ``serde`` describes the serde and its settings, ``expected`` and ``found`` the bytes it
    wanted and the bytes it got; ``detail`` (optional) says why or what to do.
    """

    def __init__(self, serde: str, expected: str, found: str, detail: str = "") -> None:
        self.serde, self.expected, self.found, self.detail = serde, expected, found, detail
        message = f"{serde} expected {expected}, found {found}"
        super().__init__(f"{message}: {detail}" if detail else message)


# First bytes -> the format they suggest, for "found ..." (a guess: any bytes may be raw Avro).
_GUESSES = ((b"\xc3\x01", "Avro single-object?"), (b"{", "JSON?"), (b"[", "JSON?"), (b"\x00", "Confluent wire format?"))


def hex_bytes(data: bytes, limit: int = 8) -> str:
    """``7B 22 75 ...``: the first ``limit`` bytes in hex, ``...`` when there are more."""
    shown = " ".join(f"{b:02X}" for b in data[:limit])
    return f"{shown} ..." if len(data) > limit else shown


def guess_format(data: bytes) -> str:
    """What the bytes look like from their start (``JSON?``), or ``""`` when nothing stands out."""
    for prefix, guess in _GUESSES:
        if data.startswith(prefix) and (prefix != b"\x00" or len(data) >= 5):  # magic 0 + a 4-byte id
            return guess
    return ""


def describe_bytes(data: bytes, own: str = "") -> str:
    """``27 bytes (7B 22 75 73 65 72 22 3A ...; JSON?)``: size, first bytes and a guess,
    unless the guess is ``own`` (the serde's own format: a guess that says nothing)."""
    if not data:
        return "no bytes"
    guess = guess_format(data)
    guess = "" if guess == own else guess
    size = "1 byte" if len(data) == 1 else f"{len(data)} bytes"
    return f"{size} ({hex_bytes(data)}{'; ' + guess if guess else ''})"
