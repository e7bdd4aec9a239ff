"""A static member's consumer fenced by its own rejoin (its session lost, librdkafka issue
3437) is replaced by a new one, subscribed as it was; a fence without a lost session, or the
third within the window, stays fatal. No broker: the consumers are created, not connected."""

from __future__ import annotations

import time

from confluent_kafka import KafkaError

from framework.kafka.clients import GroupConsumer

FENCED = KafkaError(KafkaError.FENCED_INSTANCE_ID, "Broker: Static consumer fenced by other consumer", fatal=True)


def _member() -> GroupConsumer:
    consumer = GroupConsumer({"bootstrap.servers": "127.0.0.1:9"}, "g", instance_id="0")
    consumer.subscribe(["t"], lambda tps: [], lambda tps: None, lambda tps: None)
    return consumer


def test_a_fence_without_a_lost_session_is_another_process() -> None:
    consumer = _member()
    try:
        assert not consumer._fenced_by_itself(FENCED)
    finally:
        consumer.close(leave=False)


def test_a_fence_right_after_a_lost_session_rejoins_with_a_new_consumer_twice_then_is_fatal() -> None:
    consumer = _member()
    try:
        for _ in range(2):
            consumer._lost_at = time.monotonic()
            assert consumer._fenced_by_itself(FENCED)
            old = consumer._c
            consumer._rejoin(FENCED)
            assert consumer._c is not old and consumer.connectivity.fatal is None
        consumer._lost_at = time.monotonic()
        assert not consumer._fenced_by_itself(FENCED)  # the third within the window
    finally:
        consumer.close(leave=False)


def test_a_dynamic_member_fenced_is_not_taken_for_its_own_rejoin() -> None:
    consumer = GroupConsumer({"bootstrap.servers": "127.0.0.1:9"}, "g")
    try:
        consumer._lost_at = time.monotonic()
        assert not consumer._fenced_by_itself(FENCED)
    finally:
        consumer.close(leave=False)
