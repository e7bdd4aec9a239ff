"""The checkpoint of a Kafka service: the task runner's procedure over a Kafka transaction.

exactly_once (docs/architecture.md, section 5; the runner does 1 and 5, ``KafkaCommit`` 2-4):
  1. produce the write caches' changes to the changelogs (outputs are already in the txn);
  2. flush: every delivery report is in, so the changelog offsets are known;
  3. send_offsets_to_transaction(positions, consumer_group_metadata());
  4. commit_transaction();
  5. write each cache to RocksDB with its changelog offset (one WriteBatch per store);
  6. begin_transaction() for the next interval.
at_least_once: 1, 2, then commit the offsets with the consumer, then 5.

A transactional error is classified as confluent-kafka documents it: retriable → retry the
call; requires abort → abort, drop the caches, rewind the inputs to the committed offsets;
fatal → stop with the error. A producer fenced is not fatal at first: a coordinator that moved
(a broker restarted) fences it as a newer producer would, so it is a broken interval (below),
and only the third fence within ``_FENCE_WINDOW_S`` stops the member as fenced, unless the
group says this process holds the member's instance id (``holds_instance``): of two processes
started with one id, the one the group registered last goes on, the other stops. A call whose
outcome is unknown (it timed out: the cluster may be away) or a producer librdkafka gave up on
is neither: the interval is *broken*, nothing more of it commits, and ``on_broken`` hands the
member to its recovery (``framework.runtime.outage``), which settles the interval with a new
producer and goes on from the last checkpoint, as after a crash. The checkpointer sees the runner, the producer
and the consumer through the narrow protocols below, never the service.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from framework.engine.runner import TaskRunner
from framework.errors import FatalKafkaError, FencedError, FrameworkError, RuntimeProblem
from framework.kafka.clients import TP, ProducerFailed, classify, epoch_fenced, hidden
from framework.runtime.faults import crash_point

log = logging.getLogger("framework.checkpoint")
PHASES = ("state", "flush", "offsets", "commit")  # the parts of a checkpoint timed (``phases_ms``)
_RETRIES = 5
_LEAST_S = 1.0  # the least time a checkpoint's call is given, however little of its bound is left
_ABANDON_ABORT_S = 5.0
# Fences that stop the member: this many within the window. One is what a broker restart
# (a transaction coordinator or group coordinator moving) can do; another process taking the
# member's transactional id fences it again after every recovery.
_FENCE_LIMIT = 3
_FENCE_WINDOW_S = 300.0


class TransactionalOutput(Protocol):
    """The process's producer, as the checkpoint uses it (``KafkaOutput``)."""

    def init_transactions(self, timeout_s: float) -> None: ...
    def begin(self) -> None: ...
    def flush(self, timeout_s: float) -> None: ...
    def send_offsets(self, positions: Mapping[TP, int], group_metadata: Any, timeout_s: float) -> None: ...
    def commit(self, timeout_s: float) -> None: ...
    def abort(self, timeout_s: float) -> None: ...
    def renew(self) -> None: ...
    def take_changelog_ends(self) -> dict[TP, int]: ...


class GroupPositions(Protocol):
    """The group member's consumer, as the checkpoint uses it (``GroupConsumer``)."""

    def positions(self) -> dict[TP, int]: ...
    def assigned(self) -> set[TP]: ...
    def group_metadata(self) -> Any: ...
    def commit(self, positions: Mapping[TP, int]) -> None: ...
    def rewind_to_committed(self, tps: Iterable[TP], timeout_s: float) -> None: ...


