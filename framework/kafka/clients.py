"""The Kafka clients of a service process: the output producer and the group consumer.

Everything else in the runtime talks to these two classes and never to confluent_kafka.
Consumed records are ``confluent_kafka.Message`` objects, which already have the
``InputRecord`` interface the tasks expect.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Literal, cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from framework.errors import (
    AccessProblem,
    ConfigError,
    FatalKafkaError,
    FencedError,
    FrameworkError,
    KafkaClientError,
    RecordTooLargeError,
    RuntimeProblem,
    TimestampError,
)
from framework.kafka.logs import CLIENT_LOG
from framework.records import Headers

log = logging.getLogger("framework.kafka")
TP = tuple[str, int]
_ANY_PARTITION = -1  # librdkafka's RD_KAFKA_PARTITION_UA: the configured partitioner chooses
_FLUSH_SLICE_S = 0.5  # a flush looks at the brokers' state this often
_COMMIT_SLICE_S = 1.0  # ... and a transaction's commit this often (KafkaOutput.commit)
_FLUSH_LOOK_AFTER_S = 0.5  # a transaction's flush this long looks at the group's coordinator each slice ...
_FLUSH_LOOK_S = 0.1  # ... of this, while a node's connection failed recently (KafkaOutput._coordinator_left)
# librdkafka names a node "host:port/id: ..." in its errors, and a coordinator's handle
# "TxnCoordinator: host:port: ...": the address, and the node id where it says one
_NODE_NAMED = re.compile(r"(?:[A-Za-z]+: )?([^\s/]+:\d+)(?:/(\d+))?: ")
_TIME_MARGIN_MS = 60_000  # how close to a topic's timestamp limits an output is refused already
# librdkafka tries a node that went away again after reconnect.backoff.ms, doubled per attempt
# up to reconnect.backoff.max.ms (10 s by default; 1 s in Kafka's Java clients), and a producer
# asks where its transaction coordinator went only after such an attempt: with a coordinator's
# node SIGKILLed, the records of a transaction waited for the node's next attempt, up to 8 s
# after the cluster had elected the new coordinator. At 1 s, they go on within 1-2 s of it
# (docs/operations.md, "Production clusters"). The producer's only: with the consumers at 1 s
# too, a member's recovery after a node's clean shutdown stood still in 2 of 5 runs of the
# rolling-restart test, which was not taken apart.
_PRODUCER_RECONNECT = {"reconnect.backoff.max.ms": 1000}
# A flush takes milliseconds unless records wait: for a topic that is gone, librdkafka holds
# them until message.timeout.ms (deleted while known) or topic.metadata.propagation.max.ms
# (30 s; never seen) before it fails them with UNKNOWN_TOPIC_OR_PART. A flush still waiting
# this long asks, once, whether every topic it writes to exists, so that a missing one is
# named at once (``absent_topics``).
GONE_CHECK_S = 2.0
_GONE_ASK_TIMEOUT_S = 5.0
_UNKNOWN_TOPIC = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC)
Verdict = Literal["retry", "abort", "reset", "fatal"]
_NOT_READY_YET = (  # a partition just created, or moving: its leader is not known yet
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC,
    # a group's coordinator not elected or still loading (a broker just started)
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    # asked of a node that then left the cluster's metadata (one SIGKILLed, fenced): ask again
    KafkaError._DESTROY_BROKER,
    # a leader just elected whose high watermark has not caught up yet ("Leader high watermark
    # is not caught up", after a whole cluster restarted): offsets asked of it come soon
    KafkaError.OFFSET_NOT_AVAILABLE,
)


def retry_while_not_ready(call: Callable[[float], Any], timeout_s: float, what: str) -> Any:
    """``call(remaining seconds)``, asked again with backoff while the broker answers that
    the topic or its leader is not ready yet, until ``timeout_s``; then its error is raised."""
    deadline = time.monotonic() + timeout_s
    backoff = 0.05
    while True:
        try:
            return call(max(deadline - time.monotonic(), 0.1))
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if err is None or not (err.retriable() or err.code() in _NOT_READY_YET):
                raise
            if time.monotonic() + backoff > deadline:
                raise
            log.info("%s not ready (%s): asking again", what, err.str())
            time.sleep(backoff)  # the broker is electing a leader: back off, then ask again
            backoff = min(backoff * 2, 1.0)


# librdkafka answers a watermark question from the partition leaders its metadata cache
# names; a leader of -1, or a node that left the broker list (one just SIGKILLed), is a
# "permanent" answer there (_UNKNOWN_PARTITION at once, no metadata asked again), and the
# cache keeps it until the next periodic refresh, minutes later. Seen on a three-node
# cluster: a restore asked for 180 s and got that answer every time.
_LEADER_UNKNOWN = (KafkaError._UNKNOWN_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                   KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError._DESTROY_BROKER)


def watermarks(client: Any, tp: TopicPartition, timeout_s: float, what: str, *, fresh: bool = False) -> tuple[int, int]:
    """``client.get_watermark_offsets(tp)`` (a Consumer's: first and next offset, the next
    as the client's isolation level sees it), asked again while the leader is not known;
    the topic's metadata is asked for afresh before each new try, so that a leader that
    moved is found. ``fresh``: never the cached answer."""
    def ask(left: float) -> tuple[int, int]:
        try:
            got = client.get_watermark_offsets(tp, timeout=left, cached=False) if fresh else \
                client.get_watermark_offsets(tp, timeout=left)
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if err is not None and err.code() in _LEADER_UNKNOWN:
                try:
                    client.list_topics(tp.topic, timeout=min(left, _GONE_ASK_TIMEOUT_S))  # updates the cache
                except KafkaException:
                    pass  # the retry below says what is wrong
            raise
        return cast(tuple[int, int], got)
    return cast(tuple[int, int], retry_while_not_ready(ask, timeout_s, what))


def each_answered(found: list[TopicPartition]) -> list[TopicPartition]:
    """``found`` (offsets the client asked the broker for), unless a partition came back with
    an error of its own (its leader not known yet, say), raised (for ``retry_while_not_ready``
    to ask again): its offset, negative, would read as "none" and send the reader to the
    log's start or end."""
    for tp in found:
        if tp.error is not None:
            raise KafkaException(tp.error)
    return found


def hidden(exc: BaseException) -> BaseException:
    """``exc``, or the error it hides: a client call made while an exception a callback raised
    is still set (an ``on_revoke`` that failed, a logger) raises ``SystemError`` ("... returned a
    result with an exception set"), chained to that exception (confluent-kafka issues 729 and
    865); it is judged as that one."""
    while isinstance(exc, SystemError):
        inner = exc.__cause__ or exc.__context__
        if inner is None:
            break
        exc = inner
    return exc


def classify(exc: BaseException) -> Verdict:
    """What to do about a transactional-API error, as confluent-kafka documents it, with one
    more verdict: ``reset`` for a producer that cannot go on but a new one can (a call that
    timed out with its outcome unknown, a fatal error other than fencing): the checkpoint's
    outcome is then settled by the next producer's ``init_transactions``, and the member goes
    on from its last checkpoint. ``fatal`` is kept for what no retry heals: fenced by another
    process, or refused by the cluster's ACLs."""
    exc = hidden(exc)
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    if err is None:
        return "reset"  # not the client's verdict (a flush that did not finish in time)
    if err.code() in _PERMANENT or _fenced(err):
        return "fatal"
    if err.fatal():
        return "reset"
    if err.txn_requires_abort():
        return "abort"
    if err.retriable():
        return "retry"
    return "abort"


_PERMANENT = (  # no new producer or retry can heal these: another process, or the ACLs
    KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.FENCED_INSTANCE_ID,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
)


def client_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a Kafka client's failure (raw, or the framework's wrapping of one)."""
    return isinstance(hidden(exc), (KafkaException, KafkaClientError))


def epoch_fenced(exc: BaseException) -> bool:
    """Whether ``exc`` is a transactional producer's fence: its epoch is no longer the
    coordinator's (``PRODUCER_FENCED``, ``INVALID_PRODUCER_EPOCH``, which librdkafka reports
    as ``_FENCED``). A newer producer with the same transactional id does that, and so does a
    coordinator that moved (a broker restarted) and settled the open transaction without it."""
    exc = hidden(exc)
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    return err is not None and (err.code() in _EPOCH_FENCES or _fenced(err))


_EPOCH_FENCES = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)


def _fenced(err: KafkaError) -> bool:
    """A fatal error whose code is only ``_FATAL``: librdkafka names the cause in its text."""
    return err.code() == KafkaError._FATAL and "fenced" in err.str().lower()


def absent_topics(producer: Producer, topics: Iterable[str]) -> list[str]:
    """Those of ``topics`` the cluster does not list; none when it cannot say now. It lists
    them all: asking for one by name would make a broker with auto.create.topics.enable
    create it."""
    try:
        listed = producer.list_topics(timeout=_GONE_ASK_TIMEOUT_S).topics
    except KafkaException:
        return []
    return sorted(t for t in set(topics) if t not in listed)


def unknown_topic(err: KafkaError) -> bool:
    """Whether a delivery failed because its topic does not exist."""
    return err.code() in _UNKNOWN_TOPIC


def no_such_topics(topics: list[str], where: str) -> RuntimeProblem:
    """The line for records written to topics that do not exist, when nothing more is known
    of them (a service knows more: ``framework.runtime.topics.topics_missing``)."""
    commands = "; ".join(f"fw topics create {t} --partitions N" for t in topics)
    what = f"topic {topics[0]!r} does" if len(topics) == 1 else f"topics {', '.join(topics)} do"
    return RuntimeProblem(f"{what} not exist on {where}: what is written there cannot be delivered (the cluster "
                          f"creates no topic on its own). Fix: create {'it' if len(topics) == 1 else 'them'} "
                          f"({commands})")


class ProducerFailed(KafkaException):
    """A record the producer refused because it failed fatally (a fence, mostly), with the
    producer's own error: the checkpointer takes it as it takes a checkpoint call failing so."""


