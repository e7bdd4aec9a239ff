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
fatal → stop with the error. The checkpointer sees the runner, the producer and the consumer
through the narrow protocols below, never the service.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from framework.engine.runner import TaskRunner
from framework.errors import FatalKafkaError
from framework.kafka.clients import TP, classify
from framework.runtime.faults import crash_point

log = logging.getLogger("framework.checkpoint")
_RETRIES = 5


class TransactionalOutput(Protocol):
    """The process's producer, as the checkpoint uses it (``KafkaOutput``)."""

    def init_transactions(self, timeout_s: float) -> None: ...
    def begin(self) -> None: ...
    def flush(self, timeout_s: float) -> None: ...
    def send_offsets(self, positions: Mapping[TP, int], group_metadata: Any, timeout_s: float) -> None: ...
    def commit(self, timeout_s: float) -> None: ...
    def abort(self, timeout_s: float) -> None: ...
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
        self.on_checkpoint: Callable[[float], None] = lambda duration_s: None

    def start(self) -> None:
        if self.exactly_once:
            self.output.init_transactions(self.timeout_s)
            self.output.begin()
        self.next_due = time.monotonic() + self.interval_s

    def maybe_checkpoint(self) -> None:
        if time.monotonic() >= self.next_due:
            self.checkpoint("interval")

    def checkpoint(self, reason: str) -> None:
        self.next_due = time.monotonic() + self.interval_s
        if not self.dirty:
            self.committed_as_of = time.time()  # nothing new since the last one: all committed
            return
        started = time.monotonic()
        positions = self.consumer.positions()
        try:
            changelog_records = self.runner.checkpoint(positions, self)        # 1-5
        except _Abort as abort:
            self.abort(str(abort))
            return
        self._begin()                                                           # 6
        self.dirty = False
        self.completed += 1
        self.last_completed_at = self.committed_as_of = time.time()
        self.last_duration_s = time.monotonic() - started
        self.on_checkpoint(self.last_duration_s)
        log.debug("checkpoint %d (%s): %d changelog records, positions %s, %.1f ms", self.completed,
                  reason, changelog_records, positions, self.last_duration_s * 1000)

    def commit(self, positions: Mapping[TP, int]) -> Mapping[TP, int]:
        """Steps 2-4 (the runner's ``CheckpointSink``): flush, then offsets and outputs
        committed together; the changelog offsets the state write records."""
        self._call(lambda: self.output.flush(self.timeout_s))                     # 2
        crash_point("after_flush")
        if self.exactly_once:
            metadata = self.consumer.group_metadata()
            self._call(lambda: self.output.send_offsets(positions, metadata, self.timeout_s))  # 3
            self._call(lambda: self.output.commit(self.timeout_s))                # 4
        else:
            self._call(lambda: self.consumer.commit(positions))
        return self.output.take_changelog_ends()

    def _call(self, fn: Callable[[], None]) -> None:
        for attempt in range(_RETRIES):
            try:
                fn()
                return
            except Exception as exc:  # noqa: BLE001 - classified right here
                verdict = classify(exc)
                if verdict == "fatal":
                    raise FatalKafkaError(
                        f"checkpoint failed fatally ({exc}); another instance with transactional.id "
                        f"'{self.transactional_id}' may have fenced this one: give every process its own "
                        "--instance-id"
                    ) from exc
                if verdict == "abort" or attempt == _RETRIES - 1:
                    raise _Abort(f"{exc}") from exc
                log.warning("checkpoint call failed (retriable, attempt %d): %s", attempt + 1, exc)
                time.sleep(0.1 * (attempt + 1))

    def abort(self, why: str = "") -> None:
        """Abort the open transaction; forget its state writes; rewind to the committed offsets."""
        log.warning("aborting the checkpoint interval%s", f": {why}" if why else "")
        if self.exactly_once:
            try:
                self.output.abort(self.timeout_s)
            except Exception as exc:  # noqa: BLE001
                if classify(exc) == "fatal":
                    raise FatalKafkaError(f"abort_transaction failed: {exc}") from exc
        self.runner.abort()
        assigned = self.consumer.assigned()
        self.consumer.rewind_to_committed([tp for tp in self.runner.routes if tp in assigned], self.timeout_s)
        self.aborted += 1
        self.dirty = False
        self._begin()

    def abandon(self) -> None:
        """The process is stopping on an error: abort the interval and commit nothing more."""
        if self.exactly_once:
            try:
                self.output.abort(self.timeout_s)
            except Exception as exc:  # noqa: BLE001 - stopping anyway; the broker aborts on timeout
                log.warning("abort on failure: %s", exc)
        self.runner.discard()
        self.dirty = False
        self.next_due = float("inf")

    def _begin(self) -> None:
        if self.exactly_once:
            self.output.begin()


class _Abort(Exception):
    """The interval's transaction must be aborted."""
