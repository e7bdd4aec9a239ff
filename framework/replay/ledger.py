"""A backfill's identity and the ledger that makes it exactly once across runs.

Spark's retries are covered inside one run (``framework.kafka.writer``: each task's
transactional producer and its progress marker). Across runs, a backfill is known by what it
is, not by when it ran: the pipeline, the range and where it writes (``backfill_id``). Its
markers live in the consumer group ``<service>-backfill-<id>``, so a run started again after a
failure continues each task from what the failed one committed.

The *ledger*, the compacted topic ``<service>-backfills`` (one record per backfill, keyed by
its id), says which backfills wrote where, over which range, and whether they completed.
``fw replay`` reads it before it starts (``decide``):

- the same backfill, complete: nothing to write (``--again`` writes a new copy, into
  destinations that hold nothing yet);
- the same backfill, incomplete: it continues (a ``--to latest`` that moved since is held
  at the range the failed run planned: the request as given names it);
- another backfill into the same destination whose range overlaps this one: refused, since
  the overlap's outputs would be written twice;
- else a new backfill, recorded as running before Spark starts and complete when the job
  ends (its marker group then goes).

The decisions (``decide``) are pure; the ledger's reads and writes, below them, go through
``framework.kafka``.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from framework.errors import ConfigError
from framework.kafka.admin import (
    CLUSTER_DEFAULTS,
    InternalTopics,
    admin_client,
    ensure_topics,
    topic_partitions,
)
from framework.kafka.groups import delete_group
from framework.kafka.inspect import Cluster
from framework.kafka.io import delete_topics, produce_values, read_committed
from framework.pipeline.internal import ledger_topic
from framework.replay.plan import backfill_group

Ranges = dict[str, dict[int, list[int]]]


@dataclass(frozen=True)
class Backfill:
    """One ledger record. ``destination``: the topics it writes, or ``parquet:<path>``;
    ``asked``: ``--from`` and ``--to`` as given; ``ranges``: what they resolved to (empty
    for an archive, which is named by ``archive``)."""

    id: str
    target: str
    pipeline: str  # a hash of the pipeline's definition
    destination: list[str]
    ranges: Ranges
    asked: list[str]
    archive: str | None = None
    state: str = "running"  # or "complete"
    started: str = ""
    completed: str = ""
    counts: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Backfill:
        return cls.from_dict(json.loads(data))

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Backfill:
        ranges = {t: {int(p): r for p, r in parts.items()} for t, parts in raw["ranges"].items()}
        return cls(**{**raw, "ranges": ranges})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def range_text(self) -> str:
        if self.archive:
            return f"archive {self.archive}"
        return ", ".join(f"{t}[{p}]@{r[0]}..{r[1]}" for t, parts in sorted(self.ranges.items())
                         for p, r in sorted(parts.items()))

    def where(self) -> str:
        return ", ".join(self.destination)


def pipeline_hash(definition: str) -> str:
    return hashlib.sha256(definition.encode()).hexdigest()[:12]


def backfill_id(definition: str, ranges: Ranges, archive: str | None, destination: Iterable[str],
                partitions: int, bootstrap: bool) -> str:
    """What a backfill is: the pipeline as defined, the range (or archive), where it writes,
    the service's partition count (its tasks) and whether it also bootstraps."""
    ident = json.dumps({"definition": definition, "archive": archive, "destination": sorted(destination),
                        "partitions": partitions, "bootstrap": bootstrap,
                        "ranges": {t: {str(p): r for p, r in sorted(parts.items())}
                                   for t, parts in sorted(ranges.items())}}, sort_keys=True)
    return hashlib.sha256(ident.encode()).hexdigest()[:12]


def _overlap(a: Backfill, b: Backfill) -> bool:
    if a.archive or b.archive:
        return True  # what an archive holds is known only to the job: assume the worst
    return any(r[0] < s[1] and s[0] < r[1] for t, parts in a.ranges.items()
               for p, r in parts.items() if (s := b.ranges.get(t, {}).get(p)) is not None)


@dataclass(frozen=True)
class Decision:
    """``action``: ``run`` (new), ``continue`` (an incomplete one: ``backfill`` is it, with
    its ranges), ``done`` (complete: write nothing); ``forget``: the ledger records and
    marker groups that ``--again`` drops first."""

    action: str
    backfill: Backfill
    forget: list[Backfill] = field(default_factory=list)


