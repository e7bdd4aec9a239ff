"""The member's round: one turn of its loop, as a list of participants.

Flink's task thread runs one loop over a mailbox: processing input is the default action, and
everything else comes in between. A member's round is the same (``Service._loop``): it takes
the input (consume a batch, process it, records held past a deadline first), and around it
each concern of the member is a *participant* with one small interface:

- ``wait_s(now)``: how long the round may wait for input before this participant must run
  again: 0 when it has work now, ``inf`` when it does not mind;
- ``run(now, idle)``: its share of the round, after the input (``idle``: the round's consume
  returned nothing); True when the open interval gained something a checkpoint must commit
  (``Round`` marks the interval at once, so a checkpoint later in the round includes it).

A participant that must have the whole round when it acts (a recovery after an outage, a hold
for a savepoint) is a ``Takeover``: ``take(now)`` runs its round and says True, or says False
and the round goes on. A new concern is one more object in ``Round``'s lists, not a branch of
the loop. The participants in this module are the small ones; the recovery's is
``framework.runtime.outage``, the hold's ``framework.runtime.hold``, the stall watch's
``framework.runtime.membership``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from framework.engine.runner import TaskRunner
from framework.kafka.clients import TP, GlobalReader, GroupConsumer
from framework.runtime.checkpoint import Checkpointer
from framework.runtime.restore import Restorer
from framework.runtime.standby import Standby

log = logging.getLogger("framework.runtime")
_STANDBY_BATCH = 5_000  # changelog records a standby applies per round, at most
_STANDBY_WAIT_S = 0.01  # how long a round waits for them when the input is idle: what it adds to latency


class Participant(Protocol):
    def wait_s(self, now: float) -> float: ...
    def run(self, now: float, idle: bool) -> bool: ...


class Takeover(Protocol):
    def take(self, now: float) -> bool: ...


class Round:
    """What a round does besides the input, in order: ``takeovers`` first (the first that
    takes the round ends it), then, after the input, each participant; ``changed`` marks the
    open interval as having something to commit."""

    def __init__(self, takeovers: Sequence[Takeover], participants: Sequence[Participant],
                 changed: Callable[[], None]) -> None:
        self.takeovers, self.participants, self.changed = tuple(takeovers), tuple(participants), changed

    def taken(self, now: float) -> bool:
        return any(t.take(now) for t in self.takeovers)

    def wait_s(self, now: float, longest: float) -> float:
        """How long the round may wait for input: at most ``longest``."""
        return max(min(longest, *(p.wait_s(now) for p in self.participants)), 0.0)

    def run(self, now: float, idle: bool) -> None:
        for p in self.participants:
            if p.run(now, idle):
                self.changed()


class Restoring:
    """Restores of assigned tasks from their changelogs advance a step each round, and the
    input is not waited for meanwhile (their reads wait)."""

    def __init__(self, restorer: Restorer) -> None:
        self.restorer = restorer

    def wait_s(self, now: float) -> float:
        return 0.0 if self.restorer.busy else math.inf

    def run(self, now: float, idle: bool) -> bool:
        if self.restorer.busy:
            self.restorer.step()
        return False


class Copying:
    """Warm standby copies follow their changelogs; while one is behind, the round waits for
    its records (briefly) rather than for the input."""

    def __init__(self, standby: Standby) -> None:
        self.standby = standby

    def wait_s(self, now: float) -> float:
        return 0.0 if self.standby.behind else math.inf

    def run(self, now: float, idle: bool) -> bool:
        standby = self.standby
        behind = standby.behind
        standby.maybe_refresh(now)
        if standby.busy:
            standby.step(_STANDBY_BATCH, _STANDBY_WAIT_S if behind and idle else 0)
        return False


class GlobalUpdates:
    """The global tables: read whole at start (``read_whole``), then what arrives, each round;
    an update may release joins waiting for the tables' watermarks."""

    def __init__(self, runner: TaskRunner, reader: GlobalReader, batch: int) -> None:
        self.runner, self.reader, self.batch = runner, reader, batch

    def read_whole(self, partitions: dict[str, int], timeout_s: float) -> None:
        """Every global table to the ends its partitions have now, from where its store left off."""
        tables = self.runner.globals
        starts: dict[TP, int | None] = {}
        for table in tables.tables.values():
            topic = table.step.topic.name
            table.set_partitions(partitions[topic])
            starts.update({(topic, p): table.positions.get(p) for p in range(partitions[topic])})
        self.reader.assign(starts)
        began = time.monotonic()

        def apply(batch: list[Any]) -> None:
            self.runner.apply_global(batch)
            tables.commit()  # batch by batch: a large table is not held in the write cache whole

        n = self.reader.catch_up(list(starts), apply, timeout_s)
        log.info("global tables %s: read %d records in %.1f s before processing", ", ".join(tables.tables), n,
                 time.monotonic() - began)

    def wait_s(self, now: float) -> float:
        return math.inf

    def run(self, now: float, idle: bool) -> bool:
        updates = self.reader.poll(self.batch)
        if not updates:
            return False
        self.runner.apply_global(updates)  # may release joins waiting for the tables
        return True


