"""The default serde of keys chosen by ``key_by``: deterministic JSON, hashable on the way back.

Keys decide partitions (murmur2 of the key bytes), so equal keys must give equal bytes:
compact JSON with sorted object keys does; lists come back as tuples so keys stay hashable.
"""

from __future__ import annotations

import json
from typing import Any

_dumps = json.JSONEncoder(separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode


def _hashable(obj: Any) -> Any:
    if isinstance(obj, list):
        return tuple(_hashable(x) for x in obj)
    return obj


class KeySerde:
    """str, int, float, bool and tuples of them (JSON arrays decode as tuples)."""

    __slots__ = ()

    def serialize(self, obj: Any) -> bytes:
        return _dumps(obj).encode()

    def deserialize(self, data: bytes) -> Any:
        obj = json.loads(data)
        return _hashable(obj) if isinstance(obj, list) else obj

    def bind(self, topic: str, is_key: bool) -> KeySerde:
        return self
