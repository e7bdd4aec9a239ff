"""JSON serde: compact UTF-8 JSON, the lingua franca of topics read by other languages."""

from __future__ import annotations

import json
from typing import Any

from framework.serde.base import DecodeError, describe_bytes

__all__ = ["JsonSerde"]


class JsonSerde:
    """Any JSON-encodable value <-> compact UTF-8 JSON (no spaces, non-ASCII kept as is).

    ``serialize`` raises ``TypeError`` for values JSON cannot represent (sets, bytes,
    custom objects) and ``ValueError`` for circular references; ``deserialize`` raises
    ``DecodeError`` (a ``ValueError``) for bytes that are not UTF-8 JSON, naming what it
    found and the decoder's reason. Stateless: one instance can be shared everywhere.
    """

    __slots__ = ("_decode", "_encode")

    def __init__(self) -> None:
        # One encoder/decoder built here instead of json.dumps/json.loads per call, which
        # would rebuild an encoder for every record whenever any option is non-default.
        self._encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
        self._decode = json.JSONDecoder().decode

    def serialize(self, obj: Any) -> bytes:
        return self._encode(obj).encode("utf-8")

    def deserialize(self, data: bytes) -> Any:
        try:
            return self._decode(str(data, "utf-8"))
        except ValueError as exc:  # UnicodeDecodeError, JSONDecodeError
            raise DecodeError("JSON", "one JSON value in UTF-8", describe_bytes(data, own="JSON?"),
                              f"{type(exc).__name__}: {exc}") from exc

    def bind(self, topic: str, is_key: bool) -> JsonSerde:
        return self

    def __repr__(self) -> str:
        return "JsonSerde()"