class Checkpointer:
    """Takes the service's checkpoints: on its interval, on revoke and on shutdown."""

    def __init__(self, runner: TaskRunner, output: TransactionalOutput, consumer: GroupPositions, *,
                 exactly_once: bool, interval_s: float, timeout_s: float, transactional_id: str | None) -> None:
        self.runner, self.output, self.consumer = runner, output, consumer
        self.exactly_once = exactly_once
        self.interval_s = interval_s
        self.timeout_s = timeout_s  # bounds every transactional call, so a revoke ends in time
        self.transactional_id = transactional_id
        self.next_due = 0.0
        self.dirty = False
        self.completed = 0
        self.aborted = 0
        self.last_duration_s = 0.0
        self.last_completed_at = 0.0
        self.committed_as_of = time.time()  # everything processed before this is committed
        self.broken: str | None = None  # why the open interval can commit nothing more
        self.began_at = time.monotonic()  # when the open interval (its transaction) began
        # seconds spent in each part of the completed checkpoints, summed (``phases_ms``): where a
        # checkpoint's time goes, which bounds how short an interval can be
        self.phase_totals_s = dict.fromkeys(PHASES, 0.0)
        self._interval_phases = dict.fromkeys(PHASES, 0.0)
        self.on_checkpoint: Callable[[float], None] = lambda duration_s: None
        self.on_broken: Callable[..., None] = lambda why, said=False: None  # (why, said=...)
        self._fences: list[float] = []  # when the producer was fenced (``_fence``)
        # whether the group's member with this member's static instance id is this process (None:
        # it cannot tell), asked at a third fence (``_fence``)
        self.holds_instance: Callable[[], bool | None] = lambda: None

    def start(self) -> None:
        if self.exactly_once:
            self.output.init_transactions(self.timeout_s)
        self._begin()
        self.next_due = time.monotonic() + self.interval_s

    def maybe_checkpoint(self) -> None:
        if time.monotonic() >= self.next_due:
            self.checkpoint("interval")

    def checkpoint(self, reason: str) -> None:
        self.next_due = time.monotonic() + self.interval_s
        if self.broken is not None:
            return  # the recovery settles the interval; nothing of it may commit meanwhile
        if not self.dirty:
            self.committed_as_of = time.time()  # nothing new since the last one: all committed
            self.began_at = time.monotonic()  # nor in the transaction: it begins with the next write
            return
        started = time.monotonic()
        self._interval_phases = dict.fromkeys(PHASES, 0.0)  # commit() times its calls into it
        positions = self.consumer.positions()
        try:
            changelog_records = self.runner.checkpoint(positions, self)        # 1-5
        except ProducerFailed as exc:
            self.producer_failed(exc)
            return
        except _Abort as abort:
            self.abort(str(abort))
            return
        except _Broken as broken:
            self.break_interval(str(broken))
            return
        self._begin()                                                           # 6
        self.dirty = False
        self.completed += 1
        self.last_completed_at = self.committed_as_of = time.time()
        self.last_duration_s = time.monotonic() - started
        calls = self._interval_phases
        calls["state"] = max(self.last_duration_s - sum(v for k, v in calls.items() if k != "state"), 0.0)
        for phase, took in calls.items():
            self.phase_totals_s[phase] += took
        self.on_checkpoint(self.last_duration_s)
        log.debug("checkpoint %d (%s): %d changelog records, positions %s, %.1f ms", self.completed,
                  reason, changelog_records, positions, self.last_duration_s * 1000)

    def commit(self, positions: Mapping[TP, int]) -> Mapping[TP, int]:
        """Steps 2-4 (the runner's ``CheckpointSink``): flush, then offsets and outputs
        committed together; the changelog offsets the state write records."""
        took = self._interval_phases = dict.fromkeys(PHASES, 0.0)
        at = time.perf_counter()
        # the calls share one bound, retries included: chained, each at its own bound, they could
        # hold the loop (and a revoke) for minutes while the cluster lacks a quorum
        deadline = time.monotonic() + self.timeout_s
        self._call(lambda left: self.output.flush(left), deadline)                # 2
        crash_point("after_flush")
        took["flush"], at = time.perf_counter() - at, time.perf_counter()
        if self.exactly_once:
            metadata = self.consumer.group_metadata()
            self._call(lambda left: self.output.send_offsets(positions, metadata, left), deadline)  # 3
            took["offsets"], at = time.perf_counter() - at, time.perf_counter()
            self._call(lambda left: self.output.commit(left), deadline)           # 4
        else:
            self._call(lambda left: self.consumer.commit(positions), deadline)
        took["commit"] = time.perf_counter() - at
        return self.output.take_changelog_ends()

    def phases_ms(self) -> dict[str, float]:
        """The mean milliseconds of each part of a completed checkpoint: ``state`` (the write
        caches to the changelogs, then to RocksDB: steps 1 and 5, with 6), ``flush`` (every
        delivery report in: step 2), ``offsets`` (send_offsets_to_transaction: 3) and ``commit``
        (commit_transaction, or the consumer's commit at-least-once: 4)."""
        n = self.completed or 1
        return {phase: round(total * 1000 / n, 2) for phase, total in self.phase_totals_s.items()}

    def _call(self, fn: Callable[[float], None], deadline: float) -> None:
        """``fn(seconds left)``, retried while its error is retriable and ``deadline`` is not
        past (each attempt gets at least ``_LEAST_S``); what it raises, classified."""
        for attempt in range(_RETRIES):
            try:
                fn(max(deadline - time.monotonic(), _LEAST_S))
                return
            except RuntimeProblem:
                raise  # what the cluster lacks (a topic it writes to is gone): no retry or producer helps
            except Exception as exc:  # classified right here
                inner = hidden(exc)
                if inner is not exc and isinstance(inner, FrameworkError):
                    raise inner from None  # a callback's own error (a fence's line), surfacing hidden here
                verdict = classify(exc)
                if verdict == "fatal":
                    raise _Broken(self._fenced_why(exc)) from exc
                if verdict == "reset" or (verdict == "retry" and (attempt == _RETRIES - 1
                                                                 or time.monotonic() >= deadline)):
                    raise _Broken(f"{exc}") from exc  # its outcome unknown: a new producer settles it
                if verdict == "abort":
                    raise _Abort(f"{exc}") from exc
                log.debug("checkpoint call failed (retriable, attempt %d): %s", attempt + 1, exc)
                time.sleep(0.1 * (attempt + 1))

    def producer_failed(self, exc: ProducerFailed) -> None:
        """A record the producer refused while the interval was processed or written, because
        the producer failed fatally: as a checkpoint call that failed so (``_call``), a fence is
        a broken interval unless it is the third within ``_FENCE_WINDOW_S``; another fatal error
        a new producer can settle breaks it too; what none can is raised."""
        self.break_interval(self._fenced_why(exc) if classify(exc) == "fatal" else f"the producer failed: {exc}")

    def _fenced_why(self, exc: Exception) -> str:
        """Why the interval breaks for the fatal ``exc``, a fence a new producer settles; raises
        the one line when no new producer can (``_fatal``)."""
        if not self._fence(exc):
            raise self._fatal(exc) from exc
        return (f"the producer was fenced ({hidden(exc)}), as a transaction coordinator that moved (a broker "
                "restarting) does")

    def _fence(self, exc: Exception) -> bool:
        """Whether a fence ``exc`` is taken as a broken interval (a new producer goes on from
        the last checkpoint): not when it is the third within ``_FENCE_WINDOW_S``."""
        if not (self.exactly_once and epoch_fenced(exc)):
            return False
        now = time.monotonic()
        self._fences = [t for t in self._fences if now - t < _FENCE_WINDOW_S] + [now]
        if len(self._fences) < _FENCE_LIMIT:
            return True  # the recovery says it, in one WARNING
        if self.holds_instance() is True:
            log.warning("the producer was fenced %d times within %.0f s, but the group's member with this "
                        "member's instance id is this process: another process with that id (which the group "
                        "fenced) or moving coordinators fenced it; going on", len(self._fences), _FENCE_WINDOW_S)
            self._fences = [now]
            return True
        return False

    def _fatal(self, exc: Exception) -> FatalKafkaError:
        inner = hidden(exc)
        text = inner.args[0].str() if inner.args and hasattr(inner.args[0], "str") else str(inner)
        if epoch_fenced(exc) or "fenced" in text.lower():
            times = f", {len(self._fences)} times within {_FENCE_WINDOW_S:.0f} s" if self._fences else ""
            return FencedError(
                f"the producer with transactional id {self.transactional_id!r} was fenced ({text}){times}: "
                "another process runs with the same service and --instance-id, or this one holds transactions "
                "open longer than kafka.transaction_timeout_ms. Fix: give every member its own --instance-id")
        return FatalKafkaError(f"the cluster refused the checkpoint: {text}")

    def abort(self, why: str = "") -> None:
        """Abort the open transaction; forget its state writes; rewind to the committed offsets.
        An abort that cannot complete breaks the interval instead (``break_interval``)."""
        if self.broken is not None:
            return  # the recovery settles it
        log.warning("aborting the checkpoint interval%s", f": {why}" if why else "")
        if self.exactly_once:
            try:
                self.output.abort(self.timeout_s)
            except Exception as exc:
                if classify(exc) == "fatal" and not self._fence(exc):
                    raise self._fatal(exc) from exc  # else fenced: a new producer settles it (below)
                self.break_interval(f"the abort failed: {exc}")
                return
        self.runner.abort()
        assigned = self.consumer.assigned()
        self.consumer.rewind_to_committed([tp for tp in self.runner.routes if tp in assigned], self.timeout_s)
        self.aborted += 1
        self.dirty = False
        self._begin()

    def break_interval(self, why: str, *, said: bool = False) -> None:
        """Nothing more of the open interval commits: ``on_broken`` recovers the member
        (``said``: the caller has logged why already)."""
        if self.broken is None:
            self.broken = why
            self.aborted += 1
            self.on_broken(why, said=said)

    def renew(self) -> None:
        """The recovery's step for the producer: a new one, its transactions initialised (which
        settles the broken interval's); ``resume`` begins the next interval. Raises what fails
        (the cluster still away: the recovery asks again)."""
        self.output.renew()
        if self.exactly_once:
            self.output.init_transactions(self.timeout_s)

    def resume(self) -> None:
        """The recovery is done: the tasks are as of the last checkpoint, the inputs rewound."""
        self.broken = None
        self.dirty = False
        self._begin()
        self.committed_as_of = time.time()
        self.next_due = time.monotonic() + self.interval_s

    def abandon(self) -> None:
        """The process is stopping on an error: abort the interval and commit nothing more.
        The abort is a courtesy (a restarted member's producer aborts it too), so it is
        skipped when the producer is broken and bounded by a few seconds otherwise."""
        if self.exactly_once and self.broken is None:
            try:
                self.output.abort(min(self.timeout_s, _ABANDON_ABORT_S))
            except Exception as exc:  # noqa: BLE001 - stopping anyway; the broker aborts on timeout
                log.debug("abort on failure: %s", exc)
        self.runner.discard()
        self.dirty = False
        self.next_due = float("inf")

    def _begin(self) -> None:
        self.began_at = time.monotonic()
        if self.exactly_once:
            self.output.begin()


class _Abort(Exception):
    """The interval's transaction must be aborted."""


class _Broken(Exception):
    """The interval's outcome is unknown, or its producer unusable: a new producer settles it."""
