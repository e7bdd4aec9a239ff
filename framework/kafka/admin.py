"""Admin helpers: metadata probes and topic creation."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic, ResourceType

from framework.errors import AccessProblem, KafkaClientError
from framework.kafka.clients import retry_while_not_ready
from framework.kafka.logs import CLIENT_LOG
from framework.kafka.logs import QUIET_LOG as _PROBE_LOG

log = logging.getLogger("framework.kafka")
T = TypeVar("T")
_CONTROLLER_ATTEMPT_S = 5.0


def _probe_admin(bootstrap: str, extra: Mapping[str, str] | None = None) -> AdminClient:
    """A quiet admin client that gives up connecting after 1 s: for asking whether, and what,
    a cluster answers."""
    conf: dict[str, Any] = {  # values of any type: a logger too
        "bootstrap.servers": bootstrap,
        "socket.connection.setup.timeout.ms": 1000,
        "logger": _PROBE_LOG,
    }
    conf.update(extra or {})
    return AdminClient(conf)


def broker_answers(bootstrap: str, timeout_s: float = 2.0, extra: Mapping[str, str] | None = None) -> bool:
    """True when a broker at ``bootstrap`` answers a metadata request within ``timeout_s``."""
    try:
        md = _probe_admin(bootstrap, extra).list_topics(timeout=timeout_s)
    except KafkaException:
        return False
    return bool(md.brokers)


def under_replicated(bootstrap: str) -> tuple[tuple[str, ...], int]:
    """The partitions (``topic[partition]``) of the cluster at ``bootstrap`` with fewer in-sync
    replicas than replicas, and the brokers in its metadata; ``((), 0)`` when none answers."""
    try:
        md = _probe_admin(bootstrap).list_topics(timeout=5)
    except KafkaException:
        return (), 0
    under = [f"{t}[{p}]" for t, tm in md.topics.items() for p, pm in tm.partitions.items()
             if len(pm.isrs) < len(pm.replicas)]
    return tuple(sorted(under)), len(md.brokers)


def via_controller(admin: AdminClient, call: Callable[[float], T], timeout_s: float, what: str) -> T:
    """``call(seconds)``: a request librdkafka sends to the cluster's controller (CreateTopics,
    CreatePartitions, DescribeTopics), each attempt bounded to a few seconds, and sent again
    after one that timed out waiting for the controller, until ``timeout_s``. A KRaft broker's
    metadata names a random broker as the controller, a node that died among them until the
    cluster fences it (``broker.session.timeout.ms``): librdkafka waits for that node for the
    whole request timeout. Asking for the metadata again names another: it is asked before
    the first attempt too, as the controller an admin client cached may have died since (a
    member's recovery after a node left the cluster asks describe_topics through an admin
    client made at its start)."""
    deadline = time.monotonic() + timeout_s

    def attempt_s() -> float:
        return max(min(deadline - time.monotonic(), _CONTROLLER_ATTEMPT_S), 0.1)

    _ask_metadata(admin, attempt_s())
    while True:
        try:
            return call(attempt_s())
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if err is None or not _waited_for_controller(err) or time.monotonic() >= deadline:
                raise
            log.info("%s: no answer from the node named the controller (%s): asking another", what, err.str())
            _ask_metadata(admin, attempt_s())


def _ask_metadata(admin: AdminClient, timeout_s: float) -> None:
    """The cluster's metadata asked afresh: librdkafka takes the controller it names."""
    try:
        admin.list_topics(timeout=timeout_s)
    except KafkaException:
        pass  # no broker answers now: the attempt that follows waits, and times out, as it would have


def _waited_for_controller(err: KafkaError) -> bool:
    return err.code() == KafkaError._TIMED_OUT and "controller" in err.str()


def _all_done(futures: Mapping[str, Future[Any]]) -> dict[str, KafkaError | None]:
    """Each future's error (None: done), raising the first that timed out waiting for the
    controller (one request: it failed for every name) for ``via_controller`` to send again."""
    out: dict[str, KafkaError | None] = {}
    for name, fut in futures.items():
        try:
            fut.result()
            out[name] = None
        except KafkaException as exc:
            err = exc.args[0]
            if _waited_for_controller(err):
                raise
            out[name] = err
    return out


