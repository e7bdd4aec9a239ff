"""The demo job: sensor readings -> per-sensor count and mean temperature."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator

from confluent_kafka import Consumer, Producer

from framework.kafka.admin import TopicSpec, ensure_topics
from confluent_kafka.admin import AdminClient


def run_demo(bootstrap: str, records: int) -> Iterator[str]:
    topic = f"demo-readings-{uuid.uuid4().hex[:8]}"
    ensure_topics(AdminClient({"bootstrap.servers": bootstrap}), [TopicSpec(topic, 4)])
    rng = random.Random(7)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(records):
        sensor = f"sensor-{rng.randrange(8)}"
        value = {"id": sensor, "timestamp": 1_700_000_000_000 + i * 100, "temperature": round(rng.gauss(21, 3), 2)}
        producer.produce(topic, key=sensor.encode(), value=json.dumps(value).encode())
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush()
    yield f"produced {records} readings to {topic}"
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"demo-{topic}", "auto.offset.reset": "earliest",
        "isolation.level": "read_committed", "enable.auto.commit": False,
    })
    consumer.subscribe([topic])
    stats: dict[str, tuple[int, float]] = {}
    seen = 0
    while seen < records:
        for msg in consumer.consume(1000, timeout=1.0):
            if msg.error():
                continue
            v = json.loads(msg.value())
            n, total = stats.get(v["id"], (0, 0.0))
            stats[v["id"]] = (n + 1, total + v["temperature"])
            seen += 1
    consumer.close()
    yield f"{'sensor':<10} {'count':>6} {'mean °C':>8}"
    for sensor in sorted(stats):
        n, total = stats[sensor]
        yield f"{sensor:<10} {n:>6} {total / n:>8.2f}"
