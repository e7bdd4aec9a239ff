"""The recovery of a member whose checkpoint broke or whose cluster is away
(``framework.runtime.outage``), how client errors are classified for it, and the client log
lines it keeps out of the way. The real broker's outages: tests/integration/test_outages.py."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException

from framework.errors import FatalKafkaError, KafkaClientError
from framework.kafka.clients import Connectivity, classify
from framework.kafka.logs import CLIENT_LOG, Transport
from framework.runtime import outage
from framework.runtime.outage import Recovery


def _exc(code: int, reason: str = "", **flags: bool) -> KafkaException:
    return KafkaException(KafkaError(code, reason, **flags))


@pytest.mark.parametrize(("exc", "verdict"), [
    (KafkaClientError("12 records not delivered: every broker connection is down"), "reset"),
    (_exc(KafkaError._TIMED_OUT, "commit timed out", retriable=True), "retry"),
    (_exc(KafkaError._STATE, "needs abort", txn_requires_abort=True), "abort"),
    (_exc(KafkaError.INVALID_PRODUCER_EPOCH, "epoch bumped", fatal=True), "reset"),
    (_exc(KafkaError._FENCED, "Producer fenced by newer instance", fatal=True), "fatal"),
    (_exc(KafkaError.PRODUCER_FENCED, "fenced", fatal=True), "fatal"),
    (_exc(KafkaError._FATAL, "Fatal error: Broker: Static consumer fenced by other consumer"), "fatal"),
    (_exc(KafkaError.TOPIC_AUTHORIZATION_FAILED, "denied"), "fatal"),
], ids=["flush-down", "timed-out", "abortable", "fatal-epoch", "fenced", "producer-fenced", "fatal-event-fenced",
        "denied"])
def test_errors_are_classified_so_that_only_what_cannot_heal_is_fatal(exc: Exception, verdict: str) -> None:
    assert classify(exc) == verdict


def test_connectivity_keeps_when_every_broker_went_down_and_the_first_fatal_error() -> None:
    c = Connectivity()
    c.on_error(KafkaError(KafkaError._TRANSPORT, "one connection"))
    assert c.down_since is None
    c.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    first = c.down_since
    c.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert first is not None and c.down_since == first
    c.on_error(KafkaError(KafkaError._FATAL, "Fatal error: fenced", fatal=True))
    c.on_error(KafkaError(KafkaError._FATAL, "another", fatal=True))
    assert c.fatal is not None and "fenced" in c.fatal.str()
    c.clear()
    assert c.down_since is None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(outage.time, "monotonic", c)
    return c


class Cluster:
    """A cluster that answers or not; ``reset`` fails while ``flaky`` is positive."""

    def __init__(self) -> None:
        self.up = False
        self.resets = 0
        self.flaky = 0

    def probe(self, timeout_s: float) -> str | None:
        return None if self.up else "Connection refused"

    def reset(self) -> None:
        if self.flaky:
            self.flaky -= 1
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "coordinator not available", retriable=True))
        self.resets += 1


def test_an_outage_is_waited_out_said_once_and_ends_with_one_reset(
        clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    cluster = Cluster()
    rec = Recovery(cluster.probe, cluster.reset, timeout_s=600, where="broker:9092")
    caplog.set_level(logging.INFO, "framework.runtime")
    assert rec.suspect(down_since=clock.now)
    for _ in range(100):  # a hundred seconds without the cluster, asked once a second
        clock.now += 1
        assert not rec.step()
    assert rec.active and rec.unreachable and cluster.resets == 0
    cluster.up, cluster.flaky = True, 2  # back, but the coordinator not ready at first
    steps = 0
    while True:
        clock.now += 1
        steps += 1
        if rec.step():
            break
    assert steps == 3 and cluster.resets == 1 and not rec.active  # two resets failed, asked again
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in lines] == ["WARNING", "INFO"], lines
    assert "cannot be reached" in lines[0][1] and "answers again after 103.0 s" in lines[1][1]
    assert not Transport.quiet


def test_an_outage_longer_than_the_timeout_is_fatal_with_the_setting_named(clock: Clock) -> None:
    cluster = Cluster()
    rec = Recovery(cluster.probe, cluster.reset, timeout_s=30, where="broker:9092")
    rec.begin("a flush timed out")
    with pytest.raises(FatalKafkaError, match="broker_outage_timeout_ms"):
        for _ in range(40):
            clock.now += 1
            rec.step()
    assert clock.now - 1000 == 31


def test_a_broken_checkpoint_with_the_cluster_there_is_one_warning_and_a_reset(
        clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    cluster = Cluster()
    cluster.up = True
    rec = Recovery(cluster.probe, cluster.reset, timeout_s=600, where="broker:9092")
    caplog.set_level(logging.INFO, "framework.runtime")
    rec.begin("the producer failed fatally: INVALID_PRODUCER_EPOCH")
    assert rec.step() and cluster.resets == 1
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines[0][0] == "WARNING" and "INVALID_PRODUCER_EPOCH" in lines[0][1] and len(lines) == 2


def test_a_fatal_error_of_the_reset_is_not_asked_again(clock: Clock) -> None:
    def fenced() -> None:
        raise KafkaException(KafkaError(KafkaError._FENCED, "Producer fenced by newer instance", fatal=True))

    rec = Recovery(lambda timeout_s: None, fenced, timeout_s=600, where="broker:9092")
    rec.begin("a commit timed out")
    with pytest.raises(KafkaException):
        rec.step()


def test_the_clients_connection_lines_go_to_the_debug_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, CLIENT_LOG.name)
    CLIENT_LOG.error("FAIL [rdkafka#producer-1] [thrd:main]: 127.0.0.1:9092/1: Connect to ipv4#127.0.0.1:9092 "
                     "failed: Connection refused (after 0ms in state CONNECT)")
    CLIENT_LOG.warning("GETPID [rdkafka#producer-1] [thrd:main]: Failed to acquire idempotence PID from broker "
                       "127.0.0.1:9092/1: Broker: Coordinator load in progress: retrying")
    CLIENT_LOG.warning("SESSTMOUT [eo-1@:9400#consumer-6] [thrd:main]: Consumer group session timed out (in "
                       "join-state steady) after 45042 ms without a successful response from the group coordinator "
                       "(broker 1, last error was Success): revoking assignment and rejoining group")
    CLIENT_LOG.warning("CONFWARN [rdkafka#producer-1] [thrd:app]: Configuration property x is deprecated")
    assert [r.getMessage().split()[0] for r in caplog.records] == ["CONFWARN"]


class Lagging:
    """A group member's consumer that sees records waiting in the partitions it is asked about."""

    def __init__(self, lag: dict[tuple[str, int], int]) -> None:
        self.lag = lag

    def group_lag(self, tps: object) -> dict[tuple[str, int], int]:
        return {tp: n for tp in tps if (n := self.lag.get(tp, 0))}  # type: ignore[attr-defined]


