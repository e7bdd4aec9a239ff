"""The ceiling: a plain confluent-kafka consume -> produce loop with no framework.

Same serde (fastavro schemaless), same consumer settings (read_committed, batches of 5000),
same producer settings, and the same guarantee machinery: exactly_once commits a
transaction with the input offsets every commit interval, at_least_once flushes and then
commits the offsets. State lives in Python dicts only: no changelog, no RocksDB, nothing
survives a crash. W3/W4 keep per-partition watermarks (max timestamp - bound - 1) and fire
windows at the end of each batch, so it is also a lower bound on what event time costs.
j1 keeps each customer's versions in a dict of sorted lists and holds an order until the
customers' partition has passed its time (max timestamp - bound), then joins it as of its time.

Run with the project's venv and the BENCH_* variables of ``benchmarks/common.py``.
"""

from __future__ import annotations

import bisect
import heapq
import signal
import sys
import time
from collections.abc import Callable
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import fastavro
from confluent_kafka import Consumer, Producer, TopicPartition

if TYPE_CHECKING:
    from confluent_kafka import KafkaError

from benchmarks.common import (
    BOUND_MS,
    GAP_MS,
    OUTPUT_SCHEMA,
    WINDOW_MS,
    enrich,
    keep,
    mapped,
    schema,
    settings,
)

_stop = False


class _Consumed(Protocol):
    """A consumed message as the loop reads it once it has no error: librdkafka sets its
    topic, partition and offset, and every input record has a key (confluent-kafka's stubs
    type them Optional for error events). Its value is None for a deleted customer."""

    def error(self) -> KafkaError | None: ...
    def topic(self) -> str: ...
    def partition(self) -> int: ...
    def offset(self) -> int: ...
    def key(self) -> bytes: ...
    def value(self) -> bytes | None: ...
    def timestamp(self) -> tuple[int, int]: ...


def _on_signal(*_: Any) -> None:
    global _stop
    _stop = True


