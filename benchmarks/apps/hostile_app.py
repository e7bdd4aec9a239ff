"""The slow pipeline of ``benchmarks/hostile.py``: far more input than it can take at once.

JSON records ``{"i": n}`` keyed by ``k<n % 1000>`` from ``BENCH_HX_INPUT`` go through a step
that sleeps ``BENCH_HX_STEP_US`` microseconds per record (the slowest step, which the intake
must settle to), then to ``BENCH_HX_OUTPUT`` (one output per input) and into a count per key
to ``BENCH_HX_OUTPUT-counts`` (state with a changelog). Service name ``BENCH_HX_GROUP``.
Run with ``python -m framework.cli run benchmarks.apps.hostile_app:pipeline``.
"""

from __future__ import annotations

import os
import time
from typing import Any

from framework import JsonSerde, Pipeline, StringSerde, Topic


def _slow(step_s: float) -> Any:
    def step(value: Any) -> Any:
        time.sleep(step_s)
        return value

    return step


def pipeline() -> Pipeline:
    env = os.environ
    p = Pipeline(env["BENCH_HX_GROUP"])
    src = p.source(Topic(env["BENCH_HX_INPUT"], key_serde=StringSerde(), value_serde=JsonSerde(), partitions=4),
                   name="in")
    slow = src.map(_slow(int(env.get("BENCH_HX_STEP_US", "100")) / 1e6), name="slow")
    slow.to(Topic(env["BENCH_HX_OUTPUT"], key_serde=StringSerde(), partitions=4), name="to-out")
    slow.count(name="counts").to(Topic(f"{env['BENCH_HX_OUTPUT']}-counts", partitions=4), name="to-counts")
    return p
