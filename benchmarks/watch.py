"""The latency phase's observer: a read_committed consumer of one output topic that notes
when each record became visible to it (wall clock, ms). Runs as its own process so that
the rate-limited producer of the suite does not delay it (and vice versa).

    python benchmarks/watch.py BOOTSTRAP TOPIC OUT_FILE

Consumes until SIGTERM, then pickles ``[(seen_ms, record_timestamp_ms, value_bytes), ...]``
to OUT_FILE.
"""

from __future__ import annotations

import pickle
import signal
import sys
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

_stop = False


def _on_signal(*_: object) -> None:
    global _stop
    _stop = True


def main() -> None:
    bootstrap, topic, out_file = sys.argv[1:4]
    signal.signal(signal.SIGTERM, _on_signal)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-watch-{uuid.uuid4().hex[:8]}",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 10, "auto.offset.reset": "earliest"})
    md = c.list_topics(topic, timeout=30)
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in md.topics[topic].partitions])
    seen: list[tuple[int, int, bytes | None]] = []
    print("ready", flush=True)
    while not _stop:
        msgs = c.consume(1000, 0.05)
        now = time.time_ns() // 1_000_000
        for m in msgs:
            if m.error() is None:
                seen.append((now, m.timestamp()[1], m.value()))
    c.close()
    with open(out_file, "wb") as f:
        pickle.dump(seen, f)


if __name__ == "__main__":
    main()
