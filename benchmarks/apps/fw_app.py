"""The workloads as pipelines of this framework (W1-W4, and j1: a stream-table join).

Run by the suite as ``python -m framework.cli run benchmarks.apps.fw_app:pipeline
[--processes N]`` from the repository root, with the BENCH_* variables of
``benchmarks/common.py`` and FW_* settings (guarantee, checkpoint interval, state dir).
"""

from __future__ import annotations

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
from framework import (
    AvroSerde,
    Pipeline,
    SessionWindows,
    StringSerde,
    Topic,
    TumblingWindows,
    WatermarkStrategy,
)


def _w1_map(e: dict) -> dict:
    return {"key": e["key"], "value": mapped(e["value"]), "ts": e["ts"]}


def _w1_filter(e: dict) -> bool:
    return keep(e["value"])


def _init() -> tuple[int, int]:
    return (0, 0)


def _add(acc: tuple[int, int], e: dict) -> tuple[int, int]:
    return (acc[0] + 1, acc[1] + e["value"])


def _merge(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    return (a[0] + b[0], a[1] + b[1])


def _count_sum(acc: tuple[int, int]) -> dict:
    return {"count": acc[0], "sum": acc[1]}


def _avg(acc: tuple[int, int]) -> float:
    return acc[1] / acc[0]


def _session_out(w: dict) -> dict:
    return w  # {"start", "end" (= last record + gap), "value": {"count", "sum"}}: the Avro schema's shape


def join_pipeline(p: Pipeline, s) -> None:
    """j1: the orders joined with the customers table as of each order's time (``how="left"``:
    an order with no customer then is joined with None). Both sides on event time, so an
    order waits until the table's watermark has passed it."""
    on_ts = WatermarkStrategy.bounded_out_of_orderness(BOUND_MS, timestamp="ts")
    customers = p.table(Topic(s.table, key_serde=StringSerde(), value_serde=AvroSerde(schema("customer")),
                              partitions=4), history_ms=HISTORY_MS, watermarks=on_ts, name="customers")
    orders = p.source(Topic(s.input, key_serde=StringSerde(), value_serde=AvroSerde(schema("order")), partitions=4),
                      watermarks=on_ts)
    orders.join(customers, enrich, how="left", name="enrich").to(
        Topic(s.output, key_serde=StringSerde(), value_serde=AvroSerde(schema("enriched")), partitions=4))


def pipeline() -> Pipeline:
    s = settings()
    p = Pipeline(s.group)
    if s.workload == "j1":
        join_pipeline(p, s)
        return p
    event_time = s.workload in ("w3", "w4")
    wm = WatermarkStrategy.bounded_out_of_orderness(BOUND_MS, timestamp="ts") if event_time else None
    src = p.source(Topic(s.input, key_serde=StringSerde(), value_serde=AvroSerde(schema("event")), partitions=4),
                   watermarks=wm)
    out = Topic(s.output, key_serde=StringSerde(), value_serde=AvroSerde(schema(OUTPUT_SCHEMA[s.workload])),
                partitions=4)
    if s.workload == "w1":
        src.filter(_w1_filter).map(_w1_map).to(out)
    elif s.workload == "w2":
        src.aggregate(_init, _add, result=_count_sum, name="count-sum").to(out)
    elif s.workload == "w3":
        src.window(TumblingWindows(WINDOW_MS)).aggregate(_init, _add, merge=_merge, result=_avg,
                                                         name="avg").to(out)
    elif s.workload == "w4":
        src.window(SessionWindows(GAP_MS)).aggregate(_init, _add, merge=_merge, result=_count_sum,
                                                     name="sessions").to(out)
    else:
        raise ValueError(f"unknown workload {s.workload!r}")
    return p
