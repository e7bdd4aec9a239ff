"""Sensor monitoring: keyed state with a rolling aggregate and a process function.

Reads ``readings`` (Avro ``sensor.Reading``: ``id``, ``timestamp``, ``temperature``),
re-keys them by sensor id through the ``by-sensor`` repartition topic, and from there:

- ``mean-temperature``: the rolling mean temperature per sensor, emitted after every
  reading to ``sensor-means`` (key: the sensor id, value: the mean as a JSON number);
- ``alerts``: the ``Alerts`` process function keeps each sensor's previous temperature
  in value state and emits an alert to ``sensor-alerts`` when a reading is more than
  ``RISE_C`` degrees above the previous one;
- ``minute-means``: on event time (the reading's ``timestamp``, out of order by up to
  ``BOUND_MS``), the mean temperature per sensor and 1-minute tumbling window, with
  ``LATENESS_MS`` of allowed lateness; later readings go to ``late-readings``. A result is
  ``sensor id → {"start", "end", "value": mean}`` with timestamp ``end - 1``.

``build_pipeline(suffix)`` builds the same pipeline with the suffix appended to the
service name and every topic name (the demo uses a fresh suffix per run); ``pipeline``
is the deployed service. Run it with ``fw run services.sensors.pipeline:pipeline``.
"""

from __future__ import annotations

from typing import Any

from framework.pipeline import Pipeline, ProcessContext, ProcessFunction, Topic
from framework.serde import AvroSerde, StringSerde, load_schema
from framework.time import WatermarkStrategy
from framework.windows import TumblingWindows

RISE_C = 5.0  # an alert when a reading exceeds the sensor's previous one by more than this
WINDOW_MS = 60_000
BOUND_MS = 5_000  # readings arrive at most this much after later ones
LATENESS_MS = 10_000


class Alerts(ProcessFunction):
    """Per sensor: an alert when the temperature rose more than ``RISE_C`` since the
    previous reading."""

    def open(self, ctx: ProcessContext) -> None:
        self.previous = ctx.value_state("previous")  # the sensor's last temperature

    def process(self, key: Any, value: Any, ctx: ProcessContext) -> None:
        temperature = value["temperature"]
        previous = self.previous.get()
        if previous is not None and temperature - previous > RISE_C:
            ctx.emit({
                "id": key,
                "timestamp": value["timestamp"],
                "previous": previous,
                "temperature": temperature,
                "rise": round(temperature - previous, 3),
            })
        self.previous.set(temperature)


def build_pipeline(suffix: str = "") -> Pipeline:
    """The sensors pipeline; ``suffix`` is appended to the service and topic names."""
    p = Pipeline(f"sensors{suffix}")
    readings = p.source(Topic(f"readings{suffix}", key_serde=StringSerde(),
                              value_serde=AvroSerde(load_schema("sensor.Reading"))),
                        watermarks=WatermarkStrategy.bounded_out_of_orderness(BOUND_MS, timestamp="timestamp"))
    by_sensor = readings.key_by(lambda r: r["id"], name="by-sensor")
    means = by_sensor.mean(lambda r: r["temperature"], name="mean-temperature")
    means.to(Topic(f"sensor-means{suffix}"))
    by_sensor.process(Alerts(), name="alerts").to(Topic(f"sensor-alerts{suffix}"))
    (
        by_sensor.window(TumblingWindows(WINDOW_MS), allowed_lateness_ms=LATENESS_MS, late=f"late-readings{suffix}")
        .aggregate(_no_readings, _add_reading, merge=_merge_sums, result=_mean, name="minute-means")
        .to(Topic(f"sensor-minute-means{suffix}"))
    )
    return p


def _no_readings() -> tuple[float, int]:
    return (0.0, 0)


def _add_reading(acc: tuple[float, int], reading: dict[str, Any]) -> tuple[float, int]:
    return (acc[0] + reading["temperature"], acc[1] + 1)


def _merge_sums(a: tuple[float, int], b: tuple[float, int]) -> tuple[float, int]:
    return (a[0] + b[0], a[1] + b[1])


def _mean(acc: tuple[float, int]) -> float:
    return acc[0] / acc[1]


pipeline = build_pipeline()
