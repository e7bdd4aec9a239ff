"""Records as every layer sees them, whoever reads or writes them: the shape of a consumed
record (``InputRecord``), its headers, and where a task's records go (``Output``).

This module is below every package that shares these: the Kafka clients produce and consume
them (``framework.kafka``: ``confluent_kafka.Message`` is an ``InputRecord``, ``KafkaOutput``
an ``Output``), the operators read the headers of the record in hand, the engine routes
records between the two, and the TestDriver, the Spark job and an async step's records
restored from its store are ``Record``s. It imports nothing of the framework, so none of them
depends on another for these types (docs/architecture.md, "Layers").
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["Headers", "InputRecord", "Output", "Record", "record_headers"]

Headers = Sequence[tuple[str, bytes]] | None


class InputRecord(Protocol):
    """The shape of a consumed record: ``confluent_kafka.Message`` has exactly these methods,
    and ``framework.engine.record.Record`` is the same for every other engine."""

    def topic(self) -> str: ...
    def partition(self) -> int: ...
    def offset(self) -> int: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def timestamp(self) -> tuple[int, int]: ...
    def headers(self) -> list[tuple[str, bytes]] | None: ...
    def error(self) -> Any: ...


_read_headers = operator.methodcaller("headers")
_unreadable: list[Any] = [None]  # the last record whose headers could not be read


def record_headers(msg: InputRecord) -> list[tuple[str, bytes]] | None:
    """The record's headers; None when the client cannot read them. confluent-kafka cannot
    decode a header name that is not UTF-8 (a producer in another language can write one): its
    ``headers()`` then returns with the error still pending, which a call through
    ``methodcaller`` raises here (a plain call in warmed-up code lets it surface later,
    anywhere), and keeps a broken list that a second call would return: the record is
    remembered instead."""
    if msg is _unreadable[0]:
        return None
    try:
        return list(_read_headers(msg) or ())
    except SystemError:
        _unreadable[0] = msg
        return None


class Output(Protocol):
    """Where a task's records go: the transactional producer, or the TestDriver's topics."""

    def produce(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int,
                headers: Headers = None, partition: int | None = None) -> None:
        """Send one record; ``partition=None`` lets the Kafka default partitioner (murmur2) choose."""
        ...

    def produce_changelog(self, topic: str, partition: int, key: bytes, value: bytes | None,
                          headers: Headers) -> None:
        """Send one changelog record; its offset is reported at the checkpoint."""
        ...


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
