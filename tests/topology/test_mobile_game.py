"""The mobile game (PROPERTIES.md): a player who pops 500 bubbles within one minute levels up.

One player rides a subway tunnel: her pops from the middle of a minute on reach the game
three minutes late, when her phone gets a signal again. On event time (bound five minutes)
every level-up is the same as when everybody stays connected. On processing time her pops
fall into the windows of the minutes they arrive in, and she does not level up.

The TestDriver's wall clock moves only by ``advance_wall_clock``: every pop arrives at a
chosen wall-clock time, so the processing-time runs are deterministic too.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Literal

import pytest

from framework import Pipeline, TestDriver, Topic, TumblingWindows, WatermarkStrategy

SEC, MIN = 1000, 60_000
BASE = 28_333_334 * MIN  # a whole minute, in November 2023
BOUND = 5 * MIN
LEVEL_UP = 500
TUNNEL_IN, DELAY = BASE + 2 * MIN + 30 * SEC, 3 * MIN


@dataclass(frozen=True)
class Pop:
    player: str
    ts: int  # when the bubble was popped
    arrival: int  # when the game server receives it (its wall-clock time)


def game(clock: Literal["event", "processing"]) -> Pipeline:
    """Pops per player per minute; a minute with at least 500 is a level-up."""
    p = Pipeline("game")
    watermarks = WatermarkStrategy.bounded_out_of_orderness(BOUND, timestamp="ts") if clock == "event" else None
    pops = p.source(Topic("pops"), watermarks=watermarks)
    per_minute = pops.window(TumblingWindows(MIN, clock=clock)).count(name="per-minute")
    per_minute.to(Topic("minutes"))
    per_minute.filter(lambda r: r["value"] >= LEVEL_UP, name="level-up").to(Topic("level-ups"))
    return p


def pops_in(player: str, minute: int, n: int, rng: random.Random, start_s: int = 0, end_s: int = 60) -> list[int]:
    lo, hi = BASE + minute * MIN + start_s * SEC, BASE + minute * MIN + end_s * SEC
    return sorted(rng.randrange(lo, hi) for _ in range(n))


def session(tunnel: bool) -> list[Pop]:
    """Everybody's pops. Alice pops 250 before and 250 after entering the tunnel in minute 2;
    with ``tunnel`` the latter arrive three minutes late, at once."""
    rng = random.Random(2024)
    stamps = {
        "alice": pops_in("alice", 2, 250, rng, 0, 30) + pops_in("alice", 2, 250, rng, 30, 60),
        "bob": pops_in("bob", 1, 520, rng) + pops_in("bob", 3, 300, rng) + pops_in("bob", 6, 510, rng),
        "carol": pops_in("carol", 2, 499, rng) + pops_in("carol", 4, 600, rng),
        "dave": [ts for m in range(8) for ts in pops_in("dave", m, 120, rng)],
    }
    pops = [Pop(player, ts, ts) for player, tss in stamps.items() for ts in tss]
    if tunnel:
        pops = [Pop(p.player, p.ts, TUNNEL_IN + DELAY if p.player == "alice" and p.ts >= TUNNEL_IN else p.arrival)
                for p in pops]
    return sorted(pops, key=lambda p: (p.arrival, p.ts))


def expected_level_ups(pops: list[Pop]) -> set[tuple[str, int]]:
    """(player, minute start) of every minute of event time with >= 500 pops."""
    per_minute = Counter((p.player, p.ts - p.ts % MIN) for p in pops)
    return {w for w, n in per_minute.items() if n >= LEVEL_UP}


def level_ups(d: TestDriver) -> set[tuple[str, int]]:
    return {(r.key, r.value["start"]) for r in d.output("level-ups")}


def minutes(d: TestDriver) -> Counter[tuple[str, int]]:
    return Counter({(r.key, r.value["start"]): r.value["value"] for r in d.output("minutes")})


def play_event_time(pops: list[Pop], partitions: int) -> TestDriver:
    d = TestDriver(game("event"), partitions=partitions)
    for p in pops:
        d.pipe("pops", {"ts": p.ts}, key=p.player)
    d.advance_watermark(BASE + 60 * MIN)
    return d


def play_processing_time(pops: list[Pop], partitions: int) -> TestDriver:
    """Each pop is piped when the wall clock reads its arrival time (to the second)."""
    d = TestDriver(game("processing"), partitions=partitions, wall_clock_ms=BASE)
    for p in pops:
        arrival = p.arrival - p.arrival % SEC  # the same minute: a second's pops come together
        if arrival > d.wall_clock_ms:
            d.advance_wall_clock(arrival - d.wall_clock_ms)
        d.pipe("pops", {"ts": p.ts}, key=p.player)
    d.advance_wall_clock(10 * MIN)  # every minute window closes on the wall clock
    return d


@pytest.mark.parametrize("partitions", [1, 2])
def test_on_event_time_the_tunnel_changes_no_level_up(partitions: int) -> None:
    connected, tunnel = session(tunnel=False), session(tunnel=True)
    expected = expected_level_ups(connected)
    assert ("alice", BASE + 2 * MIN) in expected and len(expected) == 4  # alice, bob twice, carol
    d_connected = play_event_time(connected, partitions)
    d_tunnel = play_event_time(tunnel, partitions)
    assert level_ups(d_connected) == level_ups(d_tunnel) == expected
    assert minutes(d_connected) == minutes(d_tunnel) == Counter((p.player, p.ts - p.ts % MIN) for p in connected)
    assert d_tunnel.metrics().get("late_records.per-minute", 0) == 0  # 3 minutes late, bound 5: on time
    for r in d_tunnel.output("level-ups"):
        assert r.timestamp == r.value["end"] - 1


@pytest.mark.parametrize("partitions", [1, 2])
def test_on_processing_time_the_tunnel_costs_alice_her_level_up(partitions: int) -> None:
    connected, tunnel = session(tunnel=False), session(tunnel=True)
    expected = expected_level_ups(connected)
    # Connected, arrival is event time, so processing time agrees...
    assert level_ups(play_processing_time(connected, partitions)) == expected
    # ...through the tunnel, alice's minute is split over two minutes of arrival.
    d = play_processing_time(tunnel, partitions)
    assert level_ups(d) == expected - {("alice", BASE + 2 * MIN)}
    alice = {start: n for (player, start), n in minutes(d).items() if player == "alice"}
    assert alice == {BASE + 2 * MIN: 250, TUNNEL_IN + DELAY - (TUNNEL_IN + DELAY) % MIN: 250}
