"""What a task's operators can reach: its stores, its output, and the record in hand."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from framework.errors import RecordCoordinates
from framework.state.cache import CachedPartition

Headers = Sequence[tuple[str, bytes]] | None


class InputRecord(Protocol):
    """The shape of a consumed record (confluent_kafka.Message has exactly these methods)."""

    def topic(self) -> str: ...
    def partition(self) -> int: ...
    def offset(self) -> int: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def timestamp(self) -> tuple[int, int]: ...
    def headers(self) -> list[tuple[str, bytes]] | None: ...


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


class TaskContext:
    """Per task: partition number, service name, stores by step name, output, current record."""

    __slots__ = ("service", "partition", "output", "stores", "current", "pipeline")

    def __init__(self, pipeline: Any, partition: int, output: Output,
                 stores: dict[str, CachedPartition]) -> None:
        self.pipeline = pipeline
        self.service: str = pipeline.name
        self.partition = partition
        self.output = output
        self.stores = stores
        self.current: InputRecord | None = None

    def store(self, name: str) -> CachedPartition:
        return self.stores[name]

    def coordinates(self) -> RecordCoordinates | None:
        msg = self.current
        if msg is None:
            return None
        return RecordCoordinates(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.timestamp()[1])
