"""A member whose checkpoint broke, or whose cluster is away: wait, then go on as after a crash.

A checkpoint breaks when a transactional call's outcome is unknown (it timed out: every
broker may be down), when librdkafka gives up on the producer, or when the group takes the
member's partitions away (``framework.runtime.checkpoint``). The member then keeps its
process, its local state and its HTTP endpoint, processes nothing, and ``Recovery`` runs in
its loop's place (``RecoveryRound``, a takeover of the member's round), one short ``step`` per
round:

1. ask the cluster for metadata (at most once a second): while it does not answer, wait, for
   at most ``processing.broker_outage_timeout_ms`` from the start of the outage; past that the
   member stops with one line (``FatalKafkaError``);
2. once it answers, ``reset`` the member: a new producer whose ``init_transactions`` settles
   the broken interval (completed if its commit had reached the coordinator, aborted
   otherwise), every task restarted from its stores and restored from the changelogs'
   committed tails, the inputs rewound to the group's committed offsets. A step that fails
   because the cluster went away again is asked again from 1.

So what the interval processed is processed again from the last committed positions, and
each output and state change is committed once (docs/operations.md, "Outages"). One WARNING
says when the outage (or the broken checkpoint) starts, one line when the member goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from framework.errors import FatalKafkaError, OutageTooLong
from framework.kafka.clients import classify, client_error
from framework.kafka.logs import Transport

log = logging.getLogger("framework.runtime")
_ASK_EVERY_S = 1.0  # how often an absent cluster is asked for metadata
_PROBE_TIMEOUT_S = 1.0


class Recovery:
    """Brings a member back after a broken checkpoint or an outage (module docstring)."""

    def __init__(self, probe: Callable[[float], str | None], reset: Callable[[], None], *,
                 timeout_s: float, where: str) -> None:
        """``probe(timeout_s)``: None when the cluster answers, else why not. ``reset()``: the
        member as after a crash (raises what fails while the cluster is still away).
        ``where``: the cluster's address, for the log."""
        self.probe, self.reset = probe, reset
        self.timeout_s = timeout_s
        self.where = where
        self.active = False
        self.unreachable = False  # the cluster did not answer: an outage, not only a broken interval
        self.why = ""
        self.since = 0.0
        self.ended_at = -float("inf")  # monotonic seconds of the last recovery's end
        self._said = False  # the start of this recovery was logged
        self._cause_said = False  # its cause was logged by the member before it began
        self._next_ask = 0.0

    def begin(self, why: str, since: float | None = None, *, said: bool = False) -> None:
        """Start recovering (``since``: when the trouble began, if known before now; ``said``:
        the member has logged the cause already, the recovery's own line is INFO)."""
        if self.active:
            return
        self.active, self.unreachable, self._said, self.why = True, False, False, why
        self._cause_said = said
        self.since = since if since is not None else time.monotonic()
        self._next_ask = 0.0

    def suspect(self, down_since: float) -> bool:
        """A client reported every broker connection down at ``down_since``: ask the cluster
        once; True (and recovering) when it does not answer."""
        reason = self.probe(_PROBE_TIMEOUT_S)
        if reason is None:
            return False
        self.begin(f"every broker connection is down ({reason})", since=down_since)
        self._outage_starts(reason)
        return True

    def step(self) -> bool:
        """One round of the recovery; True once the member may process again."""
        now = time.monotonic()
        if now < self._next_ask:
            return False
        self._next_ask = now + _ASK_EVERY_S
        reason = self.probe(_PROBE_TIMEOUT_S)
        if reason is not None:
            self._outage_starts(reason)
            self._check_deadline(reason)
            return False
        if not self._said:  # the cluster answers: a broken interval, not an outage
            self._said = True
            log.log(logging.INFO if self._cause_said else logging.WARNING,
                    "the checkpoint interval could not complete (%s): continuing from the last checkpoint "
                    "with a new producer", self.why)
        try:
            self.reset()
        except Exception as exc:
            if not client_error(exc) or isinstance(exc, FatalKafkaError) or classify(exc) == "fatal":
                raise
            log.debug("recovery: the cluster answered, then %s; asking again", exc)
            self._check_deadline(str(exc))
            return False
        self._done()
        return True

    def _outage_starts(self, reason: str) -> None:
        if self.unreachable:
            return
        self.unreachable = self._said = True
        Transport.quiet = True  # the clients' own lines say the same, again and again
        log.warning("the Kafka cluster at %s cannot be reached (%s): waiting for it, for at most %.0f s "
                    "(processing.broker_outage_timeout_ms); nothing is processed meanwhile, and processing "
                    "continues from the last checkpoint when it answers", self.where, reason, self.timeout_s)

    def _check_deadline(self, reason: str) -> None:
        waited = time.monotonic() - self.since
        if waited > self.timeout_s:
            raise OutageTooLong(
                f"the Kafka cluster at {self.where} could not be reached for {waited:.0f} s ({reason}), longer "
                f"than processing.broker_outage_timeout_ms ({self.timeout_s * 1000:.0f}). Fix: bring the brokers "
                "back; the member continues from its last checkpoint when it is started again (raise "
                "FW_PROCESSING__BROKER_OUTAGE_TIMEOUT_MS to wait longer)")

    def _done(self) -> None:
        took = time.monotonic() - self.since
        if self.unreachable:
            log.info("the Kafka cluster at %s answers again after %.1f s: processing continues from the last "
                     "checkpoint", self.where, took)
        else:
            log.info("recovered in %.1f s: processing continues from the last checkpoint", took)
        Transport.quiet = False
        self.active, self.unreachable = False, False
        self.ended_at = time.monotonic()


class RecoveryRound:
    """The recovery's takeover of the member's round (``framework.runtime.round``): while the
    member recovers from a broken checkpoint or waits for its cluster, the round is the
    recovery's. The consumer is still polled (it keeps the membership and serves rebalances);
    the records it returns are dropped, as the recovery's reset rewinds every input to its
    committed offset, and the errors it returns are judged as the member's round judges them
    (a consumer fenced by another process with its instance id ends the member: its reset
    could never succeed, as the partitions it seeks are no longer its own). A client that lost
    every broker connection starts a recovery once the cluster does not answer either."""

    def __init__(self, recovery: Recovery, checkpointer: Any, output: Any, consumer: Any, batch: int, *,
                 heartbeat: Callable[[float], None], publish: Callable[[], None]) -> None:
        self.recovery, self.checkpointer, self.output, self.consumer, self.batch = \
            recovery, checkpointer, output, consumer, batch
        self.heartbeat, self.publish = heartbeat, publish
        self._next_publish = 0.0

    def take(self, now: float) -> bool:
        rec = self.recovery
        if not rec.active:
            down = self.output.connectivity.down_since or self.consumer.connectivity.down_since
            if down is None:
                return False
            if not rec.suspect(down):  # the clients lost their connections, but the cluster answers
                self.output.connectivity.clear()
                self.consumer.connectivity.clear()
                return False
            self.checkpointer.break_interval("the cluster cannot be reached")
        now = time.monotonic()
        self.heartbeat(now)
        if now >= self._next_publish:  # /ready and /status say that the member recovers
            self._next_publish = now + 1.0
            self.publish()
        for msg in self.consumer.consume(self.batch, 0.1):
            if msg.error() is not None:  # a fatal one ends the member here, as in its own round
                self.consumer.check_error(msg.error())
        if rec.step():
            self.publish()
        return True
