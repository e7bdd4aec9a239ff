"""A member's place in its group, asked of the cluster outside the hot loop.

Two questions the group's own protocol does not answer for a member:

- ``refuse_a_taken_instance_id``, before a static member joins: does a healthy member hold
  its instance id already? Joining would fence that member (the group gives a static id to
  the newest member), and the broker would go on showing the fenced member's client id, so
  its endpoint, to ``fw status``.
- ``unheld_backlog``, when a member holding no partition has consumed nothing for the stall
  warning's time: do records wait in partitions that no member of the group holds? Then
  nobody processes them, and the member is not healthy.

``StallWatch``, a participant of the member's round, asks the second, and says where every
waiting partition stands when nothing has been consumed for a while although records wait.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from framework.errors import KafkaClientError, RuntimeProblem
from framework.kafka.clients import TP, GroupConsumer
from framework.kafka.groups import held_partitions, static_member
from framework.observe.endpoint import StatusUnavailable, fetch_status, parse_client_id

log = logging.getLogger("framework.runtime")
_HOLDER_TIMEOUT_S = 3.0  # how long the holder of a static instance id has to answer /status
_SHOWN = 8  # partitions named in the message


def refuse_a_taken_instance_id(admin: Any, group: str, instance_id: str, client_id: str | None) -> None:
    """Raise ``RuntimeProblem`` when a healthy member of ``group`` holds ``instance_id``. A
    holder that does not answer (a member restarted after a crash: its predecessor is gone)
    or answers unhealthy (one that hangs) is replaced as usual, and so is one the cluster
    cannot tell about: the broker's fence stays the backstop."""
    try:
        holder = static_member(admin, group, instance_id)
    except KafkaClientError:
        return
    if holder is None or holder[0] == client_id:
        return
    endpoint = parse_client_id(holder[0], group, holder[1]).endpoint
    if endpoint is None:
        return
    try:
        status = fetch_status(endpoint, _HOLDER_TIMEOUT_S)
    except StatusUnavailable:
        return
    # The endpoint the holder advertised may answer for someone else now: the holder died and
    # another service's member (of this instance id too, say "0") took its freed port.
    if status.get("service") != group:
        return
    member = next((m for m in status.get("members") or [] if isinstance(m, dict)), {})
    if member.get("healthy") is True and str(member.get("instance")) == instance_id:
        raise RuntimeProblem(
            f"instance id {instance_id!r} of service {group!r} is taken: a healthy member runs with it at "
            f"{endpoint} (pid {member.get('pid')}), and joining would fence it. Fix: give this process another "
            "--instance-id, or stop that member first")


def unheld_backlog(admin: Any, consumer: GroupConsumer, group: str, inputs: Sequence[TP]) -> str | None:
    """What waits in ``inputs`` partitions that no member of ``group`` holds, in words, or
    None (nothing waits there, a rebalance is under way, or the cluster does not say)."""
    try:
        held = held_partitions(admin, group)
    except KafkaClientError:
        return None
    if held is None:
        return None
    lag = consumer.group_lag(tp for tp in inputs if tp not in held)
    if not lag:
        return None
    shown = ", ".join(f"{t}[{p}] {n}" for (t, p), n in sorted(lag.items())[:_SHOWN])
    return (f"this member holds no partition of group {group!r}, and {sum(lag.values())} records wait in "
            f"partitions no member holds ({shown})")


class StallWatch:
    """A participant of the member's round (``framework.runtime.round``): when nothing was
    consumed for ``stall_s`` although records wait, one WARNING says where every waiting
    partition stands; a member holding no partition checks whether records wait where no
    member of its group reads (``idle_with_lag``: then it is not healthy)."""

    def __init__(self, stall_s: float, group: str, consumer: GroupConsumer, admin: Any, *,
                 inputs: Callable[[], Sequence[TP]], assigned: Callable[[], set[TP]],
                 task_state: Callable[[TP], str], checkpoints: Callable[[], tuple[int, int]],
                 quiet_until: Callable[[], float]) -> None:
        """``inputs()``: every input partition of the service; ``task_state(tp)``: "running",
        "restoring" or "no task"; ``checkpoints()``: (completed, aborted); ``quiet_until()``:
        before then nothing was consumed on purpose (a recovery's rounds)."""
        self.stall_s, self.group, self.consumer, self.admin = stall_s, group, consumer, admin
        self.inputs, self.assigned, self.task_state, self.checkpoints, self.quiet_until = \
            inputs, assigned, task_state, checkpoints, quiet_until
        self.warnings = 0
        self.idle_with_lag: str | None = None  # why this member, holding nothing, cannot be healthy
        self.next_check = time.monotonic() + stall_s

    def wait_s(self, now: float) -> float:
        return math.inf

    def run(self, now: float, idle: bool) -> bool:
        if not idle:
            self.next_check = now + self.stall_s
        elif now >= self.next_check:
            self.next_check = now + self.stall_s
            self.check()
        return False

    def check(self) -> None:
        """Nothing consumed for ``stall_s``: if records are waiting, say where everything stands."""
        if time.monotonic() - self.quiet_until() < self.stall_s:
            return
        waiting = self.consumer.backlog()
        if not waiting:
            if not self.assigned():
                self._check_idle_with_lag()
            return
        self.warnings += 1
        parts = []
        for tp, (pos, end) in sorted(waiting.items())[:_SHOWN]:
            stable = self.consumer.stable_end(tp)
            held = (f", held at offset {stable} by a transaction still open upstream"
                    if stable is not None and stable <= pos else "")
            parts.append(f"{tp[0]}[{tp[1]}] at offset {pos} of {end} ("
                         f"{'paused' if tp in self.consumer.paused else 'fetching'}, {self.task_state(tp)}{held})")
        if len(waiting) > _SHOWN:
            parts.append(f"and {len(waiting) - _SHOWN} more partitions")
        completed, aborted = self.checkpoints()
        log.warning("no input record for %.0f s although records are waiting: %s; checkpoints: "
                    "%d completed, %d aborted. A transaction open upstream holds read_committed "
                    "consumers until it commits or aborts (transaction.timeout.ms of its producer); "
                    "otherwise see the client log for broker errors", self.stall_s, "; ".join(parts),
                    completed, aborted)

    def _check_idle_with_lag(self) -> None:
        """This member holds no partition: if records wait where no member of its group reads,
        nobody processes them, and this member is not healthy (/health 503) until the group
        gives it some."""
        self.idle_with_lag = unheld_backlog(self.admin, self.consumer, self.group, self.inputs())
        if self.idle_with_lag:
            self.warnings += 1
            log.warning("%s: the group does not give them to this member. See fw status %s; a member the group "
                        "no longer counts (past max.poll.interval.ms, fenced) is restarted with its process",
                        self.idle_with_lag, self.group)