@dataclass(frozen=True)
class TopicSpec:
    """A topic the framework needs: name, partitions and topic-level configs."""

    name: str
    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)
    replication_factor: int = -1  # broker default


@dataclass(frozen=True)
class InternalTopics:
    """How the topics a service makes for itself (repartition topics, changelogs, dead
    letters, the backfill ledger) are replicated: ``replication_factor`` -1 and
    ``min_insync_replicas`` 0 take the cluster's defaults (``default.replication.factor``,
    ``min.insync.replicas``)."""

    replication_factor: int = -1
    min_insync_replicas: int = 0

    def spec(self, name: str, partitions: int, config: Mapping[str, str]) -> TopicSpec:
        if self.min_insync_replicas > 0:
            config = {"min.insync.replicas": str(self.min_insync_replicas), **config}
        return TopicSpec(name, partitions, config, self.replication_factor)


CLUSTER_DEFAULTS = InternalTopics()  # a service's own topics as the cluster's defaults replicate them


def topic_partitions(admin: AdminClient, names: Iterable[str] | None, timeout_s: float = 10.0) -> dict[str, int]:
    """Partition counts of the existing topics among ``names`` (None: of every topic)."""
    md = admin.list_topics(timeout=timeout_s)
    wanted = md.topics if names is None else names
    return {n: len(md.topics[n].partitions) for n in wanted if n in md.topics and not md.topics[n].error}


def group_ids(admin: AdminClient, timeout_s: float = 10.0) -> list[str]:
    """Every consumer group the cluster knows, by id."""
    # bounded here too: librdkafka has been seen not to answer a listing for minutes
    listing = admin.list_consumer_groups(request_timeout=timeout_s).result(timeout=timeout_s + 5)
    return sorted(g.group_id for g in listing.valid)


def ensure_topics(admin: AdminClient, specs: Iterable[TopicSpec], timeout_s: float = 30.0,
                  who: str = "this client") -> None:
    """Create the topics that do not exist yet; wait until their metadata is visible. ``who``
    (the principal) names the client in an authorization error."""
    specs = list(specs)
    existing = topic_partitions(admin, [s.name for s in specs])
    missing = [s for s in specs if s.name not in existing]
    existed: set[str] = set()
    if missing:
        new = [NewTopic(s.name, s.partitions, s.replication_factor, config=dict(s.config)) for s in missing]
        errors = via_controller(admin, lambda t: _all_done(admin.create_topics(new, operation_timeout=t,
                                                                               request_timeout=t)),
                                timeout_s, "creating topics")
        for name, err in errors.items():
            if err is not None:
                if err.code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED):
                    raise AccessProblem(
                        f"{who} may not create topic {name!r}, which does not exist or which it may not see: "
                        f"{err.str()}. Fix: create the topic beforehand, or grant it, e.g. kafka-acls --add "
                        f"--allow-principal {who} --operation Create --topic {name} (and the operations the "
                        "service needs on it: fw acls SERVICE --principal ...)") from None
                if err.code() == KafkaError.REQUEST_TIMED_OUT:
                    continue  # the controller creates it still: waited for below, as the others
                if err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise KafkaClientError(f"could not create topic {name!r}: {err.str()}") from None
                # It exists although the metadata did not show it: created a moment ago (by this
                # client, or another one), or this client may not see it. Waited for below (to be
                # listed, whatever its partitions) unless it is hidden; whether it may use a hidden
                # one is for missing_grants to tell.
                existed.add(name)
        hidden = _not_describable(admin, [s.name for s in missing], timeout_s)
        missing = [s for s in missing if s.name not in hidden]  # created, but this client may not see them
    deadline = time.monotonic() + timeout_s

    def late() -> list[str]:
        shown = topic_partitions(admin, [s.name for s in missing])
        return [s.name for s in missing
                if s.name not in shown or (s.name not in existed and shown[s.name] != s.partitions)]

    while missing and time.monotonic() < deadline:
        if not late():
            return
        time.sleep(0.1)
    if missing and (still := late()):
        raise KafkaClientError(f"topics {still} not visible after {timeout_s}s")


def _not_describable(admin: AdminClient, names: list[str], timeout_s: float) -> set[str]:
    """Those of ``names`` this client may not describe (so their metadata never shows them)."""
    if not names:
        return set()
    errors = via_controller(admin, lambda t: _all_done(admin.describe_topics(TopicCollection(names),
                                                                             request_timeout=t)),
                            timeout_s, "describing topics")
    return {name for name, err in errors.items() if err is not None
            and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED}


