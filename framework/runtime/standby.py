"""Warm standbys: local copies of other members' tasks, kept current from their changelogs.

With ``processing.standby_replicas = N`` each task has a warm copy on up to N members besides
the one running it (Kafka Streams' standby tasks). A standby tails the task's changelog
partitions (read_committed) into the same local stores a restore writes, batch by batch with
the offset each batch reaches, so when the task moves to a member that holds a copy, its
restore starts from that offset and applies only the tail. The standby never runs the task:
it reads no input, produces nothing and commits nothing; what it applies is exactly what a
restore would, through the task runner (``TaskRunner.restore_plan`` and ``restore``).

Placement: the group's members in a ring ordered by their static ``group.instance.id`` (the
member id for dynamic members); the task that member *k* runs has its copies on members
*k+1 .. k+N*. Which member a task moves to is the group assignor's choice, not ours (the
consumer client offers no custom assignor), so a copy helps when the task lands where it is:
always with two members (the survivor has every copy) and with ``N`` at least the members
less one; otherwise the member taking the task restores from its own local state, as
without standbys (docs/operations.md, "Warm standbys").

The member asks the group coordinator who runs what after each rebalance and every few
seconds (``REFRESH_S``); a rebalance under way is asked again a second later.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from framework.engine.runner import StoreRestore, TaskRunner
from framework.errors import FatalKafkaError, KafkaClientError
from framework.kafka.clients import TP, ChangelogReader
from framework.kafka.connect import client_failure
from framework.runtime.restore import (
    Committed,
    changelog_ids,
    changelog_infos,
    table_positions,
    table_topics,
)

log = logging.getLogger("framework.standby")
REFRESH_S = 5.0
_RETRY_S = 1.0


def standby_tasks(owners: Mapping[str, Iterable[int]], me: str, replicas: int) -> set[int]:
    """The tasks ``me`` keeps copies of: ``owners`` maps each member's ring key to the tasks it
    runs (members without tasks included); a task's copies go to the ``replicas`` members
    after its owner in the ring's order."""
    ring = sorted(owners)
    if me not in ring or replicas < 1:
        return set()
    mine = set(owners[me])
    span = min(replicas, len(ring) - 1)
    out: set[int] = set()
    for i, member in enumerate(ring):
        if any(ring[(i + k) % len(ring)] == me for k in range(1, span + 1)):
            out |= set(owners[member])
    return out - mine


