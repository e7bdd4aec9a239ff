"""The local broker supports real Kafka transactions (one node, RF 1 transaction log)."""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from framework.kafka.admin import TopicSpec, ensure_topics


def _read_all(bootstrap: str, topic: str, isolation: str) -> list[bytes | None]:
    """Every value visible at ``isolation``, up to the end of the partition."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{topic}-{isolation}",
        "isolation.level": isolation, "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
    })
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes | None] = []
    while True:
        msg = consumer.poll(10.0)
        assert msg is not None, "neither a record nor end-of-partition within 10 s"
        err = msg.error()
        if err is not None:
            assert err.code() == KafkaError._PARTITION_EOF, err
            break
        values.append(msg.value())
    consumer.close()
    return values


def _transaction(bootstrap: str, topic: str, values: list[bytes], commit: bool, txid: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txid})
    producer.init_transactions(30)
    producer.begin_transaction()
    for v in values:
        producer.produce(topic, value=v, partition=0)
    producer.flush(30)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def test_committed_visible_aborted_invisible_to_read_committed(kafka_bootstrap: str, unique: str) -> None:
    topic = f"txn-{unique}"
    ensure_topics(AdminClient({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(topic, 1)])
    committed = [f"committed-{i}".encode() for i in range(10)]
    aborted = [f"aborted-{i}".encode() for i in range(10)]
    _transaction(kafka_bootstrap, topic, committed[:5], True, f"tx-{unique}")
    _transaction(kafka_bootstrap, topic, aborted, False, f"tx-{unique}")
    _transaction(kafka_bootstrap, topic, committed[5:], True, f"tx-{unique}")

    assert _read_all(kafka_bootstrap, topic, "read_committed") == committed
    uncommitted = _read_all(kafka_bootstrap, topic, "read_uncommitted")
    assert uncommitted == committed[:5] + aborted + committed[5:]