def topic_ids(admin: AdminClient, names: Iterable[str], timeout_s: float = 30.0) -> dict[str, str]:
    """Kafka's topic id of each topic: a topic deleted and created again has a new one. A
    topic created moments ago may not be known yet: asked again until ``timeout_s``."""
    out: dict[str, str] = {}
    for name in names:
        def describe(remaining: float, name: str = name) -> str:
            return via_controller(admin, lambda t: str(admin.describe_topics(
                TopicCollection([name]), request_timeout=t)[name].result().topic_id), remaining, f"topic {name}")

        out[name] = retry_while_not_ready(describe, timeout_s, f"topic {name}")
    return out


def add_partitions(admin: AdminClient, counts: Mapping[str, int], timeout_s: float = 30.0) -> None:
    """Give each topic of ``counts`` that many partitions (Kafka only adds them; a topic that has
    as many already is left as it is), and wait until the metadata shows them: a consumer
    assigned right after must find every partition."""
    grow = {t: n for t, n in counts.items() if topic_partitions(admin, [t], timeout_s).get(t, n) < n}
    if grow:
        added = [NewPartitions(t, n) for t, n in sorted(grow.items())]
        errors = via_controller(admin, lambda t: _all_done(admin.create_partitions(added, operation_timeout=t,
                                                                                   request_timeout=t)),
                                timeout_s, "adding partitions")
        for name, err in errors.items():
            if err is not None:
                raise KafkaClientError(f"cannot add partitions to topic {name!r} (to {grow[name]}): {err.str()}")
    deadline = time.monotonic() + timeout_s
    while (shown := topic_partitions(admin, grow, timeout_s)) != grow:
        if time.monotonic() > deadline:
            raise KafkaClientError(f"topics {sorted(grow)} show {shown} partitions {timeout_s:.0f} s after they "
                                   f"were given {grow}")
        time.sleep(0.1)


_NO_LIMIT = 2**63 - 1  # Long.MAX_VALUE: the broker's "no limit" for the timestamp settings


@dataclass(frozen=True)
class TopicLimits:
    """What a topic accepts of a produced record: its size (``max.message.bytes``) and, where
    the record's own timestamp is kept (``message.timestamp.type=CreateTime``), how far it may
    lie behind or ahead of the broker's clock (``message.timestamp.before.max.ms`` /
    ``after.max.ms``; None: any)."""

    max_message_bytes: int
    before_ms: int | None = None
    after_ms: int | None = None


def topic_limits(admin: AdminClient, names: Iterable[str],
                 timeout_s: float = 30.0) -> tuple[dict[str, TopicLimits], dict[str, str]]:
    """Each topic's limits, and why they could not be read for the others (no DescribeConfigs
    permission, for one)."""
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
    limits: dict[str, TopicLimits] = {}
    unknown: dict[str, str] = {}
    if not resources:
        return limits, unknown
    for resource, future in admin.describe_configs(resources, request_timeout=timeout_s).items():
        try:
            entries = {name: entry.value for name, entry in future.result().items()}
        except KafkaException as exc:
            unknown[resource.name] = exc.args[0].str()
            continue
        create_time = entries.get("message.timestamp.type", "CreateTime") == "CreateTime"
        limits[resource.name] = TopicLimits(
            int(entries.get("max.message.bytes") or 1_048_588),
            _time_limit(entries.get("message.timestamp.before.max.ms")) if create_time else None,
            _time_limit(entries.get("message.timestamp.after.max.ms")) if create_time else None)
    return limits, unknown


def _time_limit(value: str | None) -> int | None:
    return None if value is None or int(value) >= _NO_LIMIT else int(value)


def admin_client(settings: Mapping[str, Any]) -> AdminClient:
    """An AdminClient with the service's connection and security settings, logging to the
    client log unless ``settings`` name another ``logger``."""
    # dict[str, Any]: AdminClient takes a logger and callbacks, although confluent-kafka's
    # stubs type its config values as str | int | float | bool (a dict literal is checked
    # against that; its Consumer and Producer take Any)
    config: dict[str, Any] = {"logger": CLIENT_LOG, **settings}
    return AdminClient(config)
