"""The four workloads in PyFlink (``apache-flink`` from PyPI), in its Python DataStream API with
Flink's Kafka connector: ``KafkaSource`` / ``KafkaSink``, ``map``/``filter``, ``key_by(...).reduce``
for the rolling aggregate (it emits the updated aggregate for every record), and event-time
``window(...).aggregate(AggregateFunction, ProcessWindowFunction)`` for the tumbling windows and
``window(...).process(ProcessWindowFunction)`` for the sessions (see ``main`` for why).

Run with the PyFlink venv's Python (benchmarks/.venv-pyflink) and the BENCH_* variables of
``benchmarks/common.py``, plus ``BENCH_FLINK_JARS`` (the Kafka connector's SQL jar of PyFlink's
Flink release and the Java app's jar, for ``bench.RowField``; both built by benchmarks/run),
``BENCH_PARALLELISM`` (1) and, for experiments only (the suite's runs leave it unset),
``BENCH_PYFLINK_CONF`` (``key=value,...``: further Flink settings). ``python`` runs the job in
a local MiniCluster inside the JVM PyFlink starts, which starts the Python workers that run the
functions below.

As the Java app (benchmarks/flink): checkpoints every ``BENCH_COMMIT_MS`` with the source's
offsets committed to ``BENCH_GROUP`` on each completed checkpoint, read_committed input, a
transactional Kafka sink for exactly_once, the heap state backend with checkpoints to files.
The event time of W3/W4 is the Kafka timestamp, which the suite sets to the value's ``ts``:
so the watermark strategy stays in the JVM, per Kafka partition (a Python timestamp assigner
would run after the source, with one watermark for all the partitions a subtask reads, and
a backlog read partition by partition would make records late). The records are decoded
and encoded in Python with fastavro, as the other Python systems do.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import fastavro
from pyflink.common import Configuration, Duration, Row, Time, Types, WatermarkStrategy
from pyflink.common.serialization import ByteArraySchema, SerializationSchema
from pyflink.datastream import CheckpointingMode, StreamExecutionEnvironment
from pyflink.datastream.connectors.base import DeliveryGuarantee
from pyflink.datastream.connectors.kafka import (
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
)
from pyflink.datastream.functions import AggregateFunction, ProcessWindowFunction
from pyflink.datastream.window import EventTimeSessionWindows, TimeWindow, TumblingEventTimeWindows
from pyflink.java_gateway import get_gateway

from benchmarks.common import (
    BOUND_MS,
    GAP_MS,
    OUTPUT_SCHEMA,
    WINDOW_MS,
    keep,
    mapped,
    schema,
    settings,
)

if TYPE_CHECKING:
    from fastavro.types import Schema

EVENT = Types.TUPLE([Types.STRING(), Types.LONG(), Types.LONG()])  # (key, value, ts)
OUT = Types.ROW([Types.PRIMITIVE_ARRAY(Types.BYTE()), Types.PRIMITIVE_ARRAY(Types.BYTE())])  # (key, Avro body)


# a record schema's reader returns a dict (fastavro types it as any Avro value)
_read: Callable[..., Any] = fastavro.schemaless_reader


class Codec:
    """Schemaless Avro bodies (fastavro), parsed once per worker."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.parsed: Schema | None = None

    def __call__(self, record: dict) -> bytes:
        if self.parsed is None:
            self.parsed = fastavro.parse_schema(schema(self.name))
        buf = BytesIO()
        fastavro.schemaless_writer(buf, self.parsed, record)
        return buf.getvalue()


class Decode:
    def __init__(self) -> None:
        self.parsed: Schema | None = None

    def __call__(self, body: bytes) -> tuple[str, int, int]:
        if self.parsed is None:
            self.parsed = fastavro.parse_schema(schema("event"))
        v: dict[str, Any] = _read(BytesIO(body), self.parsed)
        return v["key"], v["value"], v["ts"]


