"""The lines for topics a service writes to that do not exist: the topic, and the command that
creates it with the partition count the service would give it (a topic the service creates
itself needs only a new start). Through a real broker: tests/integration/test_missing_topics.py."""

from __future__ import annotations

from framework.kafka.clients import no_such_topics
from framework.pipeline import Pipeline, Topic
from framework.runtime.topics import topics_missing, user_topics


def _pipeline() -> Pipeline:
    p = Pipeline("orders")
    counted = p.source(Topic("orders")).count(name="counts")
    counted.to(Topic("order-counts"))
    counted.to(Topic("order-audit", partitions=1))
    return p


def test_the_user_owns_the_sources_and_sinks_the_service_the_rest() -> None:
    assert user_topics(_pipeline(), 6) == {"order-audit": 1, "order-counts": 6, "orders": 6}


def test_at_start_each_missing_topic_has_its_command() -> None:
    assert str(topics_missing(_pipeline(), ["orders", "order-audit"], 6, "b:9092", running=False)) == (
        "service 'orders' needs topics that do not exist on b:9092: order-audit, orders, and kafka.create_topics is "
        "false. Fix: create them (fw topics create order-audit --partitions 1; fw topics create orders "
        "--partitions 6) or set FW_KAFKA__CREATE_TOPICS=true")


def test_while_it_runs_a_deleted_sink_has_its_command_and_the_service_its_restart() -> None:
    assert str(topics_missing(_pipeline(), ["order-counts"], 6, "b:9092", running=True)) == (
        "service 'orders' writes to a topic that no longer exists on b:9092: order-counts; what it writes there "
        "cannot be delivered. Fix: create it (fw topics create order-counts --partitions 6), then start the service "
        "again")
    assert str(topics_missing(_pipeline(), ["orders-counts-changelog", "order-counts"], 6, "b:9092", running=True)) == (
        "service 'orders' writes to topics that no longer exist on b:9092: order-counts, orders-counts-changelog; "
        "what it writes there cannot be delivered. Fix: create it (fw topics create order-counts --partitions 6), "
        "then start the service again (it creates its own topics when it starts)")
    assert str(topics_missing(_pipeline(), ["orders-dead-letter"], 6, "b:9092", running=True)) == (
        "service 'orders' writes to a topic that no longer exists on b:9092: orders-dead-letter; what it writes "
        "there cannot be delivered. Fix: start the service again (it creates its own topics when it starts)")


def test_a_producer_that_knows_only_the_names_says_create_them() -> None:
    assert str(no_such_topics(["totals"], "b:9092")) == (
        "topic 'totals' does not exist on b:9092: what is written there cannot be delivered (the cluster creates no "
        "topic on its own). Fix: create it (fw topics create totals --partitions N)")
    assert str(no_such_topics(["a", "b"], "b:9092")) == (
        "topics a, b do not exist on b:9092: what is written there cannot be delivered (the cluster creates no topic "
        "on its own). Fix: create them (fw topics create a --partitions N; fw topics create b --partitions N)")