class Connectivity:
    """What a client's error events say of the cluster: ``down_since`` (monotonic seconds) is
    set when librdkafka reports every broker connection down, and cleared by whoever has seen
    the cluster answer again (``clear``); ``fatal`` keeps the first fatal error."""

    def __init__(self) -> None:
        self.down_since: float | None = None
        self.fatal: KafkaError | None = None
        self.node_failed: dict[int, float] = {}  # node id -> when a connection to it last failed (monotonic)
        self.address_failed: dict[str, float] = {}  # "host:port" -> the same, for any handle of that node

    def on_error(self, err: KafkaError) -> None:
        """The client's ``error_cb`` (served by its poll, consume or flush)."""
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            if self.down_since is None:
                self.down_since = time.monotonic()
        elif (err.fatal() or err.code() == KafkaError._FATAL) and self.fatal is None:
            self.fatal = err
        else:
            log.debug("client error event: %s", err)
            if err.code() != KafkaError._TRANSPORT:
                return
            # librdkafka reports a node's failure once per handle while it repeats itself: the
            # second kill of a node may come as its coordinator handle's error alone
            named = _NODE_NAMED.match(err.str())
            if named is not None:
                address, node = named.groups()
                self.address_failed[address] = time.monotonic()
                if node is not None:
                    self.node_failed[int(node)] = time.monotonic()

    def clear(self) -> None:
        self.down_since = None


