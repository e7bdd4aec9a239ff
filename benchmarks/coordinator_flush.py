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
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from framework.broker.cluster import LocalCluster
from framework.broker.local import free_ports
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from framework.kafka.clients import KafkaOutput, coordinator_partition

TOPIC, TXN_ID = "flushed", "coordinator-flush"


def _coordinator(admin: Any) -> int:
    parts = admin.list_topics("__transaction_state", timeout=5).topics["__transaction_state"].partitions
    return int(parts[coordinator_partition(TXN_ID, len(parts))].leader)


def _fenced(admin: Any, node: int, since: float, out: list[float]) -> None:
    while time.monotonic() - since < 60:
        try:
            if node not in admin.list_topics(timeout=1).brokers:
                out.append(time.monotonic() - since)
                return
        except Exception:  # noqa: BLE001, S110 - no answer now: asked again
            pass
        time.sleep(0.1)


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
            node, since = _coordinator(admin), time.monotonic()
            fenced: list[float] = []
            cluster.stop(node, kill=True)
            watch = threading.Thread(target=_fenced, args=(admin, node, since, fenced), daemon=True)
            watch.start()
            print(f"SIGKILL node {node} (the transaction coordinator)", flush=True)
            _transactions(producer, 20, since)
            watch.join()
            print(f"  the cluster fenced node {node} after {fenced[0]:.1f} s" if fenced else
                  f"  node {node} still listed after 60 s", flush=True)
            cluster.start(node)
            while cluster.status().under_replicated:
                time.sleep(0.2)
    finally:
        cluster.wipe()
    return 0


if __name__ == "__main__":
    sys.exit(main())
