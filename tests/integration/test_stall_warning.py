"""A service that cannot read although records are waiting says why, on the real broker.

The stall here is real and common: a producer upstream opened a transaction and neither
commits nor aborts it. A read_committed consumer stops at that transaction, so everything
produced after it waits. The service logs a WARNING that names the partition, its position,
its end, and the offset at which the open transaction holds it. When the transaction
commits, the service reads on.
"""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer

from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from tests.integration.harness import (
    ServiceProcess,
    present,
    produce_to_partitions,
    read_topic,
    wait_until,
)

TARGET = "tests.integration.pipelines:even_odd"


def test_a_service_held_by_an_open_upstream_transaction_says_where_and_why(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    topic = f"numbers-{unique}"
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(topic, 4)])
    upstream = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"upstream-{unique}"})
    upstream.init_transactions(30)
    upstream.begin_transaction()
    upstream.produce(topic, key=b"k", value=b"1", partition=0)
    assert upstream.flush(30) == 0  # written, not committed: offset 0 of partition 0
    produce_to_partitions(kafka_bootstrap, topic, [(0, b"k", str(n).encode()) for n in range(2, 12)])

    svc = ServiceProcess(TARGET, tmp_path, "0", {
        "FW_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "FW_TEST_SUFFIX": unique,
        "FW_PROCESSING__STALL_WARNING_MS": "1000",
    }).start()
    try:
        wait_until(lambda: "no input record for" in svc.log_text(), 60, "the stall warning", svc.log_text)
        warning = next(line for line in svc.log_text().splitlines() if "no input record for" in line)
        assert "WARNING" in warning
        assert (f"{topic}[0] at offset 0 of 11 (fetching, running, held at offset 0 by a "
                "transaction still open upstream)") in warning, warning
        assert f"{topic}[1]" not in warning  # partitions without waiting records are not named
        assert read_topic(kafka_bootstrap, f"seen-{unique}") == []

        upstream.commit_transaction(30)
        wait_until(lambda: len(read_topic(kafka_bootstrap, f"seen-{unique}")) == 11, 60,
                   "the held records to be processed", svc.log_text)
        seen = sorted(int(present(r.value)) for r in read_topic(kafka_bootstrap, f"seen-{unique}"))
        assert seen == [1, *range(2, 12)]
    finally:
        assert svc.stop() == 0