class KafkaOutput:
    """The process's one producer: outputs, repartition records, changelogs, dead letters."""

    def __init__(self, settings: Mapping[str, Any], transactional_id: str | None) -> None:
        conf: dict[str, Any] = {
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "partitioner": "murmur2_random",  # the Java client's partitioner: same key, same partition
            "compression.type": "lz4",
            "queue.buffering.max.messages": 500_000,
            "logger": CLIENT_LOG,
            **_PRODUCER_RECONNECT,
        }
        conf.update(settings)
        if transactional_id:
            conf["transactional.id"] = transactional_id
            # When every broker it knows is down (a one-broker cluster restarting), librdkafka
            # re-bootstraps and retires its broker handles, but the group coordinator it cached
            # for send_offsets_to_transaction stays a retired handle, and that call then waits
            # forever: its timeout is not enforced (librdkafka issues #5511 and #5456, open in
            # 2.16). Without re-bootstrap the producer reconnects to the brokers it knew.
            conf.setdefault("metadata.recovery.strategy", "none")
        self.transactional = bool(transactional_id)
        self.connectivity = Connectivity()
        conf["error_cb"] = self.connectivity.on_error
        self._full_conf = conf
        self._p = Producer(conf)
        self._conf = {k: v for k, v in conf.items() if k in ("sasl.username", "transactional.id")}
        self._output_report = None if self.transactional else self._on_delivery
        self._changelog_ends: dict[TP, int] = {}
        self._delivery_error: KafkaError | None = None
        self._gone: set[str] = set()  # topics a delivery report said do not exist
        self.on_missing: Callable[[list[str]], FrameworkError] = (
            lambda topics: no_such_topics(topics, str(conf.get("bootstrap.servers", "?"))))
        self.produced: dict[str, int] = {}  # records sent per topic (for metrics)
        self.aborts = 0
        self._time_limits: dict[str, tuple[int | None, int | None]] = {}  # topic -> (before, after) ms
        self._accepted: dict[str, tuple[float, float]] = {}  # topic -> timestamps it takes, as of the last poll
        self._stuck: list[_BoundedCall] = []  # send_offsets calls past their timeout, still running
        self._nodes_seen: set[int] = set()  # the cluster's nodes as this producer has seen them (send_offsets)
        self._addresses: dict[str, int] = {}  # "host:port" -> node id, as the metadata named them (send_offsets)
        self.group: str | None = None  # the consumer group whose offsets it sends (send_offsets)
        self._coordinator: int | None = None  # that group's coordinator as last seen (send_offsets)
        self._coordinator_at = -math.inf  # when (monotonic)

    # -- Output protocol -----------------------------------------------------------------

    def produce(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int,
                headers: Headers = None, partition: int | None = None) -> None:
        # Positional arguments (topic, value, key, partition, on_delivery, callback, timestamp,
        # headers): building a kwargs dict per record cost more than the produce call itself.
        # Under exactly-once an output needs no delivery report: librdkafka fails the
        # transaction's commit when any of its records fails delivery.
        # A record the broker would refuse fails the transaction's commit, and every retry of
        # the interval the same way: it is refused here instead, as that record's error.
        part = _ANY_PARTITION if partition is None else partition
        # a list goes as it is (key_by's fw.origin: one per repartitioned record), other sequences copied
        hdrs = (headers if type(headers) is list else list(headers)) if headers else None
        accepted = self._accepted.get(topic)
        if accepted is not None and timestamp and not accepted[0] <= timestamp <= accepted[1]:
            self._check_time(topic, timestamp)
        try:
            self._p.produce(topic, value, key, part, self._output_report, None, timestamp or 0, hdrs)
        except BufferError:
            self._p.poll(0.05)  # local queue full: let deliveries drain (backpressure)
            self._produce(topic, {"key": key, "value": value, "partition": part,
                                  "timestamp": timestamp or 0, "headers": hdrs,
                                  "on_delivery": self._output_report})
        except KafkaException as exc:  # librdkafka checks the size before queueing the record
            if exc.args[0].code() == KafkaError._FATAL:
                raise self._failed(exc) from None
            if exc.args[0].code() == KafkaError._STATE:
                self._refuse_gone()  # the transaction failed already: because a topic written to is gone?
            if exc.args[0].code() != KafkaError.MSG_SIZE_TOO_LARGE:
                raise
            raise _too_large(topic, key, value, hdrs) from None
        produced = self.produced
        produced[topic] = produced.get(topic, 0) + 1

    def produce_changelog(self, topic: str, partition: int, key: bytes, value: bytes | None,
                          headers: Headers) -> None:
        self.produce_changelogs(topic, partition, {key: value}, headers)

    def produce_changelogs(self, topic: str, partition: int, records: Mapping[bytes, bytes | None],
                           headers: Headers) -> int:
        """Every ``key: value`` of ``records`` to changelog ``topic[partition]`` (a checkpoint's
        changes of one store partition, with the checkpoint's headers); returns the count.

        Under exactly-once only the last record asks for a delivery report: a partition's records
        are delivered in order, so it gives the partition's end, and a record that fails delivery
        fails the transaction's commit (as an output does). Without a transaction every record
        reports, so that a failed one fails the checkpoint's flush."""
        n = len(records)
        if not n:
            return 0
        report = self._on_changelog
        others = None if self.transactional else report
        # Positional, as in ``produce``; the one headers list goes as it is (librdkafka copies it).
        hdrs = (headers if type(headers) is list else list(headers)) if headers else None
        produce, last = self._p.produce, n - 1
        for i, (key, value) in enumerate(records.items()):
            on_delivery = report if i == last else others
            try:
                produce(topic, value, key, partition, on_delivery, None, 0, hdrs)
            except BufferError:
                self._p.poll(0.05)  # local queue full: let deliveries drain (backpressure)
                self._produce(topic, {"key": key, "value": value, "partition": partition, "headers": hdrs,
                                      "on_delivery": on_delivery})
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError._FATAL:
                    raise self._failed(exc) from None
                if exc.args[0].code() == KafkaError._STATE:
                    self._refuse_gone()  # as in ``produce``
                raise
        produced = self.produced
        produced[topic] = produced.get(topic, 0) + n
        return n

    def _failed(self, exc: KafkaException) -> ProducerFailed:
        """A produce refused because the producer failed fatally: librdkafka says only
        ``_FATAL`` there; its error event says why (fenced, mostly), served by a poll, which
        raises it (confluent-kafka raises a fatal error from ``poll``)."""
        try:
            self._p.poll(0)
        except KafkaException as fatal:
            return ProducerFailed(fatal.args[0])
        return ProducerFailed(self.connectivity.fatal or exc.args[0])

    def _produce(self, topic: str, kwargs: dict[str, Any]) -> None:
        while True:
            try:
                self._p.produce(topic, **kwargs)
                return
            except BufferError:
                self._p.poll(0.05)  # local queue full: let deliveries drain (backpressure)

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            return
        if unknown_topic(err):
            self._gone.add(str(msg.topic()))
        if self._delivery_error is None:
            self._delivery_error = err

    def _on_changelog(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self._on_delivery(err, msg)
            return
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        # a delivered record has all three (the stubs type them Optional for error events)
        assert topic is not None and partition is not None and offset is not None
        tp = (topic, partition)
        end = offset + 1
        if end > self._changelog_ends.get(tp, -1):
            self._changelog_ends[tp] = end

    # -- checkpoint support --------------------------------------------------------------

    def poll(self) -> None:
        try:
            self._p.poll(0)
        except KafkaException as exc:  # a fatal error (confluent-kafka raises it from poll)
            raise ProducerFailed(exc.args[0]) from None
        if self._time_limits:
            self._refresh_time()

    def limit_timestamps(self, limits: Mapping[str, tuple[int | None, int | None]]) -> None:
        """Refuse, as that record's ``TimestampError``, an output whose timestamp lies further
        behind or ahead of now than its topic accepts: ``(before, after)`` ms per topic, its
        ``message.timestamp.before.max.ms`` and ``after.max.ms`` (None: any). Within
        ``_TIME_MARGIN_MS`` of a limit a record is refused too: the broker's clock is not ours."""
        self._time_limits = {t: limit for t, limit in limits.items() if limit != (None, None)}
        self._refresh_time()

    def _refresh_time(self) -> None:
        now = time.time() * 1000
        self._accepted = {t: (-math.inf if before is None else now - before + _TIME_MARGIN_MS,
                              math.inf if after is None else now + after - _TIME_MARGIN_MS)
                          for t, (before, after) in self._time_limits.items()}

    def _check_time(self, topic: str, timestamp: int) -> None:
        self._refresh_time()  # the accepted times move with the clock: judge by now
        low, high = self._accepted[topic]
        if not low <= timestamp <= high:
            raise _bad_time(topic, timestamp, self._time_limits[topic])

    def flush(self, timeout_s: float) -> None:
        """Wait for every delivery report; raise what a failed delivery reported. Gives up
        early, once every broker connection is down: nothing can be delivered then; at once
        for a topic written to that does not exist (``on_missing``); and, in a transaction,
        once the group's coordinator as last seen has left the cluster's metadata, or has
        moved from a node whose connection failed (``_coordinator_left``): the
        send_offsets_to_transaction that would follow the flush would wait for that node, so
        a new producer settles the interval now rather than after the flush and that call.
        A flush that has waited half a second looks every half second, every 0.1 s while a
        node's connection failed within the minute. It does not wait for a failure to look:
        in the cluster soak a producer's errors for a killed node's connections reached the
        member 7-9 s after the kill, about when the cluster fenced the node."""
        started = time.monotonic()
        deadline, asked = started + timeout_s, False
        watch = self.transactional and self.group is not None
        while True:
            looking = quick = watch and time.monotonic() - started >= _FLUSH_LOOK_AFTER_S
            if looking:
                self._p.poll(0)  # the connection errors reported meanwhile: a flush does not serve them
                quick = bool(self._recently_failed())  # slices short enough to see a coordinator move
            remaining = self._p.flush(min(_FLUSH_LOOK_S if quick else _FLUSH_SLICE_S,
                                          max(deadline - time.monotonic(), 0)))
            if not remaining:
                break
            if self.connectivity.down_since is not None:
                raise KafkaClientError(f"{remaining} records not delivered: every broker connection is down")
            if looking:
                left = self._coordinator_left()
                if left:
                    raise KafkaClientError(f"{remaining} records not delivered yet, and the offsets could not follow "
                                           f"them: {left}")
            if not asked and time.monotonic() - started >= GONE_CHECK_S:
                asked = True
                self._refuse_gone()
            if time.monotonic() >= deadline:
                raise KafkaClientError(f"{remaining} records not delivered within {timeout_s:.1f}s: their partitions' "
                                       "leaders did not acknowledge them (nodes away, or fewer replicas in sync "
                                       "than min.insync.replicas)")
        if self._gone:
            self._refuse_gone()
        if self._delivery_error is not None:
            err, self._delivery_error = self._delivery_error, None
            raise KafkaException(err)

    def _refuse_gone(self) -> None:
        """Raise ``on_missing`` for the topics this producer wrote to that do not exist: those
        a delivery report named, else those the cluster no longer lists."""
        gone = sorted(self._gone) or absent_topics(self._p, self.produced)
        if gone:
            raise self.on_missing(gone)

    def take_changelog_ends(self) -> dict[TP, int]:
        """Next offset per changelog partition written since the last call."""
        ends, self._changelog_ends = self._changelog_ends, {}
        return ends

    def init_transactions(self, timeout_s: float) -> None:
        try:
            self._p.init_transactions(timeout_s)
            self._moved()  # the nodes and the group's coordinator it starts with (send_offsets)
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                who = (f"User:{self._conf['sasl.username']}" if self._conf.get("sasl.username")
                       else "this client's principal")
                txid = self._conf.get("transactional.id")
                raise AccessProblem(
                    f"{who} may not use transactional id {txid!r}: {err.str()}. Fix: grant it, e.g. kafka-acls "
                    f"--add --allow-principal {who} --operation Write --transactional-id {txid} (or names with "
                    "its service's prefix: --resource-pattern-type prefixed)") from None
            if err.retriable() and not err.fatal():
                raise  # the coordinator not reachable or loading yet: the caller may ask again
            raise FatalKafkaError(f"init_transactions failed: {err.str()}") from exc

    def begin(self) -> None:
        self._p.begin_transaction()

    def send_offsets(self, positions: Mapping[TP, int], group_metadata: Any, timeout_s: float) -> None:
        """send_offsets_to_transaction, bounded here: librdkafka does not enforce the call's
        own timeout, and once the group coordinator it cached has died it may wait for that
        node however long, even after the cluster moved the coordinator elsewhere (librdkafka
        issues 5456 and 5511, open in 2.16). The call runs on a thread of its own. Past a
        second (half a second while a node's connection failed within the last minute: the
        coordinator may be moving), the cluster's metadata is asked for every half second, and
        the call is given up as soon as it says that the coordinator librdkafka waits for may
        be a node that died (``_moved``): waiting cannot help then. So is a call past
        ``timeout_s`` or 15 s, whichever is shorter. A given-up call is left there, holding this producer, and a
        ``TimeoutError`` (the checkpoint's outcome unknown) sends the member to a new producer
        (``renew``)."""
        offsets = [TopicPartition(t, p, o) for (t, p), o in positions.items()]
        call = _BoundedCall(self._p.send_offsets_to_transaction, offsets, group_metadata, timeout_s)
        bound = min(timeout_s, _SEND_OFFSETS_BOUND_S)
        waited, step = 0.0, _SEND_OFFSETS_ASK_S if self._recently_failed() else _SEND_OFFSETS_QUICK_S
        while not call.wait(min(step, bound - waited)):
            waited += step
            moved = self._moved()
            if moved or waited >= bound:
                self._stuck.append(call)
                why = moved or "the producer waits for a group coordinator it no longer reaches"
                raise TimeoutError(f"send_offsets_to_transaction did not return within {waited:.1f} s: {why}")
            step = _SEND_OFFSETS_ASK_S
        call.result()
        # The call reached the coordinator librdkafka knows: the one the metadata names now, asked
        # for after a call once a second while a node's connection failed recently (a coordinator
        # may be moving), else once in ten: when a node fails next, a flush knows whether the
        # coordinator was there (``_coordinator_left``) without waiting for the next call.
        every = _COORDINATOR_SEEN_FAILED_S if self._recently_failed() else _COORDINATOR_SEEN_S
        if time.monotonic() - self._coordinator_at >= every:
            self._coordinator, self._coordinator_at = None, time.monotonic()
            self._look("offsets that reached the group's coordinator")

    def _moved(self) -> str | None:
        """Why the group coordinator this producer cached may be a node that cannot answer,
        from the cluster's metadata asked now; None when nothing says so (or the cluster
        cannot say now). It may, when:

        - a node this producer has seen, in the metadata or in its own connection errors, is
          no longer listed (it died and the cluster fenced it, or it shut down);
        - the group's coordinator (the leader of its partition of ``__consumer_offsets``) is
          another node than when last seen;
        - a connection to another node than the coordinator failed within the last minute:
          the coordinator may have moved from there (and the node come back) unseen.

        The nodes listed, and the coordinator, are remembered as seen."""
        self._p.poll(0)  # the connection errors reported meanwhile (``Connectivity``)
        seen = self._look("a stuck send_offsets_to_transaction")
        if seen is None:
            return None
        now, failed, before, coordinator = seen
        gone = sorted((self._nodes_seen | set(failed)) - now) if now else []
        if gone:
            return (f"node{'s' if len(gone) > 1 else ''} {', '.join(map(str, gone))} left the cluster's metadata "
                    "(stopped, and fenced by the cluster): its group coordinator moved")
        if coordinator is None:
            return None
        if before is not None and coordinator != before:
            return f"the group's coordinator moved from node {before} to node {coordinator}"
        elsewhere = sorted(n for n in failed if n != coordinator)
        if elsewhere:
            return (f"node {elsewhere[0]} failed {time.monotonic() - failed[elsewhere[0]]:.0f} s ago and the group's "
                    f"coordinator is node {coordinator} now: it may have moved from there")
        return None

    def _coordinator_left(self) -> str | None:
        """Why the group coordinator this producer cached is a node it can no longer reach, from
        the cluster's metadata asked now: the coordinator as last seen is a node no longer
        listed, or a node whose connection failed within ``_RECENTLY_FAILED_S`` and that is no
        longer the coordinator. None when nothing says so; a look while the coordinator is not
        known (the metadata did not say after the last send_offsets_to_transaction) only
        remembers it."""
        seen = self._look("a flush that waits")
        if seen is None:
            return None
        now, failed, before, coordinator = seen
        if before is None or not now:
            return None
        if before not in now:
            return (f"node {before}, the group's coordinator, left the cluster's metadata (stopped, and fenced by "
                    "the cluster)")
        if before not in failed:
            return None
        if coordinator is not None and coordinator != before:
            return (f"the group's coordinator moved from node {before}, whose connection failed "
                    f"{time.monotonic() - failed[before]:.0f} s ago, to node {coordinator}")
        return None

    def _look(self, who: str) -> tuple[set[int], dict[int, float], int | None, int | None] | None:
        """The cluster's metadata asked now, for ``_moved`` and ``_coordinator_left``: the nodes
        listed, those whose connection failed recently, and the group's coordinator as last seen
        and as seen now (then remembered, unless the metadata does not say); None when the
        metadata did not come."""
        try:
            md = self._p.list_topics(_OFFSETS_TOPIC, timeout=_SEND_OFFSETS_ASK_S)
        except KafkaException as exc:
            log.debug("%s: the metadata did not come (%s)", who, exc)
            return None
        now = set(md.brokers)
        self._addresses.update({f"{b.host}:{b.port}": n for n, b in md.brokers.items()})
        failed = self._recently_failed()
        before, coordinator = self._coordinator, _coordinator_of(md, self.group)
        if coordinator is not None:
            self._coordinator = coordinator
        log.debug("%s: nodes %s listed, %s seen, %s failed recently; the group's coordinator node %s, %s before",
                  who, sorted(now), sorted(self._nodes_seen), sorted(failed), coordinator, before)
        self._nodes_seen |= now
        return now, failed, before, coordinator

    def _recently_failed(self) -> dict[int, float]:
        """The nodes whose connection failed within ``_RECENTLY_FAILED_S``, and when: those an
        error named, and those at an address an error named (a coordinator's handle), as the
        metadata last named them."""
        now, failed = time.monotonic(), dict(self.connectivity.node_failed)
        for address, at in self.connectivity.address_failed.items():
            node = self._addresses.get(address)
            if node is not None and at > failed.get(node, -math.inf):
                failed[node] = at
        return {n: at for n, at in failed.items() if now - at < _RECENTLY_FAILED_S}

    def commit(self, timeout_s: float) -> None:
        """commit_transaction, in slices of ``_COMMIT_SLICE_S``: librdkafka lets a commit that
        timed out be asked again, and between two slices the producer's connection errors are
        served. Once every broker connection is down the commit is given up, its outcome
        unknown (a new producer's ``init_transactions`` settles it), and the member says it
        waits for its cluster. Before, a commit under way when the only broker was SIGKILLed
        waited out the whole outage, the member ready all along, and went on when it came back."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            try:
                self._p.commit_transaction(max(min(_COMMIT_SLICE_S, left), 0.1))
                return
            except KafkaException as exc:
                err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                if err is not None and err.txn_requires_abort():
                    self._refuse_gone()  # records failed delivery (outputs have no report of their own): why?
                if err is None or err.code() != KafkaError._TIMED_OUT or not err.retriable() or \
                        left <= _COMMIT_SLICE_S:
                    raise
            self._p.poll(0)  # the connection errors reported meanwhile: a commit does not serve them
            if self.connectivity.down_since is not None:
                raise KafkaClientError("the transaction's commit did not complete: every broker connection is down")

    def abort(self, timeout_s: float) -> None:
        self._delivery_error = None
        self._changelog_ends = {}
        self.aborts += 1
        self._p.abort_transaction(timeout_s)

    def renew(self) -> None:
        """Drop this producer, whatever its state, for a new one with the same settings (and
        transactional id): what it still held is purged, never sent. A transaction it left
        open is settled by the new one's ``init_transactions``: completed if its commit had
        reached the coordinator, aborted otherwise."""
        old: Producer | None
        old, self._p = self._p, None  # type: ignore[assignment]
        self._stuck = [c for c in self._stuck if not c.done.is_set()]
        if any(c.producer is old for c in self._stuck):
            # a call still runs on it: the producer is its thread's, dropped when the call returns
            log.debug("replacing a producer whose send_offsets_to_transaction has not returned")
            old = None
        try:
            if old is not None:
                # blocking: librdkafka's destroy must not race the purge of its own queues
                old.purge(in_queue=True, in_flight=True, blocking=True)
                old.poll(0)  # its purged records' reports, dropped just below
        except KafkaException as exc:
            log.debug("purging the producer being replaced: %s", exc)
        del old  # librdkafka's destroy: no flush, no abort (the broker may be away)
        self._delivery_error = None
        self._gone = set()
        self._changelog_ends = {}
        self._nodes_seen, self._coordinator, self._coordinator_at = set(), None, -math.inf
        self._addresses = {}
        self.connectivity = Connectivity()
        self._full_conf["error_cb"] = self.connectivity.on_error
        self._p = Producer(self._full_conf)


_LOST_RECENTLY_S = 60.0  # a static consumer fenced this soon after its session was lost rejoins ...
_REJOIN_WINDOW_S = 300.0  # ... unless it is the third time within this window (GroupConsumer)
_REJOIN_LIMIT = 3


def _instance_fenced(err: KafkaError) -> bool:
    return err.code() == KafkaError.FENCED_INSTANCE_ID or "fenced" in err.str().lower()


_OFFSETS_TOPIC = "__consumer_offsets"


def _coordinator_of(md: Any, group: str | None) -> int | None:
    """The node coordinating ``group`` in the metadata ``md`` of ``__consumer_offsets``: the
    leader of the group's partition (Kafka's: its id's Java hash code, made positive, modulo
    the partitions); None when the metadata does not say (no leader now, or no Describe on it)."""
    topic = md.topics.get(_OFFSETS_TOPIC)
    if group is None or topic is None or topic.error is not None or not topic.partitions:
        return None
    part = topic.partitions.get(coordinator_partition(group, len(topic.partitions)))
    return part.leader if part is not None and part.error is None and part.leader >= 0 else None


def coordinator_partition(key: str, partitions: int) -> int:
    """The partition of ``__consumer_offsets`` (a group id) or ``__transaction_state`` (a
    transactional id) of ``partitions`` that holds ``key``, whose leader coordinates it, as
    Kafka computes it: the key's Java ``String.hashCode``, made positive, modulo the partitions."""
    h = 0
    for unit in key.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if h == -(1 << 31) else abs(h)) % partitions


