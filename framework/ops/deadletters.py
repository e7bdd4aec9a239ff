"""``fw dead-letters``: a service's dead letters, grouped, and their re-drive.

**Listing** reads the service's dead-letter topic (committed records only) and groups its
dead letters by step and error (the error's type and message, without the coordinates and
the fix the message repeats): how many, the first and last timestamp, and one example's
coordinates ``topic[partition]@offset``. A dead letter's timestamp is the failed record's,
so ``--since`` keeps those of records stamped at or after a time. Dead letters of re-driven
records (``fw.redrive.of``) are counted apart in each group (``again``), and so are those the
re-drive ledger says were re-driven (``redriven``).

**Re-drive** feeds dead letters back, after the code was fixed, to the step each failed at
(``framework.engine.redrive``: a re-drive record in the topic the failed record was read from,
resumed there by the task), exactly once across runs. The ledger, the compacted topic
``<service>-redrives``, holds one record per dead letter re-driven (keyed by its coordinates),
written in the same Kafka transaction as its re-drive record. A run first fences every earlier
run (the transactional id ``<service>-redrive``: a run that crashed or is still writing is
aborted, or has committed), then reads the ledger, then writes what it does not hold: a crash
at any point and a rerun re-drive each dead letter once.

A dead letter can be re-driven when the step it names still reads the topic it failed in and
the step either reads that topic itself (the record failed to decode, or in its source step:
it is processed again as it was read) or recorded what it was given (``fw.step.input``: map,
filter, flat_map, peek, key_by and aggregate steps whose function raised, with a value the
value encoding can write). The others are listed with the reason and stay where they are.

The plans (``group_letters``, ``plan_redrive``) are pure; reading and writing go through
``framework.kafka``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from framework.engine.redrive import redrive_headers
from framework.errors import ConfigError
from framework.headers import REDRIVE_OF, STEP_INPUT, VALUE_ENCODING
from framework.kafka.admin import CLUSTER_DEFAULTS, InternalTopics, admin_client, ensure_topics
from framework.kafka.clients import KafkaOutput
from framework.kafka.inspect import ReadRecord, read_whole
from framework.kafka.offsets import parse_time
from framework.ops.tail import dead_letter_of
from framework.pipeline import steps as S
from framework.pipeline.definition import Pipeline
from framework.pipeline.internal import redrive_ledger_topic

_TXN_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Letter:
    """One dead letter as read: where it is, its timestamp, key, value and headers (all, in
    order), and what its headers say: the ``step``, the error's type (``kind``, ``fw.error.type``:
    the exception's class) and message (without the coordinates and the fix)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    step: str
    kind: str
    error: str
    origin: str

    @property
    def where(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"

    def header(self, name: str) -> bytes | None:
        """The last header of ``name`` (the framework's, after the record's own)."""
        found = None
        for n, v in self.headers:
            if n == name:
                found = v
        return found

    def text(self, name: str) -> str | None:
        raw = self.header(name)
        return None if raw is None else raw.decode("utf-8", "replace")


def letter_of(record: ReadRecord) -> Letter | None:
    """The dead letter a record of a dead-letter topic is (None: not one)."""
    found = dead_letter_of(dict(record.headers))
    if found is None:
        return None
    kind = dict(record.headers).get("fw.error.type") or b""
    return Letter(record.topic, record.partition, record.offset, record.timestamp or 0, record.key, record.value,
                  tuple(record.headers), found.step, kind.decode("utf-8", "replace"), found.error, found.origin)


def since_ms(since: str | None) -> int | None:
    """``--since`` as milliseconds (ISO 8601, or ms since the epoch); a ``ConfigError`` line otherwise."""
    if since is None:
        return None
    ms = parse_time(since)
    if ms is None:
        raise ConfigError(f"--since {since!r} is not a time: give ISO 8601 (2026-12-01T08:00:00Z) or milliseconds "
                          "since the epoch")
    return ms


# -- listing ------------------------------------------------------------------------------------


@dataclass
class Group:
    """The dead letters of one step and error (its type and message): how many, the first and last timestamp (ms),
    one example's coordinates, how many are dead letters of re-driven records (``again``) and
    how many the ledger says were re-driven (``redriven``)."""

    step: str
    kind: str
    error: str
    count: int = 0
    first: int = 0
    last: int = 0
    example: str = ""
    again: int = 0
    redriven: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step, "error_type": self.kind, "error": self.error, "count": self.count, "first": _iso(self.first),
                "last": _iso(self.last), "first_ms": self.first, "last_ms": self.last, "example": self.example,
                "again": self.again, "redriven": self.redriven}


