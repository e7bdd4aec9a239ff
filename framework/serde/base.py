"""The serde protocol: bytes <-> Python values for record keys and values.

``None`` never reaches a serde: a ``None`` key or value (a tombstone) passes through the
framework as ``None``. A serde that needs to know where it is used (the Confluent
schema-registry subject ``<topic>-key`` / ``<topic>-value``) gets it through ``bind``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Serde(Protocol):
    def serialize(self, obj: Any) -> bytes: ...

    def deserialize(self, data: bytes) -> Any: ...

    def bind(self, topic: str, is_key: bool) -> "Serde":
        """A serde for this topic and side; most serdes return themselves."""
        ...
