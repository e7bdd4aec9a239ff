"""The operator's skip list: the records a member under ``on_error="fail"`` dead-letters
instead of stopping at (``fw group skip``, ``framework.ops.skips``).

Under ``on_error="fail"`` a step that raises stops the member with one line naming the record,
``topic[partition]@offset``; an input that cannot be changed meets it again at every start. The
operator names that record in the service's skip list. A task consults the list at one point
only: when a step has raised on a record and the member would stop (``Task.record_failed``);
a record that succeeds is never looked up, so the list costs the hot loop nothing. A record the
list names goes to the dead-letter topic as under ``on_error="dead_letter"`` (with
``fw.skipped`` and ``fw.skip.reason``), one WARNING says so, and the member goes on. Nothing
else changes: the records before it in its checkpoint interval and those after it are
processed as ever, exactly once. (Moving the group's committed offset past the record instead
would skip the records before it that no checkpoint had committed yet.) An entry for a record
that then succeeds does nothing.

An entry names a record as the error line does: by its own coordinates, or, for a record of a
repartition topic, by its origin (``fw.origin``: the input record it was made from, the first
coordinates of ``orders[0]@42 (through shop-by-user-repartition[1]@7)``). Either matches.

**Where the list is kept**: the compacted topic ``<service>-skips`` (one partition), one record
per entry, keyed by the record's ``topic[partition]@offset``, its value JSON ``{"reason": ...,
"at": ...}``; a removed entry is a tombstone. A topic because every member on every host (and
any engine reading the cluster) sees the same durable list, and it outlives members, releases
and ``fw group reset``. The group's committed offset metadata was the other candidate: every
checkpoint of every member commits its positions again with empty metadata, so an entry would
last until the next commit. A member reads the topic at its first failure (``SkipList(load=...)``)
and keeps what it read: the list changes only while no member runs (``fw group skip`` is
refused otherwise), so a member started after a change reads it. Decoding an entry builds
strings only; nothing in it runs code.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from framework.errors import RecordCoordinates

log = logging.getLogger("framework.skips")


@dataclass(frozen=True)
class Skip:
    """An entry: the record ``where`` (``topic[partition]@offset``), why (``reason``, may be
    empty) and when it was added (``at``, ISO 8601 UTC; empty when unknown)."""

    where: str
    reason: str = ""
    at: str = ""

    def encoded(self) -> tuple[bytes, bytes]:
        """The entry as the skip-list topic's record: key and value."""
        return self.where.encode(), json.dumps({"reason": self.reason, "at": self.at}, sort_keys=True).encode()

    def as_dict(self) -> dict[str, str]:
        return {"record": self.where, "reason": self.reason, "at": self.at}


def skips_of(records: Iterable[tuple[bytes | None, bytes | None]]) -> dict[str, Skip]:
    """The entries that ``(key, value)`` records of the skip-list topic leave, in their order: a
    later record of a key replaces an earlier one, a tombstone removes it. A value that is not
    the JSON an entry has still names its record (with the value as its reason)."""
    out: dict[str, Skip] = {}
    for key, value in records:
        if key is None:
            continue
        where = key.decode("utf-8", "replace")
        if value is None:
            out.pop(where, None)
            continue
        try:
            fields = json.loads(value)
            out[where] = Skip(where, str(fields.get("reason", "")), str(fields.get("at", "")))
        except (ValueError, AttributeError):
            out[where] = Skip(where, value.decode("utf-8", "replace"))
    return out


class SkipList:
    """A service's skip list as a task consults it: ``entries`` given, or read by ``load`` the
    first time it is consulted (the Kafka runtime's; the TestDriver adds entries itself)."""

    def __init__(self, entries: Iterable[Skip] = (), load: Callable[[], Iterable[Skip]] | None = None) -> None:
        self._entries = {s.where: s for s in entries}
        self._load = load

    def add(self, skip: Skip) -> None:
        self._entries[skip.where] = skip

    def remove(self, where: str) -> None:
        self._entries.pop(where, None)

    def find(self, record: RecordCoordinates) -> Skip | None:
        """The entry naming ``record`` (its coordinates, or its origin), or None. A list that
        cannot be read is logged and names nothing: the member stops at the record as
        ``on_error="fail"`` does."""
        if self._load is not None:
            load, self._load = self._load, None
            try:
                for skip in load():
                    self._entries.setdefault(skip.where, skip)
            except Exception as exc:  # noqa: BLE001 - whatever the reading raised, the member stops at the record
                log.warning("the skip list could not be read (%s: %s), so %s is not skipped", type(exc).__name__,
                            exc, record)
                self._load = load  # asked again at the next failure
        found = self._entries.get(str(record))
        if found is None and record.origin is not None:
            found = self._entries.get(record.origin)
        return found