def group_letters(letters: Iterable[Letter], *, since: int | None = None, step: str | None = None,
                  redriven: Iterable[str] = ()) -> list[Group]:
    """``letters`` grouped by step and error, most first (then by step and error); ``since``
    and ``step`` keep only those stamped at or after it, or of that step."""
    done = set(redriven)
    groups: dict[tuple[str, str, str], Group] = {}
    for letter in letters:
        if (since is not None and letter.timestamp < since) or (step is not None and letter.step != step):
            continue
        which = (letter.step, letter.kind, letter.error)
        g = groups.get(which)
        if g is None:
            g = groups[which] = Group(*which, first=letter.timestamp, last=letter.timestamp, example=letter.where)
        g.count += 1
        g.first, g.last = min(g.first, letter.timestamp), max(g.last, letter.timestamp)
        g.again += letter.header(REDRIVE_OF) is not None
        g.redriven += letter.where in done
    return sorted(groups.values(), key=lambda g: (-g.count, g.step, g.kind, g.error))


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


# -- re-drive plans -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Redrive:
    """One dead letter's re-drive record: to ``topic[partition]``, resuming at ``step``."""

    of: str
    step: str
    topic: str
    partition: int
    timestamp: int
    headers: tuple[tuple[str, bytes], ...]

    def as_dict(self) -> dict[str, Any]:
        return {"dead_letter": self.of, "step": self.step, "to": f"{self.topic}[{self.partition}]"}


@dataclass
class RedrivePlan:
    """What a re-drive writes (``items``), what it leaves because the ledger says it was
    re-driven (``done``) and what cannot be re-driven, with why (``refused``); ``dry_run``:
    a plan only, nothing written."""

    service: str
    items: list[Redrive] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    dry_run: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"service": self.service, "dry_run": self.dry_run,
                "to_redrive" if self.dry_run else "redriven": [r.as_dict() for r in self.items],
                "already_redriven": self.done,
                "refused": [{"dead_letter": w, "reason": why} for w, why in self.refused]}


def own_step(pipeline: Pipeline, topic: str) -> str | None:
    """The step that reads ``topic`` itself: its source step, or the ``key_by`` whose
    repartition topic it is."""
    for step in pipeline.steps.values():
        if isinstance(step, S.Source) and step.topic.name == topic:
            return step.name
        if isinstance(step, S.KeyBy) and pipeline.repartition_topic(step.name) == topic:
            return step.name
    return None


def check_step(pipeline: Pipeline, step: str | None) -> None:
    """``--step`` must name a step of the pipeline: a ``ConfigError`` naming them otherwise."""
    if step is not None and step not in pipeline.steps:
        raise ConfigError(f"service {pipeline.name} has no step {step!r}; its steps: {', '.join(pipeline.steps)}")


def redrive_of(pipeline: Pipeline, letter: Letter) -> Redrive | str:
    """The re-drive record of ``letter``, or why it cannot be re-driven."""
    topic, partition = letter.text("fw.source.topic"), letter.text("fw.source.partition")
    if topic is None or partition is None:
        return "a timer's failure: what it fired for is in the step's state, not in the dead letter"
    if letter.header("fw.omitted") is not None:
        return "it was written without its key and value (fw.omitted)"
    if letter.step not in pipeline.steps:
        return f"the pipeline has no step {letter.step!r} now"
    if topic not in pipeline.step_inputs(letter.step):
        return f"step {letter.step!r} no longer reads topic {topic!r}"
    here = own_step(pipeline, topic)
    given = None if letter.step == here else letter.header(STEP_INPUT)
    if letter.step != here and given is None:
        kind = type(pipeline.steps[letter.step]).__name__
        return (f"step {letter.step!r} ({kind}) did not record its input (only map, filter, flat_map, peek, key_by "
                "and aggregate steps whose function raised do, when the value encoding can write it)")
    headers = redrive_headers(pipeline.name, letter.step, letter.where, step_input=given, key=letter.key,
                              value=letter.value, encoding=letter.text(VALUE_ENCODING) or "original",
                              record_headers=_record_headers(letter))
    return Redrive(letter.where, letter.step, topic, int(partition), letter.timestamp, tuple(headers))