def decide(entries: Iterable[Backfill], mine: Backfill, *, again: bool, occupied: Sequence[str] = ()) -> Decision:
    """What a backfill ``mine`` does, given the ledger's ``entries``. ``occupied``: the
    topics (or path) of its destination that hold something already (records, Parquet
    files); ``--again`` is refused unless there are none. Raises ``ConfigError`` for an
    overlap with another backfill."""
    shared = set(mine.destination)
    same_place = [e for e in entries if shared & set(e.destination)]
    if again:
        if occupied:
            held = ", ".join(d.removeprefix("parquet:") for d in occupied)
            raise ConfigError(
                f"--again writes a new copy of the backfill, into topics or a path that hold nothing yet: "
                f"{held} {'holds' if len(occupied) == 1 else 'hold'} records. Fix: choose new topics "
                "(--output-suffix) or a new path, or delete what is there first")
        return Decision("run", mine, forget=same_place)
    for e in same_place:
        # the same backfill; or the same request, whose --to latest (or a time) has moved on since
        same_request = (e.target, e.pipeline, e.asked, e.archive, set(e.destination)) == \
            (mine.target, mine.pipeline, mine.asked, mine.archive, shared)
        if e.id == mine.id or same_request:
            return Decision("done" if e.state == "complete" else "continue", e)
    for e in same_place:
        if _overlap(e, mine):
            status = "complete" if e.state == "complete" else f"incomplete, started {e.started}"
            raise ConfigError(
                f"{e.where()} already holds the outputs of backfill {e.id} ({e.target} over {e.range_text()}; "
                f"{status}), whose range overlaps this one ({mine.range_text()}): its outputs would be written "
                f"twice. Fix: write to new topics (--output-suffix) or a new path; or run that backfill's range "
                f"(--from/--to as it was: {' '.join(e.asked)}); or, once its outputs are gone, "
                f"`fw replay {mine.target} --clean` to forget it")
    return Decision("run", mine)


def now_text() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# -- the ledger on the cluster ----------------------------------------------------------------


def read_ledger(settings: Mapping[str, Any], service: str) -> list[Backfill]:
    """Every backfill of ``service`` the ledger holds (none when it has no ledger yet)."""
    topic = ledger_topic(service)
    if not topic_partitions(admin_client(settings), [topic]):
        return []
    latest: dict[bytes, bytes | None] = {}
    for key, value in read_committed(settings["bootstrap.servers"], topic, None, 60, extra=_extra(settings)):
        if key is not None:
            latest[key] = value
    return [Backfill.from_json(v) for v in latest.values() if v is not None]


def record(settings: Mapping[str, Any], service: str, backfill: Backfill,
           internal: InternalTopics = CLUSTER_DEFAULTS) -> None:
    """Write ``backfill`` as the ledger's record of it (the ledger is created when missing,
    replicated as ``internal`` says)."""
    topic = ledger_topic(service)
    ensure_topics(admin_client(settings), [internal.spec(topic, 1, {"cleanup.policy": "compact"})])
    produce_values(settings["bootstrap.servers"], topic, [(backfill.id.encode(), backfill.to_json())],
                   extra=_written(settings))


def forget(settings: Mapping[str, Any], service: str, backfills: Iterable[Backfill]) -> None:
    """Drop ``backfills`` from the ledger (tombstones) and delete their marker groups."""
    gone = list(backfills)
    if not gone:
        return
    produce_values(settings["bootstrap.servers"], ledger_topic(service), [(b.id.encode(), None) for b in gone],
                   extra=_written(settings))
    for b in gone:
        delete_group(settings, backfill_group(service, b.id))


def completed(settings: Mapping[str, Any], service: str, backfill: Backfill, counts: Mapping[str, Any]) -> None:
    """The backfill's job has ended well: the ledger says so, and its markers go."""
    record(settings, service, replace(backfill, state="complete", completed=now_text(), counts=dict(counts)))
    delete_group(settings, backfill_group(service, backfill.id))


def clean(settings: Mapping[str, Any], service: str) -> list[str]:
    """``fw replay --clean``: the service's ledger and every replay marker group (this
    version's ``<service>-backfill-<id>``, and ``<service>-replay-<run>`` of earlier ones).
    Returns what went."""
    cluster = Cluster(settings)
    try:
        groups = [g for g in cluster.groups() if g.startswith((f"{service}-backfill-", f"{service}-replay-"))]
    finally:
        cluster.close()
    for g in groups:
        delete_group(settings, g)
    removed = [f"consumer group {g}" for g in sorted(groups)]
    topic = ledger_topic(service)
    if topic_partitions(admin_client(settings), [topic]):
        delete_topics(settings["bootstrap.servers"], [topic], extra=_extra(settings))
        removed.append(f"topic {topic}")
    return removed


def _extra(settings: Mapping[str, Any]) -> dict[str, str]:
    return {k: v for k, v in settings.items() if k != "bootstrap.servers"}


def _written(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A ledger write's producer: not idempotent. A retry's duplicate is the same record under
    the same key (compaction keeps one), and an idempotent producer waits about 0.5 s for its
    producer id before the first record goes (librdkafka's timer)."""
    return {**_extra(settings), "enable.idempotence": False}
