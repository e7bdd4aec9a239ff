"""The click-sessions demo for ``fw demo --service click-sessions``.

Input: clicks of a few users in event-time order, 0 to 30 s apart, with an occasional
break of 35 to 60 minutes that ends everyone's session. Check: the sessions per user equal
the sessions computed directly (clicks less than ``GAP_MS`` apart form one), restricted
to those the final watermark closed (end at most the last click's time - ``BOUND_MS``).
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Mapping

from framework.demos import InputRecord, OutputRecord, ServiceDemo
from services.click_sessions.pipeline import BOUND_MS, GAP_MS, INPUT, OUTPUT

T0 = 1_700_000_000_000
USERS = 6
Session = tuple[int, int, int, int]  # start, end, clicks, duration_ms


def generate(records: int, seed: int) -> list[InputRecord]:
    rng = random.Random(seed)
    at, out = T0, []
    for _ in range(records):
        at += rng.randint(35, 60) * 60_000 if rng.random() < 0.02 else rng.randint(0, 30_000)
        user = f"user-{rng.randrange(USERS)}"
        out.append((user, {"user": user, "timestamp": at, "page": f"/p{rng.randrange(20)}"}, at))
    return out


def expected(inputs: list[InputRecord]) -> dict[str, list[Session]]:
    """Per user, sessions of clicks less than GAP_MS apart, as closed by the final watermark."""
    times: dict[str, list[int]] = defaultdict(list)
    for user, _click, ts in inputs:
        times[user].append(ts)
    closed_until = max(ts for _, _, ts in inputs) - BOUND_MS
    sessions: dict[str, list[Session]] = {}
    for user, stamps in times.items():
        groups: list[list[int]] = []
        for t in sorted(stamps):
            if groups and t - groups[-1][-1] < GAP_MS:
                groups[-1].append(t)
            else:
                groups.append([t])
        closed = [(g[0], g[-1] + GAP_MS, len(g), g[-1] - g[0]) for g in groups if g[-1] + GAP_MS <= closed_until]
        if closed:
            sessions[user] = closed
    return sessions


def observe(outputs: Mapping[str, list[OutputRecord]]) -> dict[str, list[Session]]:
    sessions: dict[str, list[Session]] = defaultdict(list)
    for user, s in outputs[OUTPUT]:
        sessions[user].append((s["start"], s["end"], s["value"]["clicks"], s["value"]["duration_ms"]))
    return {user: sorted(found) for user, found in sessions.items()}


DEMO = ServiceDemo(source=INPUT, outputs=(OUTPUT,), generate=generate, expected=expected, observe=observe,
                   what="the sessions per user (start, end, clicks, duration)", partitions=1)