_RECENTLY_FAILED_S = 60.0  # a node whose connection failed this recently may have held the coordinator
_SEND_OFFSETS_BOUND_S = 15.0  # a send_offsets_to_transaction longer than this is given up (KafkaOutput)
_SEND_OFFSETS_QUICK_S = 1.0  # ... and one longer than this asks whether a node left the cluster ...
_SEND_OFFSETS_ASK_S = 0.5  # ... every half second
_COORDINATOR_SEEN_S = 10.0  # the group's coordinator is asked for after a send_offsets at most this often ...
_COORDINATOR_SEEN_FAILED_S = 1.0  # ... or this often while a node's connection failed recently


class _BoundedCall:
    """A producer's blocking call on a daemon thread of its own, waited for with a bound."""

    def __init__(self, method: Callable[..., Any], *args: Any) -> None:
        self.producer = getattr(method, "__self__", None)
        self.done = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(method, args), name="fw-producer-call", daemon=True)
        self._thread.start()

    def _run(self, method: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            method(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            self._error = exc
        finally:
            self.done.set()

    def wait(self, timeout_s: float) -> bool:
        return self.done.wait(timeout_s)

    def result(self) -> None:
        if self._error is not None:
            raise self._error


class GroupConsumer:
    """The service's consumer-group member.

    Assignment keeps inputs co-partitioned (partition i of every input on one member): the
    classic protocol with the client-side ``range`` assignor (eager: a rebalance revokes every
    partition, then assigns), or, with ``group.protocol=consumer`` (KIP-848), the broker's
    ``range`` assignor, whose changes are incremental: only partitions that move are revoked.

    ``instance_id`` makes the member static (``group.instance.id``, classic protocol only): a
    member restarted within the session timeout gets its partitions back without a rebalance.
    librdkafka sends no LeaveGroup when a static member closes, so its partitions would wait
    for the session timeout; with ``leave_on_close`` it leaves the group on ``close`` as a
    dynamic member does (docs/operations.md, "Failover").
    """

    def __init__(self, settings: Mapping[str, Any], group: str, *, client_id: str | None = None,
                 instance_id: str | None = None, leave_on_close: bool = True,
                 stats_interval_ms: int = 0) -> None:
        conf: dict[str, Any] = {
            "group.id": group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "max.poll.interval.ms": 300_000,
            # librdkafka stops fetching a partition while queued.min.messages (100,000) wait and
            # then waits this long (1 s by default) before it looks again: a member with few
            # partitions drained them faster than that and waited (fw-n, W1: 234,000-240,000
            # records/s with the default, 320,000-330,000 with 10 ms; benchmarks/NOTES.md)
            "fetch.queue.backoff.ms": 10,
            "logger": CLIENT_LOG,
        }
        conf.update(group_protocol_settings(settings))
        conf.update(settings)
        self.incremental = conf.get("group.protocol") == "consumer"
        if self.incremental:
            _drop_classic_only(conf)
        self.static = _join_static(conf, instance_id, self.incremental)
        self.leave_on_close = leave_on_close
        if client_id:  # names the member's status endpoint to `fw status` (docs/observability.md)
            conf["client.id"] = client_id
        if stats_interval_ms:
            conf["statistics.interval.ms"] = stats_interval_ms
            conf["stats_cb"] = self._on_stats
        self.connectivity = Connectivity()
        conf["error_cb"] = self.connectivity.on_error
        self.group, self.instance_id = group, conf.get("group.instance.id")
        self._conf = conf
        self._c = Consumer(conf)
        self._subscription: tuple[list[str], Callable[..., None], Callable[..., None], Callable[..., None]] | None = None
        self._lost_at: float | None = None  # when the group last took the partitions away (session lost)
        self._rejoins: list[float] = []  # when a new consumer rejoined after its own rejoin fenced it
        self.paused: set[TP] = set()
        self._stats: dict[TP, tuple[int, int]] = {}  # (last stable offset, committed offset)

    def _on_stats(self, raw: str) -> None:
        """librdkafka's statistics (served by ``consume``): each partition's last stable offset
        (the end a read_committed consumer reads to; librdkafka asks for it even while the
        partition is paused) and committed offset."""
        stats: dict[TP, tuple[int, int]] = {}
        for topic, t in json.loads(raw).get("topics", {}).items():
            for p, s in t.get("partitions", {}).items():
                if int(p) >= 0:
                    stats[(topic, int(p))] = (s.get("ls_offset", -1), s.get("committed_offset", -1))
        self._stats = stats

    @property
    def partition_stats(self) -> dict[TP, tuple[int, int]]:
        """``(end, position)`` per assigned partition (-1 where unknown): the last stable offset
        from the statistics, the position consumed to (the committed offset before any)."""
        out: dict[TP, tuple[int, int]] = {}
        stats = self._stats
        for tp in self._c.position(self._c.assignment()):
            key = (tp.topic, tp.partition)
            end, committed = stats.get(key, (-1, -1))
            out[key] = (end, tp.offset if tp.offset >= 0 else committed)
        return out

    def subscribe(self, topics: list[str], on_assign: Callable[[list[TP]], Iterable[TP]],
                  on_revoke: Callable[[list[TP]], None], on_lost: Callable[[list[TP]], None]) -> None:
        """Join the group. ``on_assign`` gets the partitions added and returns those to hold
        paused (until ``resume``); ``on_revoke`` and ``on_lost`` get those taken away: all of
        them under the eager classic protocol, only those that move under the consumer
        protocol (the others keep being consumed meanwhile).

        Only the held partitions are paused, at once after they are assigned (``on_assign``
        runs before). librdkafka starts a new partition's fetcher from its own thread once it
        has the committed offset; a pause or resume the application issues at that moment can
        take a newer version than the start, which is then dropped as outdated: the partition
        is never fetched, and nothing says so. A partition with no state to restore is
        therefore never paused and resumed on its way in, and a held one is paused before its
        committed offset can have come back."""
        def assigned(consumer: Consumer, parts: list[TopicPartition]) -> None:
            held = list(on_assign([(tp.topic, tp.partition) for tp in parts]))
            if self.incremental:
                consumer.incremental_assign(parts)
            else:
                consumer.assign(parts)
            self.pause(held)

        def released(consumer: Consumer, parts: list[TopicPartition]) -> None:
            # a pause outlives the assignment in librdkafka: lift it, or the partition would
            # still be paused when it comes back
            self.resume([(tp.topic, tp.partition) for tp in parts])
            if self.incremental:
                consumer.incremental_unassign(parts)
            else:
                consumer.unassign()

        def revoked(consumer: Consumer, parts: list[TopicPartition]) -> None:
            on_revoke([(tp.topic, tp.partition) for tp in parts])
            released(consumer, parts)

        def lost(consumer: Consumer, parts: list[TopicPartition]) -> None:
            self._lost_at = time.monotonic()
            on_lost([(tp.topic, tp.partition) for tp in parts])
            released(consumer, parts)

        self._subscription = (topics, assigned, revoked, lost)
        self._c.subscribe(topics, on_assign=assigned, on_revoke=revoked, on_lost=lost)

    def consume(self, n: int, timeout_s: float) -> list[Message]:
        """Up to ``n`` records (and error events); a fatal error of the consumer is raised
        (``FatalKafkaError`` naming the cause): a consumer in that state never recovers. A
        static member fenced by its own rejoin is the exception: a new consumer joins in its
        place (``_fenced_by_itself``), and nothing is returned this time. What one of the
        rebalance callbacks raised is raised as itself (``hidden``)."""
        try:
            msgs = self._c.consume(n, timeout_s)
        except SystemError as exc:
            raise hidden(exc) from None
        if self.connectivity.fatal is not None:
            if self._rejoined(self.connectivity.fatal):
                return []
            raise self.fatal_error(self.connectivity.fatal)
        return msgs

    def _rejoined(self, err: KafkaError) -> bool:
        """Whether fatal ``err`` was a fence by the member's own rejoin, now replaced by a new
        consumer (``_rejoin``)."""
        if not self._fenced_by_itself(err):
            return False
        self._rejoin(err)
        return True

    def _fenced_by_itself(self, err: KafkaError) -> bool:
        """Whether fatal ``err`` is a static member fenced by its own rejoin: its session timed
        out (the group coordinator unreachable that long: nodes down), librdkafka rejoined, and
        the group fenced the member's older registration, which librdkafka makes fatal
        (librdkafka issue 3437). Not when the session was not lost within ``_LOST_RECENTLY_S``
        before (another process with this instance id), nor the third time within
        ``_REJOIN_WINDOW_S``."""
        if not (self.static and _instance_fenced(err)) or self._lost_at is None:
            return False
        now = time.monotonic()
        if now - self._lost_at > _LOST_RECENTLY_S:
            return False
        self._rejoins = [t for t in self._rejoins if now - t < _REJOIN_WINDOW_S]
        return len(self._rejoins) < _REJOIN_LIMIT - 1

    def _rejoin(self, err: KafkaError) -> None:
        """A new consumer in place of the fenced one, subscribed as it was: it joins with the
        same instance id, which replaces the registration the group fenced."""
        log.warning("the group fenced this member's rejoin after its session timed out (%s): a new consumer "
                    "joins group %r with instance id %r", err.str(), self.group, self.instance_id)
        self._rejoins.append(time.monotonic())
        self._lost_at = None
        old, self.paused = self._c, set()
        try:
            old.close()
        except KafkaException as exc:
            log.debug("closing the fenced consumer: %s", exc)
        self.connectivity = Connectivity()
        self._conf["error_cb"] = self.connectivity.on_error
        self._c = Consumer(self._conf)
        if self._subscription is not None:
            topics, assigned, revoked, lost = self._subscription
            self._c.subscribe(topics, on_assign=assigned, on_revoke=revoked, on_lost=lost)

    def check_error(self, err: KafkaError) -> None:
        """An error the consumer returned in place of a record: a fatal one is raised
        (librdkafka's ``_FATAL`` event says ``fatal()`` false, and is fatal all the same), the
        loss of the brokers goes to the debug log (the service's recovery reports an outage
        once), anything else is logged."""
        if err.fatal() or err.code() == KafkaError._FATAL:
            if self._rejoined(err):
                return
            raise self.fatal_error(err)
        if err.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
            log.debug("consumer: %s", err)
        else:
            log.warning("consumer: %s", err)

    def fatal_error(self, err: KafkaError) -> FatalKafkaError:
        """The one line for the consumer's fatal ``err`` (an error event or record)."""
        text = err.str()
        if _instance_fenced(err):
            return FencedError(
                f"another member joined group {self.group!r} with this member's instance id {self.instance_id!r} "
                "(its static group.instance.id) and the group fenced this one: two processes run with "
                f"--instance-id {self.instance_id}. Fix: give every member its own --instance-id (fw run "
                "--processes names its children itself), or stop the other process")
        return FatalKafkaError(f"the group member's consumer failed fatally: {text}. It is restarted with "
                               "the process: the member continues from its last checkpoint")

    def pause(self, tps: Iterable[TP]) -> None:
        parts = [TopicPartition(t, p) for t, p in tps]
        if parts:
            self._c.pause(parts)
            self.paused.update((tp.topic, tp.partition) for tp in parts)

    def resume(self, tps: Iterable[TP]) -> None:
        """Resume those of ``tps`` that ``pause`` or ``subscribe`` paused (no others: a resume
        is a versioned operation in librdkafka like a pause, see ``subscribe``)."""
        parts = [TopicPartition(t, p) for t, p in tps if (t, p) in self.paused]
        if parts:
            self._c.resume(parts)
            self.paused.difference_update((tp.topic, tp.partition) for tp in parts)

    def backlog(self, timeout_s: float = 5.0) -> dict[TP, tuple[int, int]]:
        """``(position, end offset)`` of every assigned partition whose end is past its
        position: records wait there. The end is the client's cached high watermark (control
        markers and aborted records are skipped by the position, so a partition read to its
        end shows none), or the broker's where the client has none (a partition never
        fetched); where nothing was consumed yet the committed offset is the position."""
        positions = self._c.position(self._c.assignment())
        unknown = [TopicPartition(tp.topic, tp.partition) for tp in positions if tp.offset < 0]
        committed = {}
        if unknown:
            try:
                committed = {(tp.topic, tp.partition): tp.offset
                             for tp in self._c.committed(unknown, timeout=timeout_s)}
            except KafkaException:
                return {}  # the broker does not answer: the client log says why
        out: dict[TP, tuple[int, int]] = {}
        for tp in positions:
            key = (tp.topic, tp.partition)
            pos = tp.offset if tp.offset >= 0 else max(committed.get(key, 0), 0)
            try:
                _, end = self._c.get_watermark_offsets(tp, cached=True)
                if end < 0:
                    _, end = self._c.get_watermark_offsets(tp, timeout=timeout_s)
            except KafkaException:
                continue
            if end > pos:
                out[key] = (pos, end)
        return out

    def group_lag(self, tps: Iterable[TP], timeout_s: float = 5.0) -> dict[TP, int]:
        """Records waiting in each of ``tps`` (any partitions, assigned or not) past the group's
        committed offset (the log's start where none); only those with some. Empty when the
        broker does not answer."""
        parts = [TopicPartition(t, p) for t, p in tps]
        if not parts:
            return {}
        try:
            committed = self._c.committed(parts, timeout=timeout_s)
            out = {}
            for tp in committed:
                start, end = self._c.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=timeout_s)
                waiting = end - (tp.offset if tp.offset >= 0 else start)
                if waiting > 0:
                    out[(tp.topic, tp.partition)] = waiting
            return out
        except KafkaException:
            return {}  # the broker does not answer: the client log says why

    def stable_end(self, tp: TP, timeout_s: float = 5.0) -> int | None:
        """The last stable offset (read_committed reads stop there: an open transaction
        upstream holds it back); asks the broker. None when it does not answer."""
        try:
            return self._c.get_watermark_offsets(TopicPartition(*tp), timeout=timeout_s)[1]
        except KafkaException:
            return None

    def assigned(self) -> set[TP]:
        return {(tp.topic, tp.partition) for tp in self._c.assignment()}

    def positions(self) -> dict[TP, int]:
        """Next offset to consume per assigned partition that has consumed something."""
        return {(tp.topic, tp.partition): tp.offset for tp in self._c.position(self._c.assignment())
                if tp.offset >= 0}

    def rewind_to_committed(self, tps: Iterable[TP], timeout_s: float) -> None:
        """Seek to the group's committed offsets (the start when none): after an abort."""
        for tp, offset in self.committed(tps, timeout_s).items():
            self._c.seek(TopicPartition(*tp, OFFSET_BEGINNING if offset is None else offset))

    def committed(self, tps: Iterable[TP], timeout_s: float) -> dict[TP, int | None]:
        """The group's committed offset of each of ``tps`` (None: none committed), of any
        partition, assigned here or not. A partition the broker gives an error for is asked
        again, then an error itself: read as "none", it would be processed again from its
        start."""
        parts = [TopicPartition(t, p) for t, p in tps]
        if not parts:
            return {}
        found = retry_while_not_ready(lambda left: each_answered(self._c.committed(parts, timeout=left)), timeout_s,
                                      "the group's committed offsets")
        return {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else None) for tp in found}

    def seek(self, tp: TP, offset: int) -> None:
        self._c.seek(TopicPartition(tp[0], tp[1], offset))

    def group_metadata(self) -> Any:
        return self._c.consumer_group_metadata()

    def member_id(self) -> str | None:
        """The member id the group coordinator gave this member (None before it joined)."""
        return self._c.memberid() or None

    def commit(self, positions: Mapping[TP, int]) -> None:
        if positions:
            self._c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in positions.items()],
                           asynchronous=False)

    def close(self, leave: bool = True) -> None:
        """Leave the group (a static member only with ``leave_on_close``) and close. A consumer
        that failed fatally cannot leave, nor one whose cluster is away (``leave`` false): it is
        only closed."""
        try:
            if leave and self.static and self.leave_on_close and self.connectivity.fatal is None:
                self._leave(_LEAVE_TIMEOUT_S)
        finally:
            self._c.close()

    def _leave(self, timeout_s: float) -> None:
        # librdkafka skips the LeaveGroup of a static member that closes (KIP-345), but not of
        # one that unsubscribes: the revoke is served here, then the LeaveGroup goes out and
        # the member id is cleared. Records polled meanwhile are dropped: none was processed,
        # so none is committed (the final checkpoint came before).
        self._c.unsubscribe()
        deadline = time.monotonic() + timeout_s
        while self._c.memberid() and time.monotonic() < deadline:
            self._c.poll(0.05)
        if self._c.memberid():
            log.warning("static member did not leave the group within %.0f s: its partitions move "
                        "when its session times out", timeout_s)


