"""The record every engine but the Kafka runtime hands to its tasks.

A task reads records through ``framework.records.InputRecord``: the Kafka runtime
passes ``confluent_kafka.Message`` objects as they come; the TestDriver and the Spark job
build ``Record``s, which have the same methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class Record:
    """One record of a topic partition, with the interface of ``confluent_kafka.Message``."""

    __slots__ = ("_h", "_k", "_o", "_p", "_t", "_ts", "_v")

    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
                 timestamp: int, headers: Sequence[tuple[str, bytes]] | None = None) -> None:
        self._t, self._p, self._o, self._k, self._v, self._ts = topic, partition, offset, key, value, timestamp
        self._h = tuple(headers) if headers else None

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def key(self) -> bytes | None:
        return self._k

    def value(self) -> bytes | None:
        return self._v

    def timestamp(self) -> tuple[int, int]:
        """``(type, ms)``: type 1 is Kafka's CreateTime."""
        return (1, self._ts)

    def headers(self) -> list[tuple[str, bytes]] | None:
        return list(self._h) if self._h else None

    def error(self) -> Any:
        """Always None: only a consumer reports errors in its stream of records."""
        return None

    def __repr__(self) -> str:
        return f"Record({self._t}[{self._p}]@{self._o}, key={self._k!r}, value={self._v!r}, ts={self._ts})"