def main() -> None:
    s = settings()
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    in_schema = fastavro.parse_schema(schema("event"))
    out_schema = fastavro.parse_schema(schema(OUTPUT_SCHEMA[s.workload]))
    # a record schema's reader returns a dict (fastavro types it as any Avro value)
    reader: Callable[..., Any] = fastavro.schemaless_reader
    writer = fastavro.schemaless_writer

    def decode(b: bytes) -> Any:
        return reader(BytesIO(b), in_schema)

    def encode(v: Any) -> bytes:
        buf = BytesIO()
        writer(buf, out_schema, v)
        return buf.getvalue()

    consumer = Consumer({
        "bootstrap.servers": s.bootstrap, "group.id": s.group, "enable.auto.commit": False,
        "enable.auto.offset.store": False, "auto.offset.reset": "earliest", "isolation.level": "read_committed",
        "partition.assignment.strategy": "range",
    })
    pconf: dict[str, Any] = {"bootstrap.servers": s.bootstrap, "enable.idempotence": True, "acks": "all",
                             "linger.ms": 5, "partitioner": "murmur2_random", "compression.type": "lz4",
                             "queue.buffering.max.messages": 500_000}
    if s.exactly_once:
        pconf["transactional.id"] = f"{s.group}-raw"
    producer = Producer(pconf)
    if s.exactly_once:
        producer.init_transactions(30)
        producer.begin_transaction()
    consumer.subscribe([s.input, s.table] if s.table else [s.input])
    produce, out = producer.produce, s.output
    positions: dict[tuple[str, int], int] = {}

    def send(k: str, v: Any, ts: int) -> None:
        while True:
            try:
                produce(out, key=k.encode(), value=encode(v), timestamp=ts)
                return
            except BufferError:
                producer.poll(0.05)

    # -- workloads: process(key, value, ts, partition); fire(partition) after each batch ----
    acc: dict[str, list[int]] = {}
    maxts: dict[int, int] = {}
    windows: dict[tuple[str, int], list[int]] = {}            # W3: (key, start) -> [count, sum]
    sessions: dict[str, list[list[int]]] = {}                  # W4: key -> [[start, end, count, sum]]
    due: dict[int, list[tuple[int, str, int]]] = {}            # partition -> heap of (end, key, start)

    def w1(k: str, v: dict, ts: int, p: int) -> None:
        if keep(v["value"]):
            send(k, {"key": v["key"], "value": mapped(v["value"]), "ts": v["ts"]}, ts)

    def w2(k: str, v: dict, ts: int, p: int) -> None:
        a = acc.get(k)
        if a is None:
            a = acc[k] = [0, 0]
        a[0] += 1
        a[1] += v["value"]
        send(k, {"count": a[0], "sum": a[1]}, ts)

    def w3(k: str, v: dict, ts: int, p: int) -> None:
        t = v["ts"]
        m = maxts.get(p, -(2**62))
        wm = m - BOUND_MS - 1
        start = t - t % WINDOW_MS
        end = start + WINDOW_MS
        if end - 1 <= wm:
            return  # late
        w = windows.get((k, start))
        if w is None:
            w = windows[(k, start)] = [0, 0]
            heapq.heappush(due.setdefault(p, []), (end, k, start))
        w[0] += 1
        w[1] += v["value"]
        if t > m:
            maxts[p] = t

    def fire3(p: int) -> None:
        wm = maxts.get(p, -(2**62)) - BOUND_MS - 1
        heap = due.get(p)
        while heap and heap[0][0] - 1 <= wm:
            end, k, start = heapq.heappop(heap)
            c, total = windows.pop((k, start))
            send(k, {"start": start, "end": end, "value": total / c}, end - 1)

    def w4(k: str, v: dict, ts: int, p: int) -> None:
        t = v["ts"]
        m = maxts.get(p, -(2**62))
        wm = m - BOUND_MS - 1
        start, end = t, t + GAP_MS
        keep_, c, total = [], 1, v["value"]
        for sess in sessions.get(k, ()):
            if sess[0] <= end and sess[1] >= start:
                start, end = min(start, sess[0]), max(end, sess[1])
                c += sess[2]
                total += sess[3]
            else:
                keep_.append(sess)
        if end - 1 <= wm:
            return  # late
        keep_.append([start, end, c, total])
        sessions[k] = keep_
        heapq.heappush(due.setdefault(p, []), (end, k, start))
        if t > m:
            maxts[p] = t

    def fire4(p: int) -> None:
        wm = maxts.get(p, -(2**62)) - BOUND_MS - 1
        heap = due.get(p)
        while heap and heap[0][0] - 1 <= wm:
            end, k, start = heapq.heappop(heap)
            kept, fired = [], None
            for sess in sessions.get(k, ()):
                if fired is None and sess[0] == start and sess[1] == end:
                    fired = sess
                else:
                    kept.append(sess)
            if fired is None:
                continue  # merged into a later session since: a stale heap entry
            if kept:
                sessions[k] = kept
            else:
                sessions.pop(k, None)
            send(k, {"start": start, "end": end, "value": {"count": fired[2], "sum": fired[3]}}, end - 1)

    # -- j1: customers (s.table) as sorted versions per key, orders held until the table passes them
    customer_schema = fastavro.parse_schema(schema("customer"))
    order_schema = fastavro.parse_schema(schema("order"))
    versions: dict[str, list[tuple[int, int | None]]] = {}
    held: dict[int, list[tuple[int, int, str, dict]]] = {}     # partition -> heap of (ts, id, key, order)

    def lookup(k: str, order: dict) -> None:
        vs = versions.get(k, ())
        i = bisect.bisect_right(vs, order["ts"], key=lambda x: x[0])
        value = vs[i - 1][1] if i else None
        send(k, enrich(order, None if value is None else {"value": value}), order["ts"])

    def j1(k: str, raw: bytes | None, ts: int, p: int, topic: str) -> None:
        if topic == s.table:
            c = None if raw is None else reader(BytesIO(raw), customer_schema)
            t = ts if c is None else c["ts"]
            bisect.insort(versions.setdefault(k, []), (t, None if c is None else c["value"]), key=lambda x: x[0])
            if t > maxts.get(p, -(2**62)):
                maxts[p] = t
            return
        # an order always has a value: no check per record in the ceiling's loop
        order = reader(BytesIO(raw), order_schema)  # type: ignore[arg-type]  # an order has a value
        if order["ts"] <= maxts.get(p, -(2**62)) - BOUND_MS:
            lookup(k, order)
        else:
            heapq.heappush(held.setdefault(p, []), (order["ts"], order["id"], k, order))

    def fire_j1(p: int) -> None:
        wm = maxts.get(p, -(2**62)) - BOUND_MS
        heap = held.get(p)
        while heap and heap[0][0] <= wm:
            _ts, _id, k, order = heapq.heappop(heap)
            lookup(k, order)

    process = {"w1": w1, "w2": w2, "w3": w3, "w4": w4}.get(s.workload)
    fire = {"w3": fire3, "w4": fire4, "j1": fire_j1}.get(s.workload)

    def commit() -> None:
        if not positions:
            return
        offsets = [TopicPartition(t, p, o) for (t, p), o in positions.items()]
        if s.exactly_once:
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
            producer.begin_transaction()
        else:
            producer.flush(30)
            consumer.commit(offsets=offsets, asynchronous=False)

    interval = s.commit_ms / 1000
    next_commit = time.monotonic() + interval
    dirty = False
    while not _stop:
        msgs = cast("list[_Consumed]", consumer.consume(5000, 0.1))  # once per batch
        touched = set()
        for msg in msgs:
            if msg.error() is not None:
                continue
            p, topic = msg.partition(), msg.topic()
            if process is None:  # j1: two topics, decoded by j1
                j1(msg.key().decode(), msg.value(), msg.timestamp()[1], p, topic)
            else:
                # w1-w4's records all have values: no check per record in the ceiling's loop
                process(msg.key().decode(), decode(msg.value()),  # type: ignore[arg-type]  # w1-w4: a value
                        msg.timestamp()[1], p)
            positions[(topic, p)] = msg.offset() + 1
            touched.add(p)
        if fire is not None:
            for p in touched:
                fire(p)
        if msgs:
            dirty = True
            producer.poll(0)
        if time.monotonic() >= next_commit:
            if dirty:
                commit()
                dirty = False
            next_commit = time.monotonic() + interval
    if dirty:
        commit()
    producer.flush(30)
    consumer.close()


if __name__ == "__main__":
    main()
