"""Micro-benchmark behind the profile's top hot spot (the output path): CPU microseconds per
record of the ways a record can be handed to confluent-kafka, on the local broker.

    .venv/bin/python benchmarks/micro_produce.py [--records 300000]

Each variant produces the same Avro-encoded records to a fresh topic and drains every
delivery report (poll every 5000 records, flush at the end), as the service loop does.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from io import BytesIO
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fastavro
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.common import schema
from framework.config import Config
from framework.kafka.clients import KafkaOutput
from framework.serde import AvroSerde


def cpu() -> float:
    t = os.times()
    return t.user + t.system


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--bootstrap", default=Config.load().kafka.bootstrap_servers)
    args = ap.parse_args()
    n = args.records
    topic = f"bench-micro-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    admin.create_topics([NewTopic(topic, 4, 1)])[topic].result()
    serde = AvroSerde(schema("event"))
    parsed = fastavro.parse_schema(schema("event"))
    recs: list[dict[str, Any]] = [{"key": f"k{i % 10_000:04d}", "value": i % 1000, "ts": 1_700_000_000_000 + i}
                                  for i in range(n)]
    keys = [r["key"].encode() for r in recs]
    base = {"bootstrap.servers": args.bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
            "partitioner": "murmur2_random", "compression.type": "lz4", "queue.buffering.max.messages": 500_000}

    def timed(name: str, body) -> None:
        c0, t0 = cpu(), time.perf_counter()
        body()
        c1, t1 = cpu(), time.perf_counter()
        print(f"{name:<58} {(c1 - c0) / n * 1e6:6.2f} us CPU/record  {n / (t1 - t0):>9,.0f} records/s")

    def encode_only() -> None:
        for r in recs:
            serde.serialize(r)

    def encode_reused_buffer() -> None:
        buf = BytesIO()
        w = fastavro.schemaless_writer
        for r in recs:
            buf.seek(0)
            buf.truncate()
            w(buf, parsed, r)
            buf.getvalue()

    values = [serde.serialize(r) for r in recs]

    def framework_output() -> None:  # what the framework's sink does today
        out = KafkaOutput(base, None)
        for i in range(n):
            out.produce(topic, keys[i], values[i], recs[i]["ts"])
            if i % 5000 == 0:
                out.poll()
        out.flush(60)

    def per_record_callback() -> None:
        p = Producer(base)
        errors = []

        def dr(err, msg):
            if err is not None:
                errors.append(err)

        produce = p.produce
        for i in range(n):
            produce(topic, values[i], keys[i], timestamp=recs[i]["ts"], on_delivery=dr)
            if i % 5000 == 0:
                p.poll(0)
        p.flush(60)

    def errors_only_reports() -> None:
        errors = []

        def dr(err, msg):
            if err is not None:
                errors.append(err)

        p = Producer({**base, "on_delivery": dr, "delivery.report.only.error": True})
        produce = p.produce
        for i in range(n):
            produce(topic, values[i], keys[i], timestamp=recs[i]["ts"])
            if i % 5000 == 0:
                p.poll(0)
        p.flush(60)

    timed("AvroSerde.serialize alone", encode_only)
    timed("fastavro.schemaless_writer, one reused BytesIO", encode_reused_buffer)
    timed("KafkaOutput.produce (kwargs dict, per-record callback)", framework_output)
    timed("Producer.produce, positional, per-record callback", per_record_callback)
    timed("Producer.produce, positional, delivery.report.only.error", errors_only_reports)
    admin.delete_topics([topic])


if __name__ == "__main__":
    main()
