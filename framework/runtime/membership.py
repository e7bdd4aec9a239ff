"""A member's place in its group, asked of the cluster outside the hot loop.

Two questions the group's own protocol does not answer for a member:

- ``refuse_a_taken_instance_id``, before a static member joins: does a healthy member hold
  its instance id already? Joining would fence that member (the group gives a static id to
  the newest member), and the broker would go on showing the fenced member's client id, so
  its endpoint, to ``fw status``.
- ``unheld_backlog``, when a member holding no partition has consumed nothing for the stall
  warning's time: do records wait in partitions that no member of the group holds? Then
  nobody processes them, and the member is not healthy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from framework.errors import KafkaClientError, RuntimeProblem
from framework.kafka.clients import TP, GroupConsumer
from framework.kafka.groups import held_partitions, static_member
from framework.observe.endpoint import StatusUnavailable, fetch_status, parse_client_id

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
