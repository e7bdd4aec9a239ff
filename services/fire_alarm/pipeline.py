"""Fire alarm: per location, an alert when smoke follows a high temperature within 10 minutes.

Reads ``sensor-events`` (JSON ``{"location", "kind": "temperature" | "smoke", "celsius",
"ts"}``, keyed by location; event time from ``ts``, out of order by up to ``BOUND_MS``).
The ``FireAlarm`` process function keeps the time of the location's last high temperature
(above ``HOT_C``) in value state, with an event-time timer ``WITHIN_MS`` later that
forgets it; smoke while it is remembered sends an alert to ``fire-alarms``. The pending
timer is state: it survives restarts and fires once.

Run it with ``fw run services.fire_alarm.pipeline:pipeline``.
"""

from __future__ import annotations

from typing import Any

from framework.pipeline import Pipeline, ProcessContext, ProcessFunction, Topic
from framework.time import WatermarkStrategy

HOT_C = 50.0
WITHIN_MS = 10 * 60_000
BOUND_MS = 30_000


class FireAlarm(ProcessFunction):
    """Per location: remember a high temperature for ``WITHIN_MS``; smoke meanwhile alerts."""

    def open(self, ctx: ProcessContext) -> None:
        self.hot_at = ctx.value_state("hot_at")  # event time of the last high temperature

    def process(self, key: Any, value: Any, ctx: ProcessContext) -> None:
        if value["kind"] == "temperature" and value["celsius"] > HOT_C:
            self.hot_at.set(ctx.timestamp)
            ctx.register_event_timer(ctx.timestamp + WITHIN_MS)
        elif value["kind"] == "smoke":
            hot_at = self.hot_at.get()
            if hot_at is not None and 0 <= ctx.timestamp - hot_at <= WITHIN_MS:
                ctx.emit({"location": key, "hot_at": hot_at, "smoke_at": ctx.timestamp})

    def on_timer(self, timestamp: int, key: Any, ctx: ProcessContext) -> None:
        hot_at = self.hot_at.get()
        if hot_at is not None and hot_at + WITHIN_MS <= timestamp:
            self.hot_at.clear()  # too old now; a newer high temperature has its own timer


def build_pipeline(suffix: str = "") -> Pipeline:
    """The fire-alarm pipeline; ``suffix`` is appended to the service and topic names."""
    p = Pipeline(f"fire-alarm{suffix}")
    events = p.source(Topic(f"sensor-events{suffix}"),
                      watermarks=WatermarkStrategy.bounded_out_of_orderness(BOUND_MS, timestamp="ts"))
    events.process(FireAlarm(), name="fire-alarm").to(Topic(f"fire-alarms{suffix}"))
    return p


pipeline = build_pipeline()
