"""``fw status SERVICE``: a running service as its members see it.

The broker's view comes from ``framework.ops.groups.describe_group`` (members, client ids,
hosts, assigned partitions, committed and end offsets, lag). Each member advertises its
status endpoint in its consumer's ``client.id`` as ``<service>-<instance>@<host>:<port>``
(docs/observability.md), ``<host>`` empty when it binds every interface: then the member's
address as the broker reports it (``/10.0.0.5``) is used (``framework.observe.endpoint``
reads both). Every member's ``/status`` is
asked concurrently with a short timeout; a member whose endpoint does not answer keeps the
broker's view and says why (``error``), never an exception.

``rows`` and ``member_lines`` turn a ``ServiceStatus`` into what the table shows, with
plain values: ``framework.cli.status`` formats and prints them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from framework.kafka.inspect import Member
from framework.observe.endpoint import (
    Advertised,
    StatusUnavailable,
    broker_host,
    fetch_status,
    parse_client_id,
)
from framework.ops.groups import GroupView, describe_group
from framework.pipeline.definition import Pipeline

TP = tuple[str, int]
NOT_ANSWERING = "endpoint not answering"
DEFAULT_TIMEOUT_S = 2.0

Fetch = Callable[[str, float], Mapping[str, Any]]  # (endpoint, timeout_s) -> the /status document


@dataclass(frozen=True)
class MemberStatus:
    """One group member: the broker's view of it and, when its endpoint answered, its own
    ``/status`` member entry."""

    instance: str
    client_id: str
    host: str  # as the broker sees it, without the slash
    endpoint: str | None
    partitions: list[TP]  # assigned by the group
    status: Mapping[str, Any] | None
    error: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"instance": self.instance, "client_id": self.client_id, "host": self.host,
                "endpoint": self.endpoint,
                "partitions": [{"topic": t, "partition": p} for t, p in self.partitions],
                "status": self.status, "error": self.error}


@dataclass(frozen=True)
class ServiceStatus:
    service: str
    view: GroupView
    members: list[MemberStatus]

    @property
    def running(self) -> bool:
        return bool(self.members)

    @property
    def lag(self) -> int:
        """The broker's lag (committed offsets to ends) over every input partition."""
        return sum(r.lag for r in self.view.partitions)

    def as_dict(self) -> dict[str, Any]:
        broker = self.view.as_dict()
        return {"service": self.service,
                "members": [m.as_dict() for m in self.members],
                "lag": {"group": broker["group"], "state": broker["state"], "total": self.lag,
                        "partitions": broker["partitions"]}}


def _member_entry(document: Mapping[str, Any], instance: str) -> Mapping[str, Any]:
    """The member entry for ``instance`` in a ``/status`` document (a lone entry is taken
    as it is: a member answers for itself)."""
    entries = [e for e in document.get("members") or [] if isinstance(e, Mapping)]
    mine = [e for e in entries if str(e.get("instance")) == instance]
    if mine:
        return mine[0]
    if len(entries) == 1:
        return entries[0]
    raise StatusUnavailable(f"/status lists no member {instance!r}")


def _ask(fetch: Fetch, endpoint: str, instance: str, timeout_s: float) -> Mapping[str, Any]:
    try:
        return _member_entry(fetch(endpoint, timeout_s), instance)
    except StatusUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - a member's answer must never end the command
        raise StatusUnavailable(f"{type(exc).__name__}: {exc}") from None


def collect(service: str, view: GroupView, fetch: Fetch = fetch_status,
            timeout_s: float = DEFAULT_TIMEOUT_S) -> ServiceStatus:
    """Every member of ``view`` with its ``/status`` (asked concurrently through ``fetch``)."""
    members = sorted(view.info.members, key=lambda m: (m.client_id, m.member_id))
    advertised = [parse_client_id(m.client_id, service, m.host) for m in members]

    def one(item: tuple[Member, Advertised]) -> MemberStatus:
        m, adv = item
        status: Mapping[str, Any] | None = None
        if adv.endpoint is None:
            error = f"no endpoint in client.id {m.client_id!r} (observe disabled, or an older framework)"
        else:
            try:
                status, error = _ask(fetch, adv.endpoint, adv.instance, timeout_s), None
            except StatusUnavailable as exc:
                error = f"{NOT_ANSWERING}: {exc}"
        return MemberStatus(adv.instance, m.client_id, broker_host(m.host), adv.endpoint, list(m.assignment),
                            status, error)

    items = list(zip(members, advertised, strict=True))
    if not items:
        return ServiceStatus(service, view, [])
    with ThreadPoolExecutor(max_workers=min(len(items), 16), thread_name_prefix="fw-status") as pool:
        answered = list(pool.map(one, items))
    answered.sort(key=lambda s: (_instance_order(s.instance), s.client_id))
    return ServiceStatus(service, view, answered)


