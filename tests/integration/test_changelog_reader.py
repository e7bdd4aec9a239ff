"""A restore asks for the end of each changelog partition. On a topic created a moment ago
the broker may not know the partition's leader yet; the question is asked again instead of
failing the assignment (a service once crashed on NOT_LEADER_FOR_PARTITION right after a
fresh broker created its changelog topics)."""

from __future__ import annotations

import logging
import threading

import pytest
from confluent_kafka import KafkaException

from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from framework.kafka.clients import ChangelogReader


def test_end_offset_waits_for_a_partition_that_appears(kafka_bootstrap: str, unique: str,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    topic = f"late-changelog-{unique}"
    reader = ChangelogReader({"bootstrap.servers": kafka_bootstrap}, f"restore-{unique}")
    asked_again = threading.Event()

    class Signal(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "not ready" in record.getMessage():
                asked_again.set()

    handler = Signal()
    logging.getLogger("framework.kafka").addHandler(handler)
    def create() -> None:
        if asked_again.wait(60):
            ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(topic, 1)])

    created = threading.Thread(target=create)
    created.start()
    try:
        with caplog.at_level(logging.INFO, logger="framework.kafka"):  # the "not ready" line is INFO
            assert reader.end_offset((topic, 0), 60.0) == 0
    finally:
        created.join(60)
        logging.getLogger("framework.kafka").removeHandler(handler)
        reader.close()
    assert asked_again.is_set(), "the first answer must have been 'not ready'"


def test_end_offset_gives_up_at_its_timeout(kafka_bootstrap: str, unique: str) -> None:
    reader = ChangelogReader({"bootstrap.servers": kafka_bootstrap}, f"restore-{unique}")
    try:
        with pytest.raises(KafkaException, match="Unknown partition|Unknown topic"):
            reader.end_offset((f"never-created-{unique}", 0), 1.0)
    finally:
        reader.close()
