"""``read_range``, what a replay task reads its source partitions with under ``fw replay
--reader librdkafka``: exactly the committed records of ``[start, end)`` in offset order,
headers and timestamps as produced, aborted records left out, and done at ``end`` even where
the range ends in commit markers (no record at ``end - 1`` ever arrives). A transaction left
open below ``end`` is an error that names the partition and what to do, not a hang."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer, TopicPartition

from framework.errors import KafkaClientError
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from framework.kafka.clients import read_range
from tests.integration.harness import end_offsets


def _transactional(bootstrap: str, txid: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txid})
    producer.init_transactions(30)
    return producer


def _write(producer: Producer, topic: str, values: list[bytes], *, commit: bool) -> None:
    producer.begin_transaction()
    for v in values:
        producer.produce(topic, v, key=v, partition=0, timestamp=1_000 + int(v[1:]),
                         headers=[("n", v), ("empty", None)])
    if commit:
        producer.commit_transaction(30)
    else:
        producer.flush(30)  # on the log, then aborted (not purged from the client's queue)
        producer.abort_transaction(30)


def _read(bootstrap: str, unique: str, topic: str, start: int, end: int, batch: int = 3) -> list[list]:
    return list(read_range({"bootstrap.servers": bootstrap}, f"range-{unique}", topic, 0, start, end, batch=batch))


def test_a_range_is_its_committed_records_and_ends_at_its_end(kafka_bootstrap: str, unique: str) -> None:
    topic = f"range-{unique}"
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(topic, 1)])
    producer = _transactional(kafka_bootstrap, f"range-writer-{unique}")
    _write(producer, topic, [b"v0", b"v1", b"v2", b"v3"], commit=True)    # offsets 0-3, marker 4
    _write(producer, topic, [b"x5", b"x6"], commit=False)                 # aborted 5-6, marker 7
    _write(producer, topic, [b"v8", b"v9", b"v10"], commit=True)          # offsets 8-10, marker 11
    end = end_offsets(kafka_bootstrap, topic)[0]
    assert end == 12

    runs = _read(kafka_bootstrap, unique, topic, 0, end)
    got = [m for run in runs for m in run]
    assert all(len(run) <= 3 for run in runs)
    assert [(m.offset(), m.value()) for m in got] == [
        (0, b"v0"), (1, b"v1"), (2, b"v2"), (3, b"v3"), (8, b"v8"), (9, b"v9"), (10, b"v10")]
    assert [m.timestamp()[1] for m in got] == [1_000, 1_001, 1_002, 1_003, 1_008, 1_009, 1_010]
    assert got[0].headers() == [("n", b"v0"), ("empty", None)] and got[0].key() == b"v0"

    # a range ending in an aborted transaction's records and its marker, another inside the log,
    # one that starts in the middle, and an empty one
    assert [m.offset() for run in _read(kafka_bootstrap, unique, topic, 0, 8) for m in run] == [0, 1, 2, 3]
    assert [m.offset() for run in _read(kafka_bootstrap, unique, topic, 2, 9) for m in run] == [2, 3, 8]
    assert [m.offset() for run in _read(kafka_bootstrap, unique, topic, 9, 10) for m in run] == [9]
    assert _read(kafka_bootstrap, unique, topic, 5, 5) == []
    producer.flush(10)


def test_a_transaction_open_below_the_end_is_an_error_naming_it(kafka_bootstrap: str, unique: str) -> None:
    topic = f"range-open-{unique}"
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(topic, 1)])
    producer = _transactional(kafka_bootstrap, f"range-open-{unique}")
    _write(producer, topic, [b"v0", b"v1"], commit=True)   # 0-1, marker 2
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)           # offset 3, never committed while we read
    producer.flush(10)
    try:
        with pytest.raises(KafkaClientError, match=rf"reading {topic}\[0\]: no committed record past offset 3 .*"
                                                   r"Fix: let it end"):
            list(read_range({"bootstrap.servers": kafka_bootstrap}, f"range-{unique}", topic, 0, 0, 4, stall_s=2))
    finally:
        producer.abort_transaction(30)


def test_a_start_deleted_since_the_range_was_planned_is_an_error_naming_it(kafka_bootstrap: str,
                                                                            unique: str) -> None:
    topic = f"range-gone-{unique}"
    admin = admin_client({"bootstrap.servers": kafka_bootstrap})
    ensure_topics(admin, [TopicSpec(topic, 1)])
    producer = _transactional(kafka_bootstrap, f"range-gone-{unique}")
    _write(producer, topic, [b"v0", b"v1", b"v2", b"v3"], commit=True)    # offsets 0-3, marker 4
    [done] = admin.delete_records([TopicPartition(topic, 0, 2)]).values()  # what retention does
    done.result(30)
    with pytest.raises(KafkaClientError, match=rf"reading {topic}\[0\]: offset 0 is no longer in the log \(the log "
                                               r"starts at 2 now\).*Fix: replay again with --from"):
        _read(kafka_bootstrap, unique, topic, 0, 5)
    assert [m.offset() for run in _read(kafka_bootstrap, unique, topic, 2, 5) for m in run] == [2, 3]
