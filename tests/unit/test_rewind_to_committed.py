"""After an aborted checkpoint the live consumer seeks back to the group's committed offsets.
A partition the broker answers with an error of its own (its leader not known yet) is asked
again: read as "no committed offset", it was sent back to its start, and everything it had
processed would have been processed again."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from framework.kafka.clients import OFFSET_BEGINNING, GroupConsumer


class _Consumer:
    """``committed`` as a broker gives it: partition 1's own error ``late`` times, then every
    offset (12, and none for partition 2); ``seek`` recorded."""

    def __init__(self, late: int) -> None:
        self.late, self.asked = late, 0
        self.sought: dict[int, int] = {}

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[SimpleNamespace]:
        self.asked += 1
        error = KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION) if self.asked <= self.late else None
        return [SimpleNamespace(topic=tp.topic, partition=tp.partition, error=error if tp.partition == 1 else None,
                                offset=-1 if tp.partition == 2 or error else 12) for tp in tps]

    def seek(self, tp: TopicPartition) -> None:
        self.sought[tp.partition] = tp.offset


def _consumer(late: int) -> tuple[GroupConsumer, _Consumer]:
    group = GroupConsumer.__new__(GroupConsumer)
    client = _Consumer(late)
    group._c = cast(Any, client)  # a stand-in for confluent-kafka's Consumer: what rewinding calls
    return group, client


def test_a_partition_without_its_leader_yet_is_asked_again_not_rewound_to_its_start() -> None:
    group, client = _consumer(late=1)
    group.rewind_to_committed([("t", 0), ("t", 1), ("t", 2)], timeout_s=10.0)
    assert client.asked == 2
    assert client.sought == {0: 12, 1: 12, 2: OFFSET_BEGINNING}


def test_a_partition_that_keeps_failing_is_an_error_not_a_rewind_to_its_start() -> None:
    group, client = _consumer(late=10**9)
    with pytest.raises(KafkaException):
        group.rewind_to_committed([("t", 0), ("t", 1)], timeout_s=0.3)
    assert client.sought == {}