def group_protocol_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The group settings the framework adds to the user's ``kafka.consumer`` for its protocol.

    Classic (default): the client-side ``range`` assignor, which gives partition i of every
    co-partitioned input to the same member; a 45 s session (Kafka's and Kafka Streams'
    default): longer than a group coordinator takes to move when its node dies (the cluster
    fences the node after ``broker.session.timeout.ms``, 9 s, then elects the new leader of the
    group's offsets partition and loads the group), so a member rides that out in its
    session instead of losing its partitions (and, static, being fenced by its own rejoin). ``group.protocol=consumer``: the
    broker's ``range`` assignor, which does the same when every member subscribes to the same
    topics, all with the same partition count (the broker's default, ``uniform``, does not);
    session and heartbeat are the broker's (``group.consumer.session.timeout.ms``,
    ``group.consumer.heartbeat.interval.ms``)."""
    if settings.get("group.protocol") != "consumer":
        return {"partition.assignment.strategy": "range", "session.timeout.ms": 45_000,
                "heartbeat.interval.ms": 1_000}
    assignor = settings.get("group.remote.assignor", "range")
    if assignor != "range":
        raise ConfigError(
            f"kafka.consumer group.remote.assignor={assignor!r} does not keep the inputs co-partitioned "
            "(partition i of every input on one member). Fix: leave it unset, or set it to 'range'")
    return {"group.remote.assignor": "range"}


def _join_static(conf: dict[str, Any], instance_id: str | None, incremental: bool) -> bool:
    """Make the member static (``group.instance.id``) when it has an instance id and the
    classic protocol; whether it is."""
    if not instance_id:
        return False
    if incremental:
        # The broker refuses a consumer-protocol static member whose predecessor did not leave
        # (UNRELEASED_INSTANCE_ID) until that one's session times out, and librdkafka makes the
        # refusal fatal: a member restarted after a crash would stop at once.
        log.warning("group.protocol=consumer: instance %s joins as a dynamic member (no group.instance.id): "
                    "a static member restarted after a crash is refused until its predecessor's session "
                    "times out", instance_id)
        return False
    conf["group.instance.id"] = instance_id
    return True


def _drop_classic_only(conf: dict[str, Any]) -> None:
    """librdkafka refuses these with ``group.protocol=consumer`` (the broker owns them): a
    setting meant for the classic protocol is dropped with a warning instead of failing."""
    for key, owner in _CLASSIC_ONLY.items():
        if key in conf:
            log.warning("kafka.consumer %s=%s is ignored with group.protocol=consumer: %s", key,
                        conf.pop(key), owner)


_LEAVE_TIMEOUT_S = 10.0
_CLASSIC_ONLY = {
    "session.timeout.ms": "the broker sets it (group.consumer.session.timeout.ms, at least "
                          "group.consumer.min.session.timeout.ms, 45000 by default)",
    "heartbeat.interval.ms": "the broker sets it (group.consumer.heartbeat.interval.ms)",
    "partition.assignment.strategy": "the broker assigns (group.remote.assignor=range)",
    "group.protocol.type": "the consumer protocol has none",
}


def reader_settings(settings: Mapping[str, Any], group: str, *, fetch_wait_ms: int,
                    offset_reset: str, prefetch: int = 1_000_000) -> dict[str, Any]:
    """A reader that is assigned its partitions and reads them to an end (a restore, a standby
    copy, a replay's range): read_committed, never in a group, nothing committed, the end of
    each partition reported. ``offset_reset``: where a start no longer in the log goes
    (``earliest``, or ``error`` to be told). ``prefetch``: the records per partition it keeps
    fetched ahead."""
    return {
        "group.id": group, "enable.auto.commit": False, "isolation.level": "read_committed",
        "enable.partition.eof": True, "auto.offset.reset": offset_reset, "logger": CLIENT_LOG,
        "fetch.wait.max.ms": fetch_wait_ms,
        # A partition read as fast as its records are applied: with librdkafka's defaults it
        # stops fetching while 100,000 messages wait and then waits fetch.queue.backoff.ms
        # (1 s) before it fetches again. One partition of 254,304 records: a replay task's
        # read took 1.6 s instead of 0.6 s, a restore's 1.2 s instead of 0.2 s. The bytes it
        # holds are bounded by queued.max.messages.kbytes (64 MB per reader), but each record
        # costs a few hundred bytes more than its bytes: a restore's small records keep
        # ``prefetch`` lower (ChangelogReader).
        "queued.min.messages": prefetch, "fetch.queue.backoff.ms": 10,
        **settings,
    }


class ChangelogReader:
    """Reads changelog partitions (read_committed) for restores; never joins a group."""

    def __init__(self, settings: Mapping[str, Any], group: str, *, fetch_wait_ms: int = 500) -> None:
        """``fetch_wait_ms``: how long the broker holds a fetch that finds nothing new. A
        restore reads to the end once, and the end is seen only on a fetch that finds nothing
        (one that skips a commit marker does not say so): keep it short there."""
        # 50,000 records a partition ahead: a restore applies them at 20,000-100,000 a second, and
        # a table of 1,000,000 keys x 3 versions rebuilt from its topic peaked at 297 MB RSS with
        # it, 641 MB with the 1,000,000 of reader_settings (benchmarks/NOTES.md)
        conf = reader_settings(settings, group, fetch_wait_ms=fetch_wait_ms, offset_reset="earliest",
                               prefetch=50_000)
        self._c = Consumer(conf)
        self._assigned: set[TP] = set()
        self._conf = conf
        self._log_end: Consumer | None = None  # read_uncommitted, for high_watermark only

    def add_all(self, starts: list[tuple[TP, int | None]]) -> None:
        """Start reading each changelog partition at its offset (the beginning for None)."""
        if starts:
            self._c.incremental_assign([TopicPartition(t, p, OFFSET_BEGINNING if o is None else o)
                                        for (t, p), o in starts])
            self._assigned.update(tp for tp, _ in starts)

    def hold_at(self, tp: TP, offset: int) -> None:
        """Stop reading ``tp`` at ``offset`` until ``release``: fetch it from there then."""
        part = TopicPartition(tp[0], tp[1], offset)
        self._c.pause([part])
        self._c.seek(part)

    def release(self, tp: TP) -> None:
        self._c.resume([TopicPartition(tp[0], tp[1])])

    def remove(self, tp: TP) -> None:
        if tp in self._assigned:
            self._c.incremental_unassign([TopicPartition(tp[0], tp[1])])
            self._assigned.discard(tp)

    def refresh(self, topics: Iterable[str], timeout_s: float) -> None:
        """Ask for the metadata of ``topics`` now, so that the offsets asked next go to their
        partitions' leaders as they are now. The reader lives as long as the member, and the
        leaders it cached may be a node that died since: a restart after a broken checkpoint
        asked such a node for a changelog's offsets and waited until it came back (1.2 s of a
        recovery in the cluster soak; as long as the node stays down, or until the next
        periodic refresh, in general). What cannot be asked now is left to the offsets' own
        retries."""
        clients = [c for c in (self._c, self._log_end) if c is not None]
        for topic in topics:
            for client in clients:
                try:
                    client.list_topics(topic, timeout=timeout_s)
                except KafkaException as exc:
                    log.debug("the metadata of %s did not come (%s): the offsets are asked all the same", topic, exc)

    def end_offset(self, tp: TP, timeout_s: float) -> int:
        """The changelog partition's end (``offsets``)."""
        return self.offsets(tp, timeout_s)[1]

    def offsets(self, tp: TP, timeout_s: float) -> tuple[int, int]:
        """The changelog partition's first and next offsets. A topic created moments ago may
        have no leader yet (NOT_LEADER_FOR_PARTITION, LEADER_NOT_AVAILABLE, unknown
        partition): ask again until ``timeout_s`` has passed, then raise what the broker said."""
        return watermarks(self._c, TopicPartition(*tp), timeout_s, f"changelog {tp[0]}[{tp[1]}]")

    def read(self, n: int, timeout_s: float) -> list[tuple[TP, int, bytes | None, bytes | None, int] | tuple[TP, None]]:
        """Records as ``(tp, offset, key, value, timestamp)``; end-of-partition as ``(tp, None)``."""
        out: list[Any] = []
        for msg in self._c.consume(n, timeout_s):
            err = msg.error()
            tp = (msg.topic(), msg.partition())
            if err is None:
                out.append((tp, msg.offset(), msg.key(), msg.value(), msg.timestamp()[1]))
            elif err.code() == KafkaError._PARTITION_EOF:
                out.append((tp, None))
            elif err.fatal():
                raise FatalKafkaError(f"changelog read failed: {err}")
            else:
                log.warning("changelog read: %s", err)
        return out

    @property
    def busy(self) -> bool:
        return bool(self._assigned)

    def position(self, tp: TP) -> int | None:
        """The next offset the reader fetches from ``tp`` (past commit markers), if known."""
        [got] = self._c.position([TopicPartition(*tp)])
        return got.offset if got.offset >= 0 else None

    def fetched_end(self, tp: TP) -> int | None:
        """The partition's end as the last fetch saw it (the last stable offset: the reader is
        read_committed), without asking the broker; None before a fetch or after ``close``.
        Safe from any thread (a live query asks it of a standby's reader)."""
        try:
            high = self._c.get_watermark_offsets(TopicPartition(*tp), cached=True)[1]
        except (KafkaException, RuntimeError):  # RuntimeError: the reader is closed
            return None
        return high if high >= 0 else None

    def high_watermark(self, tp: TP, timeout_s: float) -> int:
        """The partition's log end, records of unfinished transactions and markers included
        (``offsets`` gives the read_committed end)."""
        if self._log_end is None:
            self._log_end = Consumer({**self._conf, "isolation.level": "read_uncommitted"})
        end = self._log_end
        return watermarks(end, TopicPartition(*tp), timeout_s, f"changelog {tp[0]}[{tp[1]}]", fresh=True)[1]

    def close(self) -> None:
        self._c.close()
        if self._log_end is not None:
            self._log_end.close()


def _offset(msg: Message) -> int:
    """The offset of a record read without an error (confluent-kafka's stubs type it Optional:
    an error event has none)."""
    offset = msg.offset()
    assert offset is not None
    return offset


def read_range(settings: Mapping[str, Any], group: str, topic: str, partition: int, start: int, end: int, *,
               batch: int = 10_000, stall_s: float = 120.0) -> Iterator[list[Message]]:
    """The committed records of ``topic[partition]`` from ``start`` up to ``end`` (exclusive)
    in offset order, in lists of up to ``batch``: the messages as the live service consumes
    them, headers and timestamps included. One consumer of its own, read_committed, assigned
    (never in a group, nothing committed). The range is done when a record at ``end - 1``
    arrives or, where the range ends in commit markers or aborted records, when the
    partition's end is reached with the position at ``end``. A ``start`` no longer in the log
    (deleted by retention since the range was planned) and ``stall_s`` without progress (a
    transaction left open below ``end``) are errors naming the partition and the fix."""
    if start >= end:
        return
    consumer = Consumer(reader_settings(settings, group, fetch_wait_ms=20, offset_reset="error"))
    consume = consumer.consume
    where = f"{topic}[{partition}]"
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        last_progress = time.monotonic()
        while True:
            # what is there now, else wait for the first record to come: a wait for a whole
            # batch would hold each short read (the range's last records) to the timeout
            got, at_end = [], False
            for msg in consume(batch, 0) or consume(1, 0.5):
                err = msg.error()
                if err is None:
                    got.append(msg)
                elif err.code() == KafkaError._PARTITION_EOF:
                    at_end = True
                elif err.code() == KafkaError._AUTO_OFFSET_RESET:
                    raise KafkaClientError(_range_gone(consumer, where, topic, partition, start))
                elif err.fatal():
                    raise FatalKafkaError(f"reading {where}: {err}")
                else:
                    log.warning("reading %s: %s", where, err)
            if got:
                last_progress = time.monotonic()
                last = _offset(got[-1])
                if last >= end - 1:
                    if last >= end:
                        got = [m for m in got if _offset(m) < end]
                    if got:
                        yield got
                    return
                yield got
            if at_end:
                [pos] = consumer.position([TopicPartition(topic, partition)])
                if pos.offset >= end:
                    return
            if time.monotonic() - last_progress > stall_s:
                [pos] = consumer.position([TopicPartition(topic, partition)])
                raise KafkaClientError(
                    f"reading {where}: no committed record past offset {pos.offset} for {stall_s:.0f} s, and the "
                    f"range ends at {end}. A transaction left open below {end} holds read_committed readers back. "
                    "Fix: let it end (it is aborted after its transaction.timeout.ms), or replay --to an offset "
                    "below it")
    finally:
        consumer.close()


def _range_gone(consumer: Consumer, where: str, topic: str, partition: int, start: int) -> str:
    try:
        first = f" (the log starts at {consumer.get_watermark_offsets(TopicPartition(topic, partition), 5)[0]} now)"
    except KafkaException:
        first = ""
    return (f"reading {where}: offset {start} is no longer in the log{first}: records were deleted (by retention) "
            "after the range was planned. Fix: replay again with --from at or after the log's start "
            "(--from earliest)")


def _too_large(topic: str, key: bytes | None, value: bytes | None, headers: Headers) -> RecordTooLargeError:
    size = len(key or b"") + len(value or b"") + sum(len(k.encode()) + len(v or b"") for k, v in headers or ())
    return RecordTooLargeError(
        f"the record for {topic!r} takes {size:,} bytes (key, value and headers), more than the producer may "
        "send (kafka.producer message.max.bytes, 1000000 unless set)", None, None,
        fix="to process records this large, set FW_KAFKA_PRODUCER__MESSAGE_MAX_BYTES (up to 1000000000) and give "
            "every topic the service writes to a max.message.bytes at least as large (the service creates its "
            "own topics so); until then each such record goes to the dead-letter topic")


def _bad_time(topic: str, timestamp: int, limits: tuple[int | None, int | None]) -> TimestampError:
    now = time.time() * 1000
    ahead = timestamp > now
    setting = "message.timestamp.after.max.ms" if ahead else "message.timestamp.before.max.ms"
    try:
        when = f" ({datetime.fromtimestamp(timestamp / 1000, UTC).isoformat(timespec='seconds')})"
    except (OverflowError, ValueError, OSError):
        when = ""  # beyond the years a datetime holds
    return TimestampError(
        f"the record for {topic!r} has timestamp {timestamp}{when}, {abs(timestamp - now) / 1000:,.0f} s "
        f"{'ahead of' if ahead else 'behind'} now, and the topic accepts {limits[1] if ahead else limits[0]} ms "
        f"({setting}): the broker would refuse it", None, None,
        fix="check the timestamps of the input (a producer's clock far off?) or the step's timestamp assigner; "
            f"to accept such records, raise the topic's {setting} or make it message.timestamp.type=LogAppendTime")


class GlobalReader:
    """Reads every partition of the global tables' topics (read_committed), outside the
    consumer group, from where each table's store left off: ``catch_up`` to the ends the
    partitions had when it started, then ``poll`` what arrives."""

    def __init__(self, settings: Mapping[str, Any], group: str) -> None:
        self._c = Consumer(reader_settings(settings, group, fetch_wait_ms=20, offset_reset="earliest"))

    def assign(self, starts: Mapping[TP, int | None]) -> None:
        self._c.assign([TopicPartition(t, p, OFFSET_BEGINNING if o is None else o) for (t, p), o in starts.items()])

    def poll(self, n: int) -> list[Any]:
        """The records fetched already (no wait): messages, end-of-partition events left out."""
        out = []
        for msg in self._c.consume(n, 0):
            err = msg.error()
            if err is None:
                out.append(msg)
            elif err.code() != KafkaError._PARTITION_EOF:
                if err.fatal():
                    raise FatalKafkaError(f"global table read failed: {err}")
                log.warning("global table read: %s", err)
        return out

    def catch_up(self, tps: list[TP], apply: Callable[[list[Any]], Any], timeout_s: float) -> int:
        """Read each partition to its read_committed end as of now, handing the records to
        ``apply`` in batches; returns how many were read."""
        def end_of(tp: TP) -> int:
            return watermarks(self._c, TopicPartition(*tp), timeout_s, f"global table {tp[0]}[{tp[1]}]")[1]

        # keyed as the messages name their partition
        ends: dict[tuple[str | None, int | None], int] = {tp: end_of(tp) for tp in tps}
        behind = {tp for tp, end in ends.items() if end > 0}
        n = 0
        while behind:
            batch: list[Any] = []
            for msg in self._c.consume(10_000, 0.5):
                err = msg.error()
                tp = (msg.topic(), msg.partition())
                if err is None:
                    batch.append(msg)
                    if _offset(msg) + 1 >= ends[tp]:
                        behind.discard(tp)
                elif err.code() == KafkaError._PARTITION_EOF:
                    behind.discard(tp)
                elif err.fatal():
                    raise FatalKafkaError(f"global table read failed: {err}")
            if batch:
                apply(batch)
                n += len(batch)
        return n

    def close(self) -> None:
        self._c.close()
