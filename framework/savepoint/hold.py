"""The members of a running service held at a checkpoint while its savepoint is read
(``framework.runtime.hold`` is the member's side; docs/savepoints.md).

``HeldService`` asks every member of the group over its status endpoint to hold, checks that
the group is the same once all hold (same members, same partitions: none moved in between),
and releases them all when the savepoint is written or has failed. A member that says a
rebalance disturbed its hold (or that its hold ended by itself) voids the savepoint: a
partition may have been processed meanwhile. Of a stopped service nothing is held, and a
member that joins while the savepoint is read voids it, as before.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from types import TracebackType
from typing import Any
from urllib.parse import urlencode

from framework.errors import KafkaClientError, RuntimeProblem
from framework.kafka.admin import admin_client
from framework.kafka.groups import group_members
from framework.observe.endpoint import Advertised, ask_json, parse_client_id

log = logging.getLogger("framework.savepoint")

_ASK_S = 90.0  # a member checkpoints before it answers a hold


class HeldService:
    """``with HeldService(settings, service, seconds) as held:`` every member of ``service``
    held for at most ``seconds`` (``held``: their instances; empty when the service is
    stopped)."""

    def __init__(self, settings: Mapping[str, Any], service: str, seconds: float) -> None:
        self.settings, self.service, self.seconds = settings, service, seconds
        self.token = uuid.uuid4().hex[:12]
        self.held: list[Advertised] = []
        self._before: list[tuple[str, frozenset[tuple[str, int]]]] = []
        self.stopped = True  # no member when the savepoint began

    def __enter__(self) -> list[str]:
        stable, members = self._members()
        self._before = _shape(members)
        self.stopped = not members
        if self.stopped:
            return []
        if not stable:
            raise RuntimeProblem(f"consumer group {self.service!r} is rebalancing: its members cannot be held at one "
                                 "cut. Fix: create the savepoint again in a moment")
        found = [(parse_client_id(cid, self.service, host), cid) for cid, host, _ in members]
        silent = [cid for a, cid in found if a.endpoint is None]
        if silent:
            raise RuntimeProblem(f"member(s) {', '.join(silent)} of {self.service!r} advertise no status endpoint: a "
                                 "savepoint of a running service holds each member at a checkpoint through it. Fix: "
                                 "run the service with its endpoint on (observe.enabled, the default), or stop it "
                                 "and create the savepoint then")
        try:
            for advertised, _ in found:
                self._ask(advertised, "hold", seconds=f"{self.seconds:g}")
                self.held.append(advertised)
            stable, members = self._members()
            if not stable or _shape(members) != self._before:
                raise RuntimeProblem(f"consumer group {self.service!r} changed while its members were held (a "
                                     "member joined or left): the savepoint would not be one cut. Fix: create it "
                                     "again")
        except BaseException:
            self._release()
            raise
        log.info("every member of %s held for savepoint %s: %s", self.service, self.token,
                 ", ".join(a.instance for a in self.held))
        return [a.instance for a in self.held]

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        disturbed = self._release()
        if kind is not None:
            return  # the savepoint failed already: that error is the one to report
        if disturbed:
            raise RuntimeProblem(f"the savepoint of {self.service!r} is void: {'; '.join(disturbed)}. Fix: create it "
                                 "again")
        if self.stopped:
            _, members = self._members()
            if members:
                joined = ", ".join(cid for cid, _, _ in members)
                raise RuntimeProblem(f"member(s) {joined} of {self.service!r} joined while the savepoint was read: "
                                     "the state changed under it, and it is void. Fix: create it again (a running "
                                     "service's members are held while it is read)")

    def _release(self) -> list[str]:
        """Release every held member; what disturbed the holds (a member that does not answer
        the release processes again at the end of its hold: the savepoint is still one cut)."""
        disturbed = []
        for advertised in self.held:
            try:
                body = self._ask(advertised, "release")
            except RuntimeProblem as exc:
                log.warning("%s: it resumes when its hold of %g s ends", exc, self.seconds)
                continue
            if body.get("disturbed"):
                disturbed.append(f"member {advertised.instance}: {body['disturbed']}")
        self.held = []
        return disturbed

    def _ask(self, member: Advertised, action: str, **params: str) -> dict[str, Any]:
        query = urlencode({"token": self.token, **params})
        code, body = ask_json(f"{member.endpoint}/savepoint/{action}?{query}", _ASK_S, method="POST")
        if code != 200 or not isinstance(body, dict):
            said = body.get("error") if isinstance(body, dict) else body
            raise RuntimeProblem(f"member {member.instance} of {self.service!r} at {member.endpoint} did not {action} "
                                 f"for the savepoint: {said}. Fix: create the savepoint again (fw status "
                                 f"{self.service} shows the members)")
        return body

    def _members(self) -> tuple[bool, list[tuple[str, str, set[tuple[str, int]]]]]:
        admin = admin_client(dict(self.settings))
        try:
            return group_members(admin, self.service)
        except KafkaClientError as exc:
            raise RuntimeProblem(f"cannot ask consumer group {self.service!r} for its members: {exc}") from None


def _shape(members: list[tuple[str, str, set[tuple[str, int]]]]) -> list[tuple[str, frozenset[tuple[str, int]]]]:
    """Who holds what: the same before and after the holds, or a rebalance came between."""
    return sorted((cid, frozenset(held)) for cid, _, held in members)
