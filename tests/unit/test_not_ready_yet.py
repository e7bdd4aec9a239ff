"""Answers of a cluster whose leaders are moving (framework.kafka.clients.retry_while_not_ready):
asked again until the leader is ready, not taken as the caller's failure."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from framework.kafka.clients import retry_while_not_ready


@pytest.mark.parametrize("code", [KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
                                  KafkaError._DESTROY_BROKER])
def test_a_leader_not_ready_yet_is_asked_again(code: int) -> None:
    """OFFSET_NOT_AVAILABLE ("Leader high watermark is not caught up") is what a leader just
    elected answers a restore's offsets question after the whole cluster restarted; librdkafka
    does not call it retriable."""
    refusals = [KafkaException(KafkaError(code)), KafkaException(KafkaError(code))]

    def call(_left: float) -> tuple[int, int]:
        if refusals:
            raise refusals.pop(0)
        return (0, 42)

    assert retry_while_not_ready(call, 10.0, "changelog x[0]") == (0, 42)
    assert refusals == []


def test_what_is_not_about_readiness_is_raised_at_once() -> None:
    def call(_left: float) -> None:
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))

    with pytest.raises(KafkaException):
        retry_while_not_ready(call, 10.0, "changelog x[0]")