def _instance_order(instance: str) -> tuple[int, int | str]:
    return (0, int(instance)) if instance.isdigit() else (1, instance)


def service_status(settings: Mapping[str, Any], group: str, pipeline: Pipeline | None,
                   timeout_s: float = DEFAULT_TIMEOUT_S, fetch: Fetch | None = None) -> ServiceStatus:
    """Service ``pipeline`` (or the bare consumer group ``group``): the broker's view of its
    group, and each member's ``/status`` (through ``fetch``, by default ``fetch_status``)."""
    return collect(group, describe_group(settings, group, pipeline), fetch or fetch_status, timeout_s)


# -- what the table shows ------------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    """One row of the table: a task partition of a member (``partition`` None for a member
    with none). ``first`` marks a member's first row, which carries the member's own values."""

    instance: str
    endpoint: str | None
    partition: int | None
    topics: list[str]
    state: str
    lag: int | None
    watermark_ms: int | None
    watermark_delay_s: float | None
    checkpoint_age_s: float | None
    restore: Mapping[str, Any] | None
    first: bool


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def rows(status: ServiceStatus) -> list[Row]:
    """A row per member and task partition: the member's own view where it answered (state,
    lag from its position, watermark, restore), the broker's otherwise (lag from the
    committed offsets, also where the member gives none yet; state ``endpoint not
    answering``, or ``assigned`` for a partition the group gave an answering member that its
    status does not list yet)."""
    broker_lag: dict[tuple[str, int], int] = {}
    for r in status.view.partitions:
        if r.member is not None:
            broker_lag[(r.member, r.partition)] = broker_lag.get((r.member, r.partition), 0) + r.lag
    out: list[Row] = []
    for m in status.members:
        topics: dict[int, list[str]] = {}
        for topic, number in m.partitions:
            topics.setdefault(number, []).append(topic)
        own: dict[int, Mapping[str, Any]] = {}
        checkpoint_age = None
        if m.status is not None:
            own = {int(e["partition"]): e for e in m.status.get("partitions") or []
                   if isinstance(e, Mapping) and _int(e.get("partition")) is not None}
            checkpoint = m.status.get("checkpoint")
            checkpoint_age = _num(checkpoint.get("age_s")) if isinstance(checkpoint, Mapping) else None
        member_state = (str(m.status.get("state") or "-") if m.status is not None
                        else NOT_ANSWERING if m.endpoint else "no endpoint")
        numbers = sorted(set(topics) | set(own))
        if not numbers:  # a member without partitions (starting, or more members than partitions)
            out.append(Row(m.instance, m.endpoint, None, [], member_state, None, None, None, checkpoint_age,
                           None, True))
        for i, p in enumerate(numbers):
            entry = own.get(p)
            if entry is not None:
                restore = entry.get("restore")
                lag = _int(entry.get("lag"))
                row = Row(m.instance, m.endpoint, p, sorted(topics.get(p, [])),
                          str(entry.get("state") or member_state),
                          broker_lag.get((m.client_id, p)) if lag is None else lag,
                          _int(entry.get("watermark_ms")), _num(entry.get("watermark_delay_s")),
                          checkpoint_age, restore if isinstance(restore, Mapping) else None, i == 0)
            else:  # the broker's view: not answering, or assigned and not in the member's status (yet)
                row = Row(m.instance, m.endpoint, p, sorted(topics.get(p, [])),
                          "assigned" if m.status is not None else member_state,
                          broker_lag.get((m.client_id, p)), None, None, checkpoint_age, None, i == 0)
            out.append(row)
    return out


@dataclass(frozen=True)
class MemberLine:
    """A member's totals under the table: records processed and the rate, or why not."""

    instance: str
    endpoint: str | None
    pid: int | None
    state: str | None
    healthy: bool | None
    ready: bool | None
    records_processed: int | None
    process_rate: float | None
    lag: int | None
    error: str | None


def member_lines(status: ServiceStatus) -> list[MemberLine]:
    out = []
    for m in status.members:
        s = m.status or {}
        healthy, ready = s.get("healthy"), s.get("ready")
        out.append(MemberLine(m.instance, m.endpoint, _int(s.get("pid")),
                              str(s["state"]) if s.get("state") is not None else None,
                              healthy if isinstance(healthy, bool) else None,
                              ready if isinstance(ready, bool) else None,
                              _int(s.get("records_processed")), _num(s.get("process_rate")),
                              _int(s.get("lag")), m.error))
    return out
