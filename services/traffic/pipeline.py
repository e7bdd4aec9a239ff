"""Traffic: vehicles per intersection per 5 minutes, and an accident alert when they drop sharply.

Reads ``traffic-crossings`` (key: the intersection id; value: Avro ``traffic.Crossing``
with ``intersection``, ``timestamp`` in ms and ``vehicle``). Event time is the crossing's
``timestamp``; crossings arrive out of order by at most ``BOUND_MS``. Per intersection:

- ``counts``: the vehicles in each ``WINDOW_MS`` (5-minute) tumbling event-time window,
  written once the watermark passes the window's end as Avro ``traffic.Count``
  (``start``, ``end``, ``value``: vehicles) with timestamp ``end - 1`` to
  ``traffic-counts``. A crossing that comes after its window fired goes to ``traffic-late``.
- ``sliding-counts``: the vehicles in sliding event-time windows of ``SLIDING_MS``
  (10 minutes) starting every ``SLIDE_MS`` (5 minutes), in order of their ends. The
  ``accidents`` process function keeps, in value state, the count of the intersection's
  previous sliding window that fired, and raises an accident alert when the drop is
  **sharp**: the previous window had at least ``MIN_VEHICLES`` vehicles and the latest
  has fewer than ``DROP_FRACTION`` of them (``vehicles < DROP_FRACTION * previous``; a
  drop to exactly half is not sharp). The alert is Avro ``traffic.Accident``
  (``intersection``, ``start``, ``end``, ``vehicles``, ``previous_vehicles``) on
  ``traffic-accidents``. A window without any vehicle never fires, so a complete stop
  shows as the drop into the window that straddles its beginning; late crossings are not
  counted in the sliding windows (no allowed lateness).

A record that does not decode goes to the dead-letter topic ``traffic-dead-letter``.
``build_pipeline(suffix)`` appends ``suffix`` to the service and topic names (tests and
demos use a fresh one). Run it with ``fw run services.traffic.pipeline:pipeline``.
"""

from __future__ import annotations

from typing import Any

from framework import (
    AvroSerde,
    Pipeline,
    ProcessContext,
    ProcessFunction,
    SlidingWindows,
    StringSerde,
    Topic,
    TumblingWindows,
    WatermarkStrategy,
    load_schema,
)

SERVICE = "traffic"
INPUT = f"{SERVICE}-crossings"
COUNTS = f"{SERVICE}-counts"
ACCIDENTS = f"{SERVICE}-accidents"
LATE = f"{SERVICE}-late"
WINDOW_MS = 5 * 60_000  # the tumbling count's window
SLIDING_MS = 10 * 60_000  # the accident detector's window ("the last few minutes")
SLIDE_MS = 5 * 60_000  # a new sliding window starts this often
MIN_VEHICLES = 10  # below this in the previous window, a drop says nothing (a quiet hour)
DROP_FRACTION = 0.5  # the latest window below this fraction of the previous one is sharp
BOUND_MS = 5_000  # a crossing arrives at most this much after a later one


def is_sharp_drop(previous: int | None, vehicles: int) -> bool:
    """Whether ``vehicles`` in the latest window is a sharp drop from ``previous``."""
    return previous is not None and previous >= MIN_VEHICLES and vehicles < DROP_FRACTION * previous


class AccidentDetector(ProcessFunction):
    """Per intersection, over its sliding-window counts: alert on a sharp drop."""

    def open(self, ctx: ProcessContext) -> None:
        self.previous = ctx.value_state("previous")  # vehicles in the last window that fired

    def process(self, key: Any, value: Any, ctx: ProcessContext) -> None:
        previous, vehicles = self.previous.get(), value["value"]
        if is_sharp_drop(previous, vehicles):
            ctx.emit({"intersection": key, "start": value["start"], "end": value["end"],
                      "vehicles": vehicles, "previous_vehicles": previous})
        self.previous.set(vehicles)


def build_pipeline(suffix: str = "") -> Pipeline:
    """The traffic pipeline; ``suffix`` is appended to the service and topic names."""
    p = Pipeline(f"{SERVICE}{suffix}")
    crossing_serde = AvroSerde(load_schema("traffic.Crossing"))
    crossings = p.source(
        Topic(f"{INPUT}{suffix}", key_serde=StringSerde(), value_serde=crossing_serde),
        watermarks=WatermarkStrategy.bounded_out_of_orderness(BOUND_MS, timestamp="timestamp"),
        name="crossings",
    )
    (
        crossings.window(TumblingWindows(WINDOW_MS),
                         late=Topic(f"{LATE}{suffix}", key_serde=StringSerde(), value_serde=crossing_serde))
        .count(name="counts")
        .to(Topic(f"{COUNTS}{suffix}", key_serde=StringSerde(),
                  value_serde=AvroSerde(load_schema("traffic.Count"))), name="to-counts")
    )
    (
        crossings.window(SlidingWindows(SLIDING_MS, SLIDE_MS))
        .count(name="sliding-counts")
        .process(AccidentDetector(), name="accidents")
        .to(Topic(f"{ACCIDENTS}{suffix}", key_serde=StringSerde(),
                  value_serde=AvroSerde(load_schema("traffic.Accident"))), name="to-accidents")
    )
    return p


pipeline = build_pipeline()