def test_a_member_holding_nothing_is_told_of_records_no_member_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    from framework.runtime import membership

    inputs = [("orders", p) for p in range(4)]
    consumer = Lagging({("orders", 1): 5, ("orders", 3): 7})
    monkeypatch.setattr(membership, "held_partitions", lambda admin, group: {("orders", 1)})
    said = membership.unheld_backlog(None, consumer, "svc", inputs)  # type: ignore[arg-type]
    assert said is not None and "7 records wait in partitions no member holds (orders[3] 7)" in said
    monkeypatch.setattr(membership, "held_partitions", lambda admin, group: {("orders", 1), ("orders", 3)})
    assert membership.unheld_backlog(None, consumer, "svc", inputs) is None  # type: ignore[arg-type]
    monkeypatch.setattr(membership, "held_partitions", lambda admin, group: None)  # a rebalance
    assert membership.unheld_backlog(None, consumer, "svc", inputs) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(("state", "held"), [
    (ConsumerGroupState.PREPARING_REBALANCING, None),
    (ConsumerGroupState.COMPLETING_REBALANCING, None),
    (ConsumerGroupState.STABLE, {("orders", 1), ("orders", 3)}),
    (ConsumerGroupState.EMPTY, set()),
])
def test_the_held_partitions_are_unknown_while_the_group_rebalances(
        monkeypatch: pytest.MonkeyPatch, state: ConsumerGroupState, held: set[tuple[str, int]] | None) -> None:
    from types import SimpleNamespace

    from framework.kafka import groups

    def member(*tps: tuple[str, int]) -> SimpleNamespace:
        assigned = [SimpleNamespace(topic=t, partition=p) for t, p in tps]
        return SimpleNamespace(assignment=SimpleNamespace(topic_partitions=assigned))

    members = [] if state == ConsumerGroupState.EMPTY else [member(("orders", 1)), member(("orders", 3))]
    monkeypatch.setattr(groups, "_describe", lambda admin, group, timeout_s: SimpleNamespace(state=state,
                                                                                            members=members))
    assert groups.held_partitions(None, "svc") == held  # type: ignore[arg-type]  # no admin: _describe is replaced


def test_health_is_503_while_the_member_idles_with_lag_nobody_holds() -> None:
    from types import SimpleNamespace

    from framework.observe.observer import Observer

    service = SimpleNamespace(pipeline=SimpleNamespace(name="svc"), instance_id="0", idle_with_lag=None)
    obs = Observer(service, 1.0, 60.0)
    assert obs.health()[0]
    service.idle_with_lag = "this member holds no partition of group 'svc', and 7 records wait"
    ok, body = obs.health()
    assert not ok and body["status"] == "idle with lag" and "7 records wait" in body["why"]


class _Msg:
    def __init__(self, err: KafkaError | None) -> None:
        self._err = err

    def error(self) -> KafkaError | None:
        return self._err


class _FencedConsumer:
    """A consumer another process's join fenced: its fatal error comes back from consume."""

    def __init__(self) -> None:
        self.connectivity = Connectivity()
        self.judged: list[KafkaError] = []

    def consume(self, n: int, timeout_s: float) -> list[_Msg]:
        return [_Msg(None), _Msg(KafkaError(KafkaError._FATAL, "Fatal error: Broker: Static consumer fenced by "
                                                               "other consumer with same group.instance.id"))]

    def check_error(self, err: KafkaError) -> None:
        self.judged.append(err)
        raise FatalKafkaError(f"fenced: {err.str()}")


class _Output:
    connectivity = Connectivity()


def test_a_fatal_error_the_consumer_returns_during_a_recovery_ends_the_member() -> None:
    """A member recovering from a fenced checkpoint while another process took its static
    membership: the consumer's fatal error used to be dropped with the records, and the
    recovery's reset, whose seeks then fail (the partitions are no longer the member's), was
    asked again for ever."""
    resets: list[int] = []
    rec = Recovery(lambda timeout_s: None, lambda: resets.append(1), timeout_s=60.0, where="k:9092")
    rec.begin("the producer was fenced")
    consumer = _FencedConsumer()
    rnd = outage.RecoveryRound(rec, None, _Output(), consumer, 100, heartbeat=lambda now: None,
                               publish=lambda: None)
    with pytest.raises(FatalKafkaError, match="Static consumer fenced"):
        rnd.take(0.0)
    assert len(consumer.judged) == 1 and resets == []
