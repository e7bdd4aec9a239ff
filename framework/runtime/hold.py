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
loop acts on it at the top of a round, between batches (``HoldRound``, a takeover of the
member's round: ``framework.runtime.round``).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("framework.runtime")
TP = tuple[str, int]

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


class HoldRound:
    """The hold's takeover of the member's round (``framework.runtime.round``): it acts on the
    hold and release requests; while held, the round only polls the consumer (the membership,
    rebalances), puts back what was fetched before the pause took effect, and says that all is
    committed (the checkpoint's age)."""

    def __init__(self, holds: Holds, instance: str, checkpointer: Any, consumer: Any, batch: int, *,
                 assigned: Callable[[], set[TP]], restoring: Callable[[], Collection[int]],
                 recovering: Callable[[], str | None], heartbeat: Callable[[float], None]) -> None:
        """``assigned()``: the member's input partitions; ``restoring()``: the partitions whose
        restore is under way (not resumed at the release); ``recovering()``: why the member
        recovers (None when it does not); ``heartbeat(now)``: the round came round."""
        self.holds, self.instance, self.checkpointer, self.consumer, self.batch = \
            holds, instance, checkpointer, consumer, batch
        self.assigned, self.restoring, self.recovering, self.heartbeat = assigned, restoring, recovering, heartbeat

    def take(self, now: float) -> bool:
        holds = self.holds
        if not holds.busy:
            return False
        while (request := holds.next_request()) is not None:
            request.answer = self._hold(request) if request.action == "hold" else self._release(request.token)
            request.done.set()
        held = holds.held
        if held is not None and holds.expired(now):
            log.warning("savepoint hold %s ended by itself after %.0f s without a release: processing again",
                        held.token, held.seconds)
            holds.end(held.token, f"the hold ended by itself after {held.seconds:.0f} s, before the release: the "
                                  "member processed again")
            self.resume()
        if holds.held is None:
            return False
        first: dict[TP, int] = {}
        for msg in self.consumer.consume(self.batch, 0.1):
            if msg.error() is not None:
                self.consumer.check_error(msg.error())
            else:
                first.setdefault((msg.topic(), msg.partition()), msg.offset())
        for tp, offset in first.items():  # fetched before the pause took effect: fetched again at the release
            self.consumer.seek(tp, offset)
        self.heartbeat(time.monotonic())
        self.checkpointer.maybe_checkpoint()  # nothing to commit: it only says all is committed (checkpoint age)
        return True

    def _hold(self, request: Request) -> tuple[int, dict[str, Any]]:
        """A checkpoint, then every input partition paused until the release."""
        held = self.holds.held
        if held is not None:
            if held.token == request.token:
                return 200, self._answer()
            return 409, {"error": f"member {self.instance} is held for another savepoint ({held.token}); ask again "
                                  "when it is done"}
        why = self.recovering()
        if why is not None:
            return 503, {"error": f"member {self.instance} is recovering ({why or 'an outage'}); ask again"}
        ckpt = self.checkpointer
        was_dirty, completed = ckpt.dirty, ckpt.completed
        ckpt.checkpoint("savepoint")
        if ckpt.broken is not None or (was_dirty and ckpt.completed == completed):
            return 503, {"error": f"member {self.instance} could not complete the checkpoint before the hold "
                                  f"({ckpt.broken or 'aborted'}); ask again"}
        assigned = self.assigned()
        self.consumer.pause(assigned)
        self.holds.held = Held(request.token, request.seconds, Holds.deadline(request.seconds))
        log.info("held for savepoint %s after checkpoint %d: partitions %s paused for at most %.0f s",
                 request.token, ckpt.completed, sorted({p for _, p in assigned}), request.seconds)
        return 200, self._answer()

    def _answer(self) -> dict[str, Any]:
        return {"instance": self.instance, "partitions": sorted([t, p] for t, p in self.assigned()),
                "checkpoints": self.checkpointer.completed}

    def _release(self, token: str) -> tuple[int, dict[str, Any]]:
        """The end of the hold; says whether a rebalance disturbed it (or it had ended)."""
        held = self.holds.held
        if held is None or held.token != token:
            if token not in self.holds.ended:
                return 409, {"error": f"member {self.instance} is not held for savepoint {token}"}
            return 200, {"instance": self.instance, "disturbed": self.holds.ended[token]}
        self.holds.end(token, held.disturbed)
        self.resume()
        log.info("savepoint hold %s released", token)
        return 200, {"instance": self.instance, "disturbed": held.disturbed}

    def resume(self) -> None:
        restoring = self.restoring()
        self.consumer.resume([tp for tp in self.assigned() if tp[1] not in restoring])