class Standby:
    """The standby tasks of one member.

    ``assignment()`` gives the group as ``member id -> (ring key, input partitions)``, or None
    while a rebalance is under way; ``member_id()`` this member's id; ``active()`` the task
    numbers this member runs or restores (never copied)."""

    def __init__(self, runner: TaskRunner, reader: ChangelogReader,
                 topic_ids: Callable[[Iterable[str]], dict[str, str]], replicas: int, *,
                 assignment: Callable[[], dict[str, tuple[str, set[TP]]] | None],
                 member_id: Callable[[], str | None], active: Callable[[], set[int]], committed: Committed) -> None:
        self.runner, self.reader, self.topic_ids, self.replicas = runner, reader, topic_ids, replicas
        self._assignment, self._member_id, self._active, self._committed = assignment, member_id, active, committed
        self.tables = table_topics(runner)  # a table's own topic: copied up to the group's committed offset
        self.bound: dict[TP, int] = {}  # such a topic's partition -> the committed offset copied up to
        self.held: set[TP] = set()  # ... read up to it, and waiting for the group to commit more
        self.tasks: dict[int, list[StoreRestore]] = {}  # task -> its store partitions
        self.position: dict[TP, int] = {}  # changelog partition -> next offset applied
        self.current: set[TP] = set()  # changelog partitions read to their end (until more comes)
        self.applied = 0  # changelog records applied over the member's life
        self._items: dict[TP, StoreRestore] = {}
        self._ids: dict[str, str] | None = None
        self._next_refresh = 0.0

    @property
    def busy(self) -> bool:
        return bool(self._items)

    @property
    def behind(self) -> bool:
        """Some copy has not read its changelog to the end yet (records are waiting)."""
        return len(self.current) < len(self._items)

    def refresh_soon(self) -> None:
        """After a rebalance: ask the group again within a moment."""
        self._next_refresh = min(self._next_refresh, time.monotonic() + _RETRY_S)

    def maybe_refresh(self, now: float) -> None:
        if now >= self._next_refresh:
            self.refresh(now)

    def refresh(self, now: float | None = None) -> None:
        """Ask the group who runs what; start and stop copies to match. A cluster that does
        not answer is asked again later: copies are an optimisation, never a reason to stop."""
        now = time.monotonic() if now is None else now
        try:
            self._refresh(now)
        except Exception as exc:
            said = client_failure(exc)
            if said is None and (isinstance(exc, FatalKafkaError) or not isinstance(exc, KafkaClientError)):
                raise
            self._next_refresh = now + REFRESH_S
            log.warning("standby copies not updated (asked again in %.0f s): %s", REFRESH_S, said or exc)

    def _refresh(self, now: float) -> None:
        me, group = self._member_id(), self._assignment()
        if me is None or group is None or me not in group:
            self._next_refresh = now + _RETRY_S
            return
        self._next_refresh = now + REFRESH_S
        self._advance_bounds()
        owners = {key: {p for _, p in tps} for key, tps in group.values()}
        wanted = standby_tasks(owners, group[me][0], self.replicas) - self._active()
        for p in sorted(set(self.tasks) - wanted):  # went elsewhere: its stores close too
            for item in self.release([p]):
                self.runner.backend.open(self.runner.pipeline.name, item.store, p).close()
        new = sorted(wanted - set(self.tasks))
        if new:
            self._start(new)

    def _start(self, partitions: list[int]) -> None:
        if self._ids is None:
            self._ids = changelog_ids(self.runner, self.topic_ids)
        assign: list[tuple[TP, int | None]] = []
        committed = table_positions(self.runner, self._committed, partitions)
        for p in partitions:
            infos = changelog_infos(self.runner, self.reader, self._ids, p, committed)
            items = self.runner.restore_plan(p, infos, current=True)
            self.tasks[p] = items
            for item in items:
                self._items[item.changelog] = item
                self.position[item.changelog] = item.start
                if item.changelog[0] in self.tables:
                    self.bound[item.changelog] = item.end
                assign.append((item.changelog, item.start))
        self.reader.add_all(assign)
        log.info("standby for tasks %s: %s", partitions,
                 ", ".join(f"{i.store}[{i.partition}] from offset {i.start}" for p in partitions for i in self.tasks[p])
                 or "no stores")

    def release(self, partitions: Iterable[int]) -> list[StoreRestore]:
        """Stop copying ``partitions`` (this member is about to run them, or they went
        elsewhere); what was applied stays, with its offset, for a restore to continue, and
        the stores stay open for it. Returns the store partitions released."""
        released = []
        for p in partitions:
            for item in self.tasks.pop(p, []):
                self.reader.remove(item.changelog)
                self._items.pop(item.changelog, None)
                self.position.pop(item.changelog, None)
                self.current.discard(item.changelog)
                self.bound.pop(item.changelog, None)
                self.held.discard(item.changelog)
                released.append(item)
        return released

    def step(self, max_records: int = 2_000, wait_s: float = 0.0) -> int:
        """Apply what the changelogs have for the copies, waiting up to ``wait_s`` for the
        first of it. Returns the count."""
        batch: dict[TP, list[tuple[int, bytes | None, bytes | None, int]]] = {}
        at_end: dict[TP, bool] = {}  # whether the partition's last event here was its end
        for got in self.reader.read(max_records, wait_s):
            if got[1] is None:
                at_end[got[0]] = True
            else:
                tp, offset, key, value, ts = got  # type: ignore[misc]
                batch.setdefault(tp, []).append((offset, key, value, ts))
                at_end[tp] = False
        n = 0
        for tp, records in batch.items():
            item = self._items.get(tp)
            if item is None or tp in self.held:  # released meanwhile, or fetched before the hold
                continue
            bound = self.bound.get(tp)
            if bound is not None and records[-1][0] >= bound:  # past what the group committed
                records = [r for r in records if r[0] < bound]
                self.reader.hold_at(tp, bound)
                self.held.add(tp)
                self.current.add(tp)
                n += self.runner.restore(item, records, next_offset=bound)
                self.position[tp] = bound
                continue
            n += self.runner.restore(item, records)
            self.position[tp] = records[-1][0] + 1
        for tp, end in at_end.items():
            item = self._items.get(tp)
            if tp in self.held or (tp in self.bound and (self.reader.position(tp) or 0) > self.bound[tp]):
                continue
            if not end or item is None:
                self.current.discard(tp)
                continue
            self.current.add(tp)
            # at the end: the copy continues past the last commit marker, so a restore from it
            # starts at the end itself and has nothing to read
            reached = self.reader.position(tp)
            if reached is not None and reached > self.position[tp]:
                self.runner.restore(item, [], next_offset=reached)
                self.position[tp] = reached
        self.applied += n
        return n

    def _advance_bounds(self) -> None:
        """A table's own topic is copied as far as the group has committed: move each bound to
        the committed offset now, and read on where the copy was waiting at the old one."""
        committed = self._committed(list(self.bound)) if self.bound else {}
        for tp in list(self.bound):
            at = committed.get(tp)
            if at is not None and at > self.bound[tp]:
                self.bound[tp] = at
                if tp in self.held:
                    self.held.discard(tp)
                    self.current.discard(tp)
                    self.reader.release(tp)

    def progress(self) -> list[dict[str, Any]]:
        """Per store partition copied: the next offset applied and whether it is current."""
        return [{"store": item.store, "partition": item.partition, "offset": self.position.get(tp, item.start),
                 "current": tp in self.current} for tp, item in sorted(self._items.items())]

    def close(self) -> None:
        self.reader.close()
