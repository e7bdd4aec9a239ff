"""Serdes for plain values: strings, raw bytes and 64-bit integers.

Each serde is stateless, so one instance can be shared by every topic, task and thread;
``bind`` returns the serde itself. Errors are the plain ``TypeError`` / ``ValueError`` of
the failing conversion: the runtime wraps them into ``SerializationError`` /
``DeserializationError`` with the record's coordinates.
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = ["BytesSerde", "IntSerde", "StringSerde"]


class StringSerde:
    """``str`` <-> bytes in one text encoding (UTF-8 by default, like Kafka's StringSerializer).

    ``serialize`` accepts only ``str`` (``TypeError`` otherwise); ``deserialize`` raises
    ``UnicodeDecodeError`` (a ``ValueError``) on bytes that are not valid in the encoding.
    """

    __slots__ = ("encoding",)

    def __init__(self, encoding: str = "utf-8") -> None:
        "".encode(encoding)  # fail at construction, not on the first record, on a bad name
        self.encoding = encoding

    def serialize(self, obj: Any) -> bytes:
        # str.encode as an unbound call raises TypeError for non-str (bytes, int, ...),
        # instead of silently accepting objects that merely have an ``encode`` method.
        try:
            return str.encode(obj, self.encoding)
        except TypeError:
            raise TypeError(f"StringSerde serializes str, not {type(obj).__name__}") from None

    def deserialize(self, data: bytes) -> str:
        return str(data, self.encoding)

    def bind(self, topic: str, is_key: bool) -> StringSerde:
        return self

    def __repr__(self) -> str:
        return f"StringSerde(encoding={self.encoding!r})"


class BytesSerde:
    """The identity: values are ``bytes`` on both sides.

    ``serialize`` also takes ``bytearray`` / ``memoryview`` (copied to ``bytes``) and raises
    ``TypeError`` for anything else: ``bytes(5)`` or ``bytes("x")`` would be silent bugs.
    """

    __slots__ = ()

    def serialize(self, obj: Any) -> bytes:
        if type(obj) is bytes:
            return obj
        if isinstance(obj, (bytes, bytearray, memoryview)):
            return bytes(obj)
        raise TypeError(f"BytesSerde serializes bytes, not {type(obj).__name__}")

    def deserialize(self, data: bytes) -> bytes:
        return data if type(data) is bytes else bytes(data)

    def bind(self, topic: str, is_key: bool) -> BytesSerde:
        return self

    def __repr__(self) -> str:
        return "BytesSerde()"


_LONG = struct.Struct(">q")


class IntSerde:
    """``int`` <-> 8 bytes big-endian two's complement, the format of Kafka's LongSerializer.

    ``serialize`` raises ``TypeError`` for a non-integer and ``ValueError`` outside the
    signed 64-bit range; ``deserialize`` raises ``ValueError`` unless given exactly 8 bytes.
    """

    __slots__ = ("_pack", "_unpack")

    def __init__(self) -> None:
        self._pack = _LONG.pack
        self._unpack = _LONG.unpack

    def serialize(self, obj: Any) -> bytes:
        try:
            return self._pack(obj)
        except struct.error as exc:
            # struct.error is neither a TypeError nor a ValueError: say which one it is.
            if isinstance(obj, int):
                raise ValueError(f"{obj} is outside the signed 64-bit range") from exc  # noqa: TRY004 - out of range
            raise TypeError(f"IntSerde serializes int, not {type(obj).__name__}") from exc

    def deserialize(self, data: bytes) -> int:
        try:
            return self._unpack(data)[0]
        except struct.error:
            raise ValueError(
                f"IntSerde expects exactly 8 bytes (a big-endian long), got {len(data)}"
            ) from None

    def bind(self, topic: str, is_key: bool) -> IntSerde:
        return self

    def __repr__(self) -> str:
        return "IntSerde()"