def _record_headers(letter: Letter) -> list[tuple[str, bytes]]:
    """The failed record's own headers: those before the framework's (from the last
    ``fw.source.topic`` on)."""
    names = [n for n, _ in letter.headers]
    cut = len(names) - 1 - names[::-1].index("fw.source.topic")
    return [(n, v) for n, v in letter.headers[:cut] if v is not None]


def plan_redrive(pipeline: Pipeline, letters: Iterable[Letter], redriven: Iterable[str], *,
                 step: str | None = None, since: int | None = None) -> RedrivePlan:
    """The re-drive of ``letters`` (those of ``step``, stamped at or after ``since``), given the
    dead letters the ledger says were re-driven: each one once."""
    done = set(redriven)
    plan = RedrivePlan(pipeline.name)
    for letter in letters:
        if (since is not None and letter.timestamp < since) or (step is not None and letter.step != step):
            continue
        if letter.where in done:
            plan.done.append(letter.where)
            continue
        found = redrive_of(pipeline, letter)
        if isinstance(found, str):
            plan.refused.append((letter.where, found))
        else:
            plan.items.append(found)
    return plan


# -- on the cluster -------------------------------------------------------------------------------


def read_letters(settings: Mapping[str, Any], pipeline: Pipeline) -> list[Letter]:
    """Every committed dead letter of the service (none when its topic does not exist yet)."""
    out = []
    for record in read_whole(settings, pipeline.dead_letter.name):
        letter = letter_of(record)
        if letter is not None:
            out.append(letter)
    return out


def read_redriven(settings: Mapping[str, Any], service: str) -> set[str]:
    """The dead letters the ledger says were re-driven (their coordinates)."""
    return {r.key.decode("utf-8", "replace") for r in read_whole(settings, redrive_ledger_topic(service))
            if r.key is not None and r.value is not None}


def redrive(settings: Mapping[str, Any], pipeline: Pipeline, *, step: str | None = None, since: int | None = None,
            dry_run: bool = False, internal: InternalTopics = CLUSTER_DEFAULTS) -> RedrivePlan:
    """Plan the re-drive and, unless ``dry_run``, write it in one transaction with its ledger
    records, after fencing every earlier run (module docstring)."""
    check_step(pipeline, step)
    if dry_run:
        plan = plan_redrive(pipeline, read_letters(settings, pipeline), read_redriven(settings, pipeline.name),
                            step=step, since=since)
        plan.dry_run = True
        return plan
    ledger = redrive_ledger_topic(pipeline.name)
    ensure_topics(admin_client(settings), [internal.spec(ledger, 1, {"cleanup.policy": "compact"})])
    output = KafkaOutput({**settings, "transaction.timeout.ms": 120_000}, f"{pipeline.name}-redrive")
    output.init_transactions(_TXN_TIMEOUT_S)  # an earlier run's open transaction ends here, or it committed
    plan = plan_redrive(pipeline, read_letters(settings, pipeline), read_redriven(settings, pipeline.name),
                        step=step, since=since)
    if plan.items:
        _write(output, ledger, plan.items)  # a failure leaves it open: the next run's fencing aborts it
    return plan


def _write(output: KafkaOutput, ledger: str, items: Sequence[Redrive]) -> None:
    output.begin()
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for r in items:
        output.produce(r.topic, None, None, r.timestamp, list(r.headers), r.partition)
        entry = {"step": r.step, "to": f"{r.topic}[{r.partition}]", "at": now}
        output.produce(ledger, r.of.encode(), json.dumps(entry, sort_keys=True).encode(), 0)
    output.commit(_TXN_TIMEOUT_S)
