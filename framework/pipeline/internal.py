"""The names a service makes on a cluster, and the inverse: which topics there are its own.

A service ``S`` (``Pipeline.name``, its consumer group) makes:

- ``S-<store>-changelog`` for each store (a stateful step's name, or ``_time``, the task
  clock's) and ``S-<step>-repartition`` for each ``key_by``: its **internal topics**, state
  and records in flight that only it reads. A reset deletes them; ``fw state drop`` one
  changelog;
- ``S-dead-letter`` (unless the pipeline names another): its dead letters, the user's data;
- ``S-backfills``: the ledger of its backfills (``framework.replay.ledger``), with the marker
  groups ``S-backfill-<id>`` and ``S-replay-<run>``;
- ``S-redrives``: the ledger of its dead-letter re-drives (``framework.ops.deadletters``), and
  the transactional id ``S-redrive``;
- ``S-skips``: its skip list, the records a member under ``on_error="fail"`` dead-letters
  instead of stopping at (``framework.engine.skips``, written by ``fw group skip``);
- groups ``S`` (committed offsets) and ``S-restore``, ``S-standby``, ``S-global`` (readers
  that commit nothing), and transactional ids ``S-<instance>``.

Names alone are ambiguous where one service's name extends another's with a ``-``: the topic
``orders-enrich-counts-changelog`` is store ``enrich-counts`` of ``orders`` or store
``counts`` of ``orders-enrich``. ``internal_topics`` gives such a topic to the longest name
of a service known to exist (``known_services``: a consumer group, a dead-letter topic, a
ledger or a ``_time`` changelog names one), unless the current pipeline names the topic
itself. Two services whose names overlap that way and whose steps' names collide remain
ambiguous: give the services names that are not prefixes of each other.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

CHANGELOG = "changelog"
REPARTITION = "repartition"
TIME_STORE = "_time"  # a task's watermarks; not a valid step name, so never a step's store
DEAD_LETTER_SUFFIX = "-dead-letter"
LEDGER_SUFFIX = "-backfills"
REDRIVE_LEDGER_SUFFIX = "-redrives"
SKIPS_SUFFIX = "-skips"

_STEP = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")  # as Pipeline checks step names


def changelog_topic(service: str, store: str) -> str:
    return f"{service}-{store}-{CHANGELOG}"


def repartition_topic(service: str, step: str) -> str:
    return f"{service}-{step}-{REPARTITION}"


def ledger_topic(service: str) -> str:
    return f"{service}{LEDGER_SUFFIX}"


def redrive_ledger_topic(service: str) -> str:
    """The ledger of the service's dead-letter re-drives (``framework.ops.deadletters``)."""
    return f"{service}{REDRIVE_LEDGER_SUFFIX}"


def skips_topic(service: str) -> str:
    """The service's skip list (``framework.engine.skips``)."""
    return f"{service}{SKIPS_SUFFIX}"


@dataclass(frozen=True, order=True)
class Internal:
    """An internal topic of a service: its ``kind`` (changelog or repartition) and the store or
    step it belongs to."""

    topic: str
    kind: str
    name: str


def parse_internal(service: str, topic: str) -> Internal | None:
    """``topic`` as an internal topic ``service`` could have made, else None."""
    head = f"{service}-"
    if not topic.startswith(head):
        return None
    for kind in (CHANGELOG, REPARTITION):
        tail = f"-{kind}"
        if topic.endswith(tail) and len(topic) > len(head) + len(tail):
            name = topic[len(head):-len(tail)]
            if _STEP.match(name) or (kind == CHANGELOG and name == TIME_STORE):
                return Internal(topic, kind, name)
    return None


def known_services(topics: Iterable[str], groups: Iterable[str] = ()) -> set[str]:
    """The names of services the cluster shows signs of: each consumer group, and what a
    default dead-letter topic, a backfill ledger or a ``_time`` changelog is named after."""
    found = set(groups)
    for topic in topics:
        for suffix in (DEAD_LETTER_SUFFIX, LEDGER_SUFFIX, f"-{TIME_STORE}-{CHANGELOG}"):
            if topic.endswith(suffix) and len(topic) > len(suffix):
                found.add(topic[:-len(suffix)])
    return found


def claimed_by(service: str, topic: str, known: Iterable[str]) -> str | None:
    """The longest name among ``known`` that extends ``service``'s (``orders-enrich`` for
    ``orders``) and could have made ``topic`` as an internal topic of its own, else None."""
    longer = [k for k in known if k.startswith(f"{service}-") and parse_internal(k, topic)]
    return max(longer, key=len, default=None)


def internal_topics(service: str, topics: Iterable[str], known: Iterable[str] = (),
                    mine: Iterable[str] = ()) -> list[Internal]:
    """The internal topics of ``service`` among ``topics``, sorted: those its current pipeline
    names (``mine``), and every other one ``parse_internal`` reads as the service's that no
    longer-named service among ``known`` could have made (``claimed_by``)."""
    named = set(mine)
    longer = [k for k in set(known) if k.startswith(f"{service}-")]
    out = []
    for topic in topics:
        found = parse_internal(service, topic)
        if found is not None and (topic in named or claimed_by(service, topic, longer) is None):
            out.append(found)
    return sorted(out)


def stale_stores(service: str, stores: Iterable[str], topics: Iterable[str],
                 known: Iterable[str] = ()) -> dict[str, str]:
    """The stores of ``service`` a changelog on the cluster (among ``topics``) shows, that are
    not among ``stores`` (the current pipeline's): store -> its changelog, by store name."""
    current = set(stores)
    return {t.name: t.topic for t in internal_topics(service, topics, known)
            if t.kind == CHANGELOG and t.name not in current}


def store_copies(stores: Iterable[str], store: str) -> list[str]:
    """The local directory names of ``store`` among ``stores`` (a state directory's listing):
    the store's own, and a global table's further copies ``<store>@<n>``."""
    return sorted(d for d in stores if d == store or re.fullmatch(re.escape(store) + r"@\d+", d))
