"""How long a transactional producer's flush waits when its transaction coordinator's node is
SIGKILLed, against when the cluster fenced that node (and so elected the new coordinator).

Starts a three-node cluster of its own (``LocalCluster``, RF 3, min ISR 2, free ports), a
topic of 6 partitions, and the framework's transactional producer (``KafkaOutput``) writing
300 records a transaction (begin, produce, flush, commit). Twice, it SIGKILLs the node coordinating the producer's
transactions, prints when the cluster's metadata (asked every 0.1 s) stopped listing that
node, and how long the transaction under way took to flush and commit; then it starts the
node again and waits until every partition is in sync. Producer settings of one's own are
given as JSON, e.g. librdkafka's default reconnect backoff against the framework's 1 s:

    .venv/bin/python benchmarks/coordinator_flush.py
    .venv/bin/python benchmarks/coordinator_flush.py '{"reconnect.backoff.max.ms": 10000}'

Outside the test suite; docs/operations.md ("A service while nodes fail and restart") has
what it showed.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.soak_cluster import Fenced
from framework.broker.cluster import LocalCluster
from framework.broker.local import free_ports
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from framework.kafka.clients import KafkaOutput
from tests.integration.test_cluster_faults import _coordinator

TOPIC, TXN_ID = "flushed", "coordinator-flush"


def _transactions(producer: KafkaOutput, seconds: float, since: float | None) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        producer.begin()
        for i in range(300):
            producer.produce(TOPIC, str(i).encode(), b"x" * 100, 0)
        began = time.monotonic()
        producer.flush(60)
        flushed = time.monotonic()
        producer.commit(60)
        if since is not None and time.monotonic() - began > 0.5:
            print(f"  a transaction begun {began - since:.1f} s after the kill: flush {flushed - began:.1f} s, "
                  f"commit {time.monotonic() - flushed:.1f} s", flush=True)
        time.sleep(0.1)


def main() -> int:
    extra = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    work = Path(tempfile.mkdtemp(prefix="fw-coordinator-flush-"))
    cluster = LocalCluster(work / "cluster", free_ports(29600, 29990, 6), nodes=3)
    cluster.start()
    try:
        admin = admin_client({"bootstrap.servers": cluster.bootstrap})
        ensure_topics(admin, [TopicSpec(TOPIC, 6)])
        producer = KafkaOutput({"bootstrap.servers": cluster.bootstrap, **extra}, TXN_ID)
        producer.init_transactions(60)
        _transactions(producer, 3, None)
        for _ in range(2):
            node, since = _coordinator(cluster.bootstrap, "__transaction_state", TXN_ID), time.monotonic()
            cluster.stop(node, kill=True)
            fenced = Fenced(cluster.bootstrap, node, since)
            print(f"SIGKILL node {node} (the transaction coordinator)", flush=True)
            _transactions(producer, 20, since)
            after = fenced.stop()
            print(f"  the cluster fenced node {node} after {after:.1f} s" if after is not None else
                  f"  node {node} still listed after 20 s", flush=True)
            cluster.start(node)
            while cluster.status().under_replicated:
                time.sleep(0.2)
    finally:
        cluster.wipe()
    return 0


if __name__ == "__main__":
    sys.exit(main())