class CallResults:
    """Async steps' calls that completed: their results go out in this interval."""

    def __init__(self, runner: TaskRunner) -> None:
        self.runner = runner

    def wait_s(self, now: float) -> float:
        return math.inf

    def run(self, now: float, idle: bool) -> bool:
        if not self.runner.complete():
            return False
        self.runner.end_batch()  # a watermark they let through goes downstream in this interval
        return True


class Backpressure:
    """An input partition whose async step is full stops being fetched (paused) until the step
    has taken its held records, so what waits for the step is one batch in the member and the
    rest in Kafka, as lag; a savepoint hold's pause is left to the hold."""

    def __init__(self, runner: TaskRunner, consumer: GroupConsumer, held_for_savepoint: Callable[[], bool]) -> None:
        self.runner, self.consumer, self.held_for_savepoint = runner, consumer, held_for_savepoint
        self.paused: set[TP] = set()

    def wait_s(self, now: float) -> float:
        return math.inf

    def run(self, now: float, idle: bool) -> bool:
        full = self.runner.full
        if not (full or self.paused) or self.held_for_savepoint():
            return False
        # a partition revoked meanwhile was resumed with its release, a savepoint's release resumed
        # every one: only what is still paused counts as paused here
        self.paused &= self.consumer.paused
        if full - self.paused:
            self.consumer.pause(full - self.paused)
        if self.paused - full:
            self.consumer.resume(self.paused - full)
        self.paused = set(full)
        return False


class Ticking:
    """On the watermark interval: idleness, processing-time timers, periodic watermarks; on
    the observation interval: the observer's look (``observe``)."""

    def __init__(self, runner: TaskRunner, tick_s: float, observe: Callable[[], None] | None,
                 observe_s: float) -> None:
        self.runner, self.tick_s, self.observe, self.observe_s = runner, tick_s, observe, observe_s
        self.next_tick = 0.0
        self.next_observe = time.monotonic() + observe_s if observe is not None else math.inf

    def wait_s(self, now: float) -> float:
        return math.inf

    def run(self, now: float, idle: bool) -> bool:
        if now < self.next_tick:
            return False
        self.next_tick = now + self.tick_s
        dirty = self.runner.tick()
        if now >= self.next_observe:
            self.next_observe = now + self.observe_s
            assert self.observe is not None
            self.observe()
        return dirty


class Checkpointing:
    """The checkpoint, last in the round once it is due; the input is not waited for past it
    (a batch that does not fill would hold what it has, and the checkpoint after it)."""

    def __init__(self, checkpointer: Checkpointer) -> None:
        self.checkpointer = checkpointer

    def wait_s(self, now: float) -> float:
        return self.checkpointer.next_due - now

    def run(self, now: float, idle: bool) -> bool:
        self.checkpointer.maybe_checkpoint()
        return False