class CountSum(AggregateFunction):
    """(count, sum) of the values."""

    def create_accumulator(self) -> tuple[int, int]:
        return 0, 0

    def add(self, value: tuple[str, int, int], acc: tuple[int, int]) -> tuple[int, int]:
        return acc[0] + 1, acc[1] + value[1]

    def get_result(self, acc: tuple[int, int]) -> tuple[int, int]:
        return acc

    def merge(self, a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:  # abstract; W3 never merges
        return a[0] + b[0], a[1] + b[1]



class WindowResult(ProcessWindowFunction):
    """(key bytes, the workload's output body) of a window's (count, sum): the one accumulator
    of ``aggregate`` (W3), or counted over the window's events (W4, see ``main``)."""

    def __init__(self, workload: str, body: Callable[[TimeWindow, int, int], dict], events: bool = False) -> None:
        self.encode = Codec(OUTPUT_SCHEMA[workload])
        self.body = body
        self.events = events

    def process(self, key: str, context: ProcessWindowFunction.Context, elements):
        if self.events:
            count = total = 0
            for e in elements:
                count, total = count + 1, total + e[1]
        else:
            count, total = next(iter(elements))
        yield Row(key.encode(), self.encode(self.body(context.window(), count, total)))


def average(w: TimeWindow, count: int, total: int) -> dict:
    """W3's WindowAvg."""
    return {"start": w.start, "end": w.end, "value": total / count}


def session(w: TimeWindow, count: int, total: int) -> dict:
    """W4's Session: Flink's session window is [first, last + gap), the schema's end already."""
    return {"start": w.start, "end": w.end, "value": {"count": count, "sum": total}}


def main() -> None:
    s = settings()
    conf = Configuration()
    conf.set_string("python.executable", sys.executable)  # the workers run in this venv too
    conf.set_string("state.backend.type", "hashmap")
    conf.set_string("execution.checkpointing.storage", "filesystem")
    conf.set_string("execution.checkpointing.dir", Path(s.state_dir, "checkpoints").as_uri())
    conf.set_string("restart-strategy.type", "none")
    conf.set_string("rest.bind-address", "127.0.0.1")
    conf.set_string("rest.bind-port", "0")
    for item in filter(None, os.environ.get("BENCH_PYFLINK_CONF", "").split(",")):  # experiments only
        name, _, value = item.partition("=")
        conf.set_string(name.strip(), value.strip())
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.add_jars(*(Path(j).as_uri() for j in os.environ["BENCH_FLINK_JARS"].split(os.pathsep)))
    env.set_parallelism(int(os.environ.get("BENCH_PARALLELISM", "1")))
    env.enable_checkpointing(s.commit_ms, CheckpointingMode.EXACTLY_ONCE if s.exactly_once
                             else CheckpointingMode.AT_LEAST_ONCE)

    source = (KafkaSource.builder().set_bootstrap_servers(s.bootstrap).set_topics(s.input).set_group_id(s.group)
              .set_starting_offsets(KafkaOffsetsInitializer.earliest())  # a fresh group per run
              .set_value_only_deserializer(ByteArraySchema())
              .set_property("isolation.level", "read_committed")
              .set_property("commit.offsets.on.checkpoint", "true").build())
    event_time = s.workload in ("w3", "w4")
    watermarks = (WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(BOUND_MS)) if event_time
                  else WatermarkStrategy.no_watermarks())
    events = env.from_source(source, watermarks, "input").map(Decode(), output_type=EVENT)
    if s.workload == "w1":
        encode = Codec(OUTPUT_SCHEMA["w1"])
        out = (events.filter(lambda e: keep(e[1]))
               .map(lambda e: Row(e[0].encode(), encode({"key": e[0], "value": mapped(e[1]), "ts": e[2]})),
                    output_type=OUT))
    elif s.workload == "w2":
        encode = Codec(OUTPUT_SCHEMA["w2"])
        out = (events.map(lambda e: (e[0], 1, e[1]), output_type=EVENT)  # (key, count, sum)
               .key_by(lambda e: e[0], key_type=Types.STRING())
               .reduce(lambda a, b: (a[0], a[1] + b[1], a[2] + b[2]))
               .map(lambda a: Row(a[0].encode(), encode({"count": a[1], "sum": a[2]})), output_type=OUT))
    elif s.workload == "w3":
        out = (events.key_by(lambda e: e[0], key_type=Types.STRING())
               .window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW_MS)))
               .aggregate(CountSum(), WindowResult("w3", average),
                          accumulator_type=Types.TUPLE([Types.LONG(), Types.LONG()]), output_type=OUT))
    elif s.workload == "w4":
        # Not aggregate(): PyFlink 2.2.1's aggregating (and reducing) state keeps one accumulator
        # in a list, and merging two sessions joins their lists in the JVM
        # (AggregateFunction.merge is not called), after which add() and get() take the first
        # accumulator and drop the other; the reference check found sessions with too few
        # records. The events' list merges correctly.
        out = (events.key_by(lambda e: e[0], key_type=Types.STRING())
               .window(EventTimeSessionWindows.with_gap(Time.milliseconds(GAP_MS)))
               .process(WindowResult("w4", session, events=True), output_type=OUT))
    else:
        raise SystemExit(f"unknown workload {s.workload}; Fix: BENCH_WORKLOAD=w1|w2|w3|w4")

    jvm = get_gateway().jvm
    records = (KafkaRecordSerializationSchema.builder().set_topic(s.output)
               .set_key_serialization_schema(SerializationSchema(j_serialization_schema=jvm.bench.RowField(0)))
               .set_value_serialization_schema(SerializationSchema(j_serialization_schema=jvm.bench.RowField(1)))
               .build())
    sink = (KafkaSink.builder().set_bootstrap_servers(s.bootstrap).set_record_serializer(records)
            .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE if s.exactly_once else DeliveryGuarantee.AT_LEAST_ONCE)
            .set_transactional_id_prefix(s.group)  # the group is new in every run
            .set_property("linger.ms", "5").set_property("compression.type", "lz4")
            # the broker's transaction.max.timeout.ms (Flink's default of 1 h is above it): a
            # transaction lasts a checkpoint, and PyFlink's can take minutes when state is slow
            .set_property("transaction.timeout.ms", "900000").build())
    out.sink_to(sink)
    env.execute(f"bench-{s.workload}")


if __name__ == "__main__":
    main()
