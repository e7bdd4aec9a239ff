"""The checkpoint: one linear, numbered procedure (see docs/architecture.md, section 5).

exactly_once:
  1. produce the write caches' changes to the changelogs (outputs are already in the txn);
  2. flush: every delivery report is in, so the changelog offsets are known;
  3. send_offsets_to_transaction(positions, consumer_group_metadata());
  4. commit_transaction();
  5. write each cache to RocksDB with its changelog offset (one WriteBatch per store);
  6. begin_transaction() for the next interval.
at_least_once: 1, 2, then commit the offsets with the consumer, then 5.

A transactional error is classified as confluent-kafka documents it: retriable → retry the
call; requires abort → abort, drop the caches, rewind the inputs to the committed offsets;
fatal → stop with the error.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING


from framework.errors import FatalKafkaError
from framework.kafka.clients import TP, classify
from framework.runtime.faults import crash_point

if TYPE_CHECKING:
    from framework.runtime.service import Service

log = logging.getLogger("framework.checkpoint")
_RETRIES = 5


class Checkpointer:
    def __init__(self, service: Service, interval_s: float, timeout_s: float) -> None:
        self.svc = service
        self.interval_s = interval_s
        self.timeout_s = timeout_s  # bounds every transactional call, so a revoke ends in time
        self.next_due = 0.0
        self.dirty = False
        self.completed = 0
        self.aborted = 0
        self.last_duration_s = 0.0
        self.last_completed_at = 0.0

    def start(self) -> None:
        if self.svc.exactly_once:
            self.svc.output.init_transactions(self.timeout_s)
            self.svc.output.begin()
        self.next_due = time.monotonic() + self.interval_s

    def maybe_checkpoint(self) -> None:
        if time.monotonic() >= self.next_due:
            self.checkpoint("interval")

    def checkpoint(self, reason: str) -> None:
        self.next_due = time.monotonic() + self.interval_s
        if not self.dirty:
            return
        started = time.monotonic()
        try:
            changelog_records = self._produce_changelogs()                # 1
            crash_point("after_changelogs")
            self._call(lambda: self.svc.output.flush(self.timeout_s))          # 2
            crash_point("after_flush")
            positions = self._positions()
            if self.svc.exactly_once:
                metadata = self.svc.consumer.group_metadata()
                self._call(lambda: self.svc.output.send_offsets(positions, metadata, self.timeout_s))  # 3
                self._call(lambda: self.svc.output.commit(self.timeout_s))     # 4
            else:
                self._call(lambda: self.svc.consumer.commit(positions))
            crash_point("after_commit")
            self._write_state()                                            # 5
            crash_point("after_state_write")
        except _Abort as abort:
            self.abort(str(abort))
            return
        self._begin()                                                      # 6
        self.dirty = False
        self.completed += 1
        self.last_completed_at = time.time()
        self.last_duration_s = time.monotonic() - started
        log.debug("checkpoint %d (%s): %d changelog records, positions %s, %.1f ms", self.completed,
                  reason, changelog_records, positions, self.last_duration_s * 1000)

    # -- steps ---------------------------------------------------------------------------

    def _produce_changelogs(self) -> int:
        positions = self._positions()
        n = 0
        for p, task in self.svc.tasks.items():
            mine = {f"{t}[{q}]": o for (t, q), o in positions.items() if q == p}
            n += task.produce_changelogs(mine)
        return n

    def _positions(self) -> dict[TP, int]:
        """Next offsets of the running tasks' inputs (restoring partitions have none)."""
        return {tp: o for tp, o in self.svc.consumer.positions().items() if tp in self.svc.routes}

    def _write_state(self) -> None:
        ends = self.svc.output.take_changelog_ends()
        for p, task in self.svc.tasks.items():
            task.commit_state({t: o for (t, q), o in ends.items() if q == p})

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
                        f"'{self.svc.pipeline.name}-{self.svc.instance_id}' may have fenced this one: "
                        "give every process its own --instance-id"
                    ) from exc
                if verdict == "abort" or attempt == _RETRIES - 1:
                    raise _Abort(f"{exc}") from exc
                log.warning("checkpoint call failed (retriable, attempt %d): %s", attempt + 1, exc)
                time.sleep(0.1 * (attempt + 1))

    def abort(self, why: str = "") -> None:
        """Abort the open transaction; forget its state writes; rewind to the committed offsets."""
        svc = self.svc
        log.warning("aborting the checkpoint interval%s", f": {why}" if why else "")
        if svc.exactly_once:
            try:
                svc.output.abort(self.timeout_s)
            except Exception as exc:  # noqa: BLE001
                if classify(exc) == "fatal":
                    raise FatalKafkaError(f"abort_transaction failed: {exc}") from exc
        for task in svc.tasks.values():
            task.discard_state()
        svc.rebuild_tasks()
        svc.consumer.rewind_to_committed(list(svc.routes), self.timeout_s)
        self.aborted += 1
        self.dirty = False
        self._begin()

    def abandon(self) -> None:
        """The process is stopping on an error: abort the interval and commit nothing more."""
        if self.svc.exactly_once:
            try:
                self.svc.output.abort(self.timeout_s)
            except Exception as exc:  # noqa: BLE001 - stopping anyway; the broker aborts on timeout
                log.warning("abort on failure: %s", exc)
        for task in self.svc.tasks.values():
            task.discard_state()
        self.dirty = False
        self.next_due = float("inf")

    def _begin(self) -> None:
        if self.svc.exactly_once:
            self.svc.output.begin()


class _Abort(Exception):
    """The interval's transaction must be aborted."""
