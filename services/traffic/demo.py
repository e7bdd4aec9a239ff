"""The traffic demo for ``fw demo --service traffic``.

Input: vehicles crossing a few intersections over about an hour of event time, in time
order, each intersection with its own rate; at one random moment per intersection its
traffic falls to a tenth for 15 minutes (an accident). Check: the 5-minute counts and
the accident alerts equal a direct computation over the input, restricted to the windows
the final watermark closed (end at most the last crossing's time - ``BOUND_MS``).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from typing import Any

from framework.demos import InputRecord, OutputRecord, ServiceDemo
from services.traffic.pipeline import (
    ACCIDENTS,
    BOUND_MS,
    COUNTS,
    INPUT,
    SLIDE_MS,
    SLIDING_MS,
    WINDOW_MS,
    is_sharp_drop,
)

T0 = 1_699_999_800_000
INTERSECTIONS = 4
HOUR_MS = 3_600_000


def generate(records: int, seed: int) -> list[InputRecord]:
    """About ``records`` crossings over an hour, an accident at each intersection."""
    rng = random.Random(seed)
    crossings: list[tuple[int, str]] = []
    for i in range(INTERSECTIONS):
        name, per_ms = f"x-{i}", records / INTERSECTIONS / HOUR_MS
        accident = rng.randrange(10 * 60_000, HOUR_MS - 20 * 60_000)
        at = 0.0
        while True:
            slowed = accident <= at < accident + 15 * 60_000
            at += rng.expovariate(per_ms / 10 if slowed else per_ms)
            if at >= HOUR_MS:
                break
            crossings.append((T0 + int(at), name))
    crossings.sort()
    return [(name, {"intersection": name, "timestamp": ts, "vehicle": f"v{n}"}, ts)
            for n, (ts, name) in enumerate(crossings)]


def expected(inputs: list[InputRecord]) -> dict[tuple[str, str], list[Any]]:
    """Per (output, intersection): the closed 5-minute counts, and the accidents over the
    closed sliding-window counts in the order of their ends."""
    closed_until = max(ts for _, _, ts in inputs) - BOUND_MS
    tumbling: Counter[tuple[str, int]] = Counter()
    sliding: Counter[tuple[str, int]] = Counter()
    for name, _crossing, ts in inputs:
        tumbling[(name, ts - ts % WINDOW_MS)] += 1
        last_start = ts - ts % SLIDE_MS
        for start in range(last_start - SLIDING_MS + SLIDE_MS, last_start + 1, SLIDE_MS):
            sliding[(name, start)] += 1
    out: dict[tuple[str, str], list[Any]] = {}
    for (name, start), n in sorted(tumbling.items()):
        if start + WINDOW_MS <= closed_until:
            out.setdefault(("counts", name), []).append((start, n))
    previous: dict[str, int] = {}
    for (name, start), n in sorted(sliding.items()):
        if start + SLIDING_MS <= closed_until:
            if is_sharp_drop(previous.get(name), n):
                out.setdefault(("accidents", name), []).append((start, n, previous[name]))
            previous[name] = n
    return out


def observe(outputs: Mapping[str, list[OutputRecord]]) -> dict[tuple[str, str], list[Any]]:
    out: dict[tuple[str, str], list[Any]] = {}
    for name, c in outputs[COUNTS]:
        out.setdefault(("counts", name), []).append((c["start"], c["value"]))
    for name, a in outputs[ACCIDENTS]:
        out.setdefault(("accidents", name), []).append((a["start"], a["vehicles"], a["previous_vehicles"]))
    return out


DEMO = ServiceDemo(source=INPUT, outputs=(COUNTS, ACCIDENTS), generate=generate, expected=expected,
                   observe=observe, what="the 5-minute counts and accident alerts per intersection",
                   partitions=1)
