"""The four workloads in Quix Streams, written as its documentation recommends: an
``Application`` with ``processing_guarantee``, a ``StreamingDataFrame``, ``filter``/``apply``,
stateful ``apply`` with ``State`` for the rolling aggregate, ``tumbling_window(...).agg(Mean)``
and ``session_window(...).agg(Count, Sum)`` with ``final()`` for the windows.

Run with the Quix venv's Python (benchmarks/.venv-quix) and the BENCH_* variables of
``benchmarks/common.py``. Windows close on the partition's event time
(``closing_strategy="partition"``), as the framework's and Kafka Streams' do; without it Quix
closes a key's windows only when that key gets a later record, and the last windows of
every key would never be emitted.

j1 (stream-table join) uses ``join_asof(how="left")``: the customers are kept in a timestamped
store and each order looks up the newest value at or before its timestamp among the updates
read so far. Quix Streams has no watermark for the join: an order read before an update that
precedes it in event time joins an older value (or none).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from quixstreams import Application, State
from quixstreams.dataframe.windows import aggregations as agg
from quixstreams.models.serializers.avro import AvroDeserializer, AvroSerializer

from benchmarks.common import (
    BOUND_MS,
    GAP_MS,
    HISTORY_MS,
    OUTPUT_SCHEMA,
    WINDOW_MS,
    enrich,
    keep,
    mapped,
    schema,
    settings,
)


def ts_of_value(value, headers, timestamp, timestamp_type) -> int:
    return timestamp if value is None else value["ts"]  # a delete (no value): its Kafka timestamp


def rolling(value: dict, state: State) -> dict:
    count = state.get("count", 0) + 1
    total = state.get("sum", 0) + value["value"]
    state.set("count", count)
    state.set("sum", total)
    return {"count": count, "sum": total}


def session_out(w: dict) -> dict:
    # Quix's session end is the last record + 1; the shared schema's is the last record + gap.
    return {"start": w["start"], "end": w["end"] - 1 + GAP_MS, "value": {"count": w["count"], "sum": w["sum"]}}


def join(app: Application, s) -> None:
    """j1: the orders left-joined as of their time with the customers (a delete stores None,
    which ``join_asof`` treats as no match)."""
    customers = app.topic(s.table, key_deserializer="str", value_deserializer=AvroDeserializer(schema("customer")),
                          timestamp_extractor=ts_of_value)
    orders = app.topic(s.input, key_deserializer="str", value_deserializer=AvroDeserializer(schema("order")),
                       timestamp_extractor=ts_of_value)
    out = app.topic(s.output, key_serializer="str", value_serializer=AvroSerializer(schema("enriched")))
    sdf = app.dataframe(orders).join_asof(app.dataframe(customers), how="left", on_merge=enrich, grace_ms=HISTORY_MS,
                                          name="customers")
    sdf.to_topic(out)


def main() -> None:
    s = settings()
    app = Application(
        broker_address=s.bootstrap,
        consumer_group=s.group,
        auto_offset_reset="earliest",
        commit_interval=s.commit_ms / 1000,
        processing_guarantee="exactly-once" if s.exactly_once else "at-least-once",
        state_dir=s.state_dir,
        loglevel="WARNING",
        producer_extra_config={"linger.ms": 5, "compression.type": "lz4"},
    )
    if s.workload == "j1":
        join(app, s)
        app.run()
        return
    event_time = s.workload in ("w3", "w4")
    source = app.topic(s.input, key_deserializer="str", value_deserializer=AvroDeserializer(schema("event")),
                       timestamp_extractor=ts_of_value if event_time else None)
    out = app.topic(s.output, key_serializer="str", value_serializer=AvroSerializer(schema(OUTPUT_SCHEMA[s.workload])))
    sdf = app.dataframe(source)
    if s.workload == "w1":
        sdf = sdf.filter(lambda e: keep(e["value"]))
        sdf = sdf.apply(lambda e: {"key": e["key"], "value": mapped(e["value"]), "ts": e["ts"]})
    elif s.workload == "w2":
        sdf = sdf.apply(rolling, stateful=True)
    elif s.workload == "w3":
        sdf = (sdf.tumbling_window(WINDOW_MS, grace_ms=BOUND_MS)
               .agg(value=agg.Mean("value"))
               .final(closing_strategy="partition"))
    elif s.workload == "w4":
        # Quix closes a session at last + 2 * gap + grace; grace = bound - gap closes it at
        # last + gap + bound, when the framework and Kafka Streams close theirs.
        sdf = (sdf.session_window(GAP_MS, grace_ms=BOUND_MS - GAP_MS)
               .agg(count=agg.Count(), sum=agg.Sum("value"))
               .final(closing_strategy="partition"))
        sdf = sdf.apply(session_out)
    else:
        raise ValueError(f"unknown workload {s.workload!r}")
    sdf.to_topic(out)
    app.run()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    main()
