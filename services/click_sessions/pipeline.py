"""Click sessions: per user, sessions closed by ``GAP_MS`` of inactivity, with clicks and duration.

Reads ``click-sessions-clicks`` (key: the user id; value: Avro ``click_sessions.Click``
with ``user``, ``timestamp`` in ms and ``page``). Event time is the click's ``timestamp``;
clicks arrive out of order by at most ``BOUND_MS``. Per user, the ``sessions`` step keeps
one accumulator (clicks, first and last click time) per event-time session window: clicks
less than ``GAP_MS`` apart are one session, and a click that bridges two sessions merges
them. Once the watermark passes a session's end (its last click + ``GAP_MS``) it writes
Avro ``click_sessions.Session`` (``start`` = first click, ``end`` = last click + gap,
``value``: ``clicks`` and ``duration_ms`` = last click - first click) with timestamp
``end - 1`` to ``click-sessions-sessions``. A click later than that (no allowed lateness)
goes to ``click-sessions-late``; one that does not decode goes to the dead-letter topic
``click-sessions-dead-letter``. A session's state is dropped once it fired.

``build_pipeline(suffix)`` appends ``suffix`` to the service and topic names (tests and
demos use a fresh one). Run it with ``fw run services.click_sessions.pipeline:pipeline``.
"""

from __future__ import annotations

from typing import Any

from framework import (
    AvroSerde,
    Pipeline,
    SessionWindows,
    StringSerde,
    Topic,
    WatermarkStrategy,
    load_schema,
)

SERVICE = "click-sessions"
INPUT = f"{SERVICE}-clicks"
OUTPUT = f"{SERVICE}-sessions"
LATE = f"{SERVICE}-late"
GAP_MS = 30 * 60_000  # a session ends after this long without a click
BOUND_MS = 5_000  # a click arrives at most this much after a later one


def no_clicks() -> dict[str, Any]:
    """A session's accumulator before its first click."""
    return {"clicks": 0, "first_at": None, "last_at": None}


def add_click(acc: dict[str, Any], click: dict[str, Any]) -> dict[str, Any]:
    """The accumulator with one more click (a new dict: state values are not mutated)."""
    at = click["timestamp"]
    return {"clicks": acc["clicks"] + 1,
            "first_at": at if acc["first_at"] is None else min(acc["first_at"], at),
            "last_at": at if acc["last_at"] is None else max(acc["last_at"], at)}


def merge_sessions(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two sessions bridged by a click, as one."""
    firsts = [t for t in (a["first_at"], b["first_at"]) if t is not None]
    lasts = [t for t in (a["last_at"], b["last_at"]) if t is not None]
    return {"clicks": a["clicks"] + b["clicks"], "first_at": min(firsts, default=None),
            "last_at": max(lasts, default=None)}


def session_stats(acc: dict[str, Any]) -> dict[str, int]:
    """What a fired session reports: its clicks and its duration, first to last click."""
    return {"clicks": acc["clicks"], "duration_ms": acc["last_at"] - acc["first_at"]}


def build_pipeline(suffix: str = "") -> Pipeline:
    """The click-sessions pipeline; ``suffix`` is appended to the service and topic names."""
    p = Pipeline(f"{SERVICE}{suffix}")
    click_serde = AvroSerde(load_schema("click_sessions.Click"))
    clicks = p.source(
        Topic(f"{INPUT}{suffix}", key_serde=StringSerde(), value_serde=click_serde),
        watermarks=WatermarkStrategy.bounded_out_of_orderness(BOUND_MS, timestamp="timestamp"),
        name="clicks",
    )
    (
        clicks.window(SessionWindows(GAP_MS),
                      late=Topic(f"{LATE}{suffix}", key_serde=StringSerde(), value_serde=click_serde))
        .aggregate(no_clicks, add_click, merge=merge_sessions, result=session_stats, name="sessions")
        .to(Topic(f"{OUTPUT}{suffix}", key_serde=StringSerde(),
                  value_serde=AvroSerde(load_schema("click_sessions.Session"))), name="to-sessions")
    )
    return p


pipeline = build_pipeline()
