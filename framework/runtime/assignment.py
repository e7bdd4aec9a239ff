"""A member's share of its group: the input partitions the group gave it, and what the member
does when the group changes them (the consumer's callbacks), when a partition's restore ends,
and when a recovery starts every task again from its last checkpoint."""

from __future__ import annotations

import logging
from collections.abc import Callable

from framework.engine.runner import TaskRunner
from framework.kafka.clients import TP, GroupConsumer
from framework.runtime.checkpoint import Checkpointer
from framework.runtime.hold import Holds
from framework.runtime.membership import StallWatch
from framework.runtime.restore import Restorer
from framework.runtime.standby import Standby

log = logging.getLogger("framework.runtime")


class Assignment:
    """The partitions member ``instance`` holds, and its tasks' lifecycle as they come and go:
    started on assignment (after their state is restored from the changelogs, with their inputs
    paused meanwhile), checkpointed and stopped on revocation, dropped uncommitted when lost."""

    def __init__(self, instance: str, runner: TaskRunner, restorer: Restorer, consumer: GroupConsumer,
                 checkpointer: Checkpointer, holds: Holds, standby: Standby | None, *,
                 recovering: Callable[[], bool], publish: Callable[[], None], timeout_s: float) -> None:
        self.instance, self.runner, self.restorer, self.consumer = instance, runner, restorer, consumer
        self.checkpointer, self.holds, self.standby = checkpointer, holds, standby
        self.recovering, self.publish, self.timeout_s = recovering, publish, timeout_s
        self.assigned: set[TP] = set()
        self.has_assignment = False  # the group gave this member its first assignment (since a loss)
        self.rejoining = False  # it lost its partitions and has no assignment again yet
        self.rebalances = {"assigned": 0, "revoked": 0, "lost": 0}
        self.stall: StallWatch | None = None  # told when an assignment ends a member's idleness

    def on_assign(self, tps: list[TP]) -> list[TP]:
        """Start the new partitions' tasks, or their restores; returns the input partitions
        to hold paused until their restore is done (``restored`` resumes them)."""
        self.assigned |= set(tps)
        self.holds.disturb(f"partitions {sorted(tps)} assigned to member {self.instance}")
        self.has_assignment, self.rejoining = True, False
        if self.stall is not None:
            self.stall.idle_with_lag = None
        self.rebalances["assigned"] += 1
        numbers = sorted({p for _, p in tps} - set(self.runner.tasks) - set(self.restorer.pending))
        log.info("assigned partitions %s", numbers)
        if numbers:
            if self.standby is not None:
                self.standby.release(numbers)  # their copies become the start of the restore
            self.restorer.start(numbers)  # those with nothing to restore start at once
        if self.standby is not None:
            self.standby.refresh_soon()
        self.publish()
        if self.holds.held is not None:
            return list(tps)  # held: none of them is processed until the release
        return [tp for tp in tps if tp[1] in self.restorer.pending]

    def on_revoke(self, tps: list[TP]) -> None:
        """Commit what was processed, then stop the revoked partitions' tasks."""
        log.info("revoking %s", sorted({p for _, p in tps}))
        self.holds.disturb(f"partitions {sorted(tps)} revoked from member {self.instance}")
        self.rebalances["revoked"] += 1
        self.checkpointer.checkpoint("revoke")
        self._drop(tps)
        self.publish()

    def on_lost(self, tps: list[TP]) -> None:
        """The group moved on without us (a session that timed out, an outage): nothing of
        ours may commit; the recovery settles the interval (no broker call here: the cluster
        may be away)."""
        # an outage, or a broken interval, is said once: a loss while the member recovers is part of it
        level = logging.INFO if self.recovering() else logging.WARNING
        log.log(level, "partitions lost %s (the group's session timed out, or the group removed this member): the "
                "open interval is dropped, and processed again by whoever gets them", sorted({p for _, p in tps}))
        self.rebalances["lost"] += 1
        self.has_assignment, self.rejoining = False, True  # not ready until the group assigns again
        self.holds.disturb(f"partitions {sorted(tps)} lost by member {self.instance}")
        self._drop(tps)
        self.checkpointer.break_interval("partitions lost", said=True)  # said above: the recovery's line is INFO

    def restored(self, partition: int) -> None:
        """Called by the restorer when every store of ``partition`` is at the changelog end."""
        self.runner.start(partition)
        if self.holds.held is None:  # held: the release resumes it
            self.consumer.resume([tp for tp in self.assigned if tp[1] == partition])
        log.info("partition %d restored and running", partition)
        self.publish()

    def restart(self) -> None:
        """Every task as after a crash (a recovery's reset): stopped, restarted from its stores
        and restored from its changelogs' committed tails, every input rewound to its
        committed offset."""
        parts = sorted({p for _, p in self.assigned})
        for p in parts:
            self.restorer.cancel(p)
            self.runner.stop(p)
        self.restorer.start(parts)
        self.consumer.pause(tp for tp in self.assigned if tp[1] in self.restorer.pending)
        self.consumer.rewind_to_committed(self.assigned, self.timeout_s)

    def task_state(self, tp: TP) -> str:
        return ("running" if self.runner.running(tp) else "restoring" if tp[1] in self.restorer.pending
                else "no task")

    def active_tasks(self) -> set[int]:
        """The tasks this member runs, restores or is assigned: never standbys."""
        return {p for _, p in self.assigned} | set(self.runner.tasks) | set(self.restorer.pending)

    def _drop(self, tps: list[TP]) -> None:
        self.assigned -= set(tps)
        kept = {p for _, p in self.assigned}
        for p in {p for _, p in tps} - kept:
            self.restorer.cancel(p)
            self.runner.stop(p)
        if self.standby is not None:
            self.standby.refresh_soon()
