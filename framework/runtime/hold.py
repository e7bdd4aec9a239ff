"""A member held at a checkpoint for a savepoint of the running service
(``fw savepoint create`` while members run; docs/savepoints.md).

A savepoint reads the service's changelogs and offsets, which hold its state as of its last
checkpoint only while no member processes. So ``fw savepoint create`` asks every member, over
its status endpoint, to hold (``POST /savepoint/hold?token=T&seconds=S``): the member takes a
checkpoint (its state, outputs and input offsets committed together), then pauses every input
partition it holds and stops everything that changes state (processing, processing-time
ticks, global table updates) while its consumer keeps polling, so it stays in the group. Once
every member holds, the service's committed state is one consistent cut, as if it had
stopped; the savepoint is read from the cluster as for a stopped service; then every member is
released (``POST /savepoint/release?token=T``) and continues where it was.

A rebalance while held (a member joined, left or crashed) *disturbs* the hold: a partition may
have moved to a member that processed it, so the command voids the savepoint. A hold the
command does not release (it died) ends by itself after ``seconds``.

The HTTP thread hands each request to the loop (``requests``) and waits for its answer; the
loop acts on it at the top of a round (``Service._loop``), between batches.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("framework.runtime")

MAX_HOLD_S = 600.0  # a hold ends by itself after at most this long
_ANSWER_S = 60.0  # how long the HTTP thread waits for the loop (a checkpoint first)


@dataclass
class Request:
    action: str  # "hold" or "release"
    token: str
    seconds: float
    done: threading.Event = field(default_factory=threading.Event)
    answer: tuple[int, dict[str, Any]] = (500, {"error": "not answered"})


@dataclass
class Held:
    """The hold in force: whose, until when, and whether a rebalance disturbed it."""

    token: str
    seconds: float
    until: float
    disturbed: str | None = None


class Holds:
    """Requests from the HTTP thread, acted on by the member's loop."""

    def __init__(self) -> None:
        self.requests: queue.Queue[Request] = queue.Queue()
        self.held: Held | None = None
        self.ended: dict[str, str | None] = {}  # token -> what disturbed it (None: nothing), for a late release

    # -- the HTTP thread --------------------------------------------------------------------

    def ask(self, action: str, params: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """``(HTTP status, body)`` of ``POST /savepoint/<action>``, once the loop has acted."""
        token = params.get("token", "")
        if action not in ("hold", "release") or not token:
            return 400, {"error": "POST /savepoint/hold?token=T&seconds=S or /savepoint/release?token=T"}
        try:
            seconds = float(params.get("seconds", "120"))
        except ValueError:
            return 400, {"error": f"seconds={params.get('seconds')!r}: give a number of seconds"}
        if not 0 < seconds <= MAX_HOLD_S:
            return 400, {"error": f"seconds={seconds:g}: a hold lasts more than 0 and at most {MAX_HOLD_S:.0f} s"}
        request = Request(action, token, seconds)
        self.requests.put(request)
        if not request.done.wait(_ANSWER_S):
            return 503, {"error": f"the member did not act on the {action} within {_ANSWER_S:.0f} s (a long "
                                  "checkpoint, a restore or a recovery under way); ask again"}
        return request.answer

    # -- the loop ---------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """Something to do or in force: the loop looks closer (one attribute test a round)."""
        return self.held is not None or not self.requests.empty()

    def disturb(self, why: str) -> None:
        """A rebalance while held: the savepoint cannot trust the cut."""
        if self.held is not None and self.held.disturbed is None:
            self.held.disturbed = why
            log.warning("savepoint hold %s disturbed: %s", self.held.token, why)

    def next_request(self) -> Request | None:
        try:
            return self.requests.get_nowait()
        except queue.Empty:
            return None

    def end(self, token: str, disturbed: str | None) -> None:
        """The hold ``token`` is over; a release that comes later is told ``disturbed``."""
        self.held = None
        self.ended[token] = disturbed
        while len(self.ended) > 16:
            self.ended.pop(next(iter(self.ended)))

    def expired(self, now: float) -> bool:
        return self.held is not None and now >= self.held.until

    @staticmethod
    def deadline(seconds: float) -> float:
        return time.monotonic() + seconds
