"""The watch over a stuck send_offsets_to_transaction (``KafkaOutput._moved``): the call is
given up when a node the producer has seen (in the metadata or in its connection errors)
leaves the cluster's metadata, when the group's coordinator is another node than when last
seen, or when a connection to another node than the coordinator failed within the minute;
not otherwise. A transaction's flush gives up as soon as the group's coordinator has left a
node whose connection failed, or its node left the metadata (``KafkaOutput._coordinator_left``):
that call would wait next. A transaction's commit is asked in slices, and given up once every
broker connection is down (``KafkaOutput.commit``)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from framework.errors import KafkaClientError
from framework.kafka.clients import KafkaOutput, coordinator_partition


def test_a_groups_partition_is_the_one_kafka_picks() -> None:
    # "abc".hashCode() is 96354 in Java; a broker's log named partition 4 of 10 for this group
    assert coordinator_partition("abc", 50) == 96354 % 50
    assert coordinator_partition("eo-soakc5986", 10) == 4
    # the hash code Integer.MIN_VALUE has no positive counterpart: Kafka's Utils.abs makes it 0
    assert coordinator_partition("polygenelubricants", 50) == 0
    assert coordinator_partition("polygenelubricants", 49) == 0
    assert all(0 <= coordinator_partition(f"group-{i}", 7) < 7 for i in range(200))


@dataclass
class _Partition:
    leader: int
    error: Any = None


@dataclass
class _Topic:
    partitions: dict[int, _Partition]
    error: Any = None


@dataclass
class _Broker:
    host: str
    port: int


def _brokers(nodes: list[int]) -> dict[int, object]:
    """The local cluster's nodes as librdkafka lists them: node i at port 29600 + 2 (i - 1)."""
    return {n: _Broker("127.0.0.1", 29600 + 2 * (n - 1)) for n in nodes}


@dataclass
class _Metadata:
    brokers: dict[int, object]
    topics: dict[str, _Topic] = field(default_factory=dict)


class _Producer:
    """Answers list_topics with the metadata the test sets."""

    def __init__(self) -> None:
        self.md: _Metadata | None = None

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> _Metadata:
        assert self.md is not None
        return self.md

    def poll(self, timeout: float) -> int:
        return 0


def _metadata(nodes: list[int], leaders: list[int]) -> _Metadata:
    return _Metadata(_brokers(nodes),
                     {"__consumer_offsets": _Topic({i: _Partition(leader) for i, leader in enumerate(leaders)})})


@pytest.fixture
def output() -> KafkaOutput:
    out = KafkaOutput({"bootstrap.servers": "127.0.0.1:1"}, None)
    out._p = _Producer()  # type: ignore[assignment]
    out.group = "abc"  # partition 96354 % 4 == 2 of four
    return out


def _answers(out: KafkaOutput, md: _Metadata) -> str | None:
    out._p.md = md  # type: ignore[attr-defined]
    return out._moved()


def test_nothing_moved_while_the_nodes_and_the_coordinator_stay(output: KafkaOutput) -> None:
    assert _answers(output, _metadata([1, 2, 3], [1, 2, 3, 1])) is None
    assert _answers(output, _metadata([1, 2, 3], [2, 2, 3, 3])) is None  # other partitions' leaders move


def test_a_node_that_left_the_metadata_is_named(output: KafkaOutput) -> None:
    assert _answers(output, _metadata([1, 2, 3], [1, 2, 3, 1])) is None
    assert _answers(output, _metadata([1, 2], [1, 2, 1, 1])) == (
        "node 3 left the cluster's metadata (stopped, and fenced by the cluster): its group coordinator moved")


def test_a_coordinator_that_moved_while_its_node_came_back_is_named(output: KafkaOutput) -> None:
    """The node died and came back before the call was watched: every node is listed, but
    the group's partition has another leader."""
    assert _answers(output, _metadata([1, 2, 3], [1, 2, 3, 1])) is None
    assert _answers(output, _metadata([1, 2, 3], [1, 2, 1, 1])) == \
        "the group's coordinator moved from node 3 to node 1"
    assert _answers(output, _metadata([1, 2, 3], [1, 2, 1, 1])) is None  # seen now: no longer news


def test_a_partition_without_a_leader_or_a_topic_not_described_says_nothing(output: KafkaOutput) -> None:
    assert _answers(output, _metadata([1, 2, 3], [1, 2, 3, 1])) is None
    assert _answers(output, _metadata([1, 2, 3], [1, 2, -1, 1])) is None  # an election under way
    assert _answers(output, _Metadata(_brokers([1, 2, 3]),
                                      {"__consumer_offsets": _Topic({}, error="TOPIC_AUTHORIZATION_FAILED")})) is None
    assert _answers(output, _metadata([1, 2, 3], [1, 2, 3, 1])) is None  # the same coordinator as before


def _refused(out: KafkaOutput, node: int) -> None:
    out.connectivity.on_error(KafkaError(KafkaError._TRANSPORT, f"127.0.0.1:2960{node}/{node}: Connect to "
                                         f"ipv4#127.0.0.1:2960{node} failed: Connection refused (after 0ms in state CONNECT)"))


def test_a_node_named_in_a_connection_error_then_fenced_is_named(output: KafkaOutput) -> None:
    """The producer began after the node had left (its seen nodes lack it), and its
    connections to it failed since: the node is named once the metadata no longer lists it."""
    assert _answers(output, _metadata([1, 2], [1, 2, 1, 1])) is None
    output.connectivity.on_error(KafkaError(KafkaError._TRANSPORT, "TxnCoordinator: 127.0.0.1:29606: Disconnected"))
    _refused(output, 3)
    assert output.connectivity.node_failed.keys() == {3}  # a coordinator's handle names no node
    assert _answers(output, _metadata([1, 2], [1, 2, 1, 1])) == (
        "node 3 left the cluster's metadata (stopped, and fenced by the cluster): its group coordinator moved")


def test_a_node_that_failed_and_is_back_while_the_coordinator_is_elsewhere_is_named(output: KafkaOutput) -> None:
    """The coordinator moved from a node and the node came back, all unseen: the coordinator
    is the one last seen, but a connection to another node failed within the minute."""
    assert _answers(output, _metadata([1, 2, 3], [1, 2, 1, 1])) is None
    _refused(output, 3)
    assert _answers(output, _metadata([1, 2, 3], [1, 2, 1, 1])) == (
        "node 3 failed 0 s ago and the group's coordinator is node 1 now: it may have moved from there")
    output.connectivity.node_failed[3] -= 61  # a minute ago: no longer a reason
    assert _answers(output, _metadata([1, 2, 3], [1, 2, 1, 1])) is None
    _refused(output, 1)  # the coordinator's own node failing says nothing of a move
    assert _answers(output, _metadata([1, 2, 3], [1, 2, 1, 1])) is None


class _Stuck(_Producer):
    """A producer whose send_offsets_to_transaction waits until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def send_offsets_to_transaction(self, offsets: Any, metadata: Any, timeout: float) -> None:
        self.release.wait(10)


@pytest.mark.parametrize(("failed", "looked_at"), [(True, "0.5"), (False, "1.0")])
def test_a_stuck_call_is_looked_at_sooner_while_a_node_failed_recently(
        output: KafkaOutput, failed: bool, looked_at: str) -> None:
    """A call is watched after a second, or after half of one while a node's connection
    failed within the minute (a coordinator may be moving); given up once its coordinator's
    node left the metadata."""
    stuck = _Stuck()
    output._p = stuck  # type: ignore[assignment]
    assert _answers(output, _metadata([1, 2, 3], [1, 2, 3, 1])) is None
    if failed:
        _refused(output, 3)
    stuck.md = _metadata([1, 2], [1, 2, 1, 1])
    try:
        with pytest.raises(TimeoutError, match=f"did not return within {looked_at} s: node 3 left"):
            output.send_offsets({("t", 0): 1}, object(), 30.0)
    finally:
        stuck.release.set()


class _Undelivered(_Producer):
    """A producer whose records are never delivered: a flush returns them all still there."""

    def __init__(self) -> None:
        super().__init__()
        self.flushes = 0

    def flush(self, timeout: float) -> int:
        self.flushes += 1
        time.sleep(min(timeout, 0.05))
        return 7


@pytest.mark.parametrize("failed", [True, False])
def test_a_flush_gives_up_once_the_groups_coordinator_left_the_metadata(output: KafkaOutput, failed: bool) -> None:
    """In a transaction, a flush that waits looks at the group's coordinator (every 0.1 s
    while a node's connection failed, else every half second: librdkafka served the errors
    late in the soak): it remembers it first (node 3), and gives up once that node is no
    longer listed, as the offsets would wait for it next."""
    output.transactional = True
    stuck = _Undelivered()
    output._p = stuck  # type: ignore[assignment]
    if failed:
        _refused(output, 3)
    looks: list[_Metadata] = [_metadata([1, 2, 3], [1, 2, 3, 1]), _metadata([1, 2, 3], [1, 2, 3, 1]),
                              _metadata([1, 2], [1, 2, 1, 1])]

    def list_topics(topic: str | None = None, timeout: float = -1) -> _Metadata:
        return looks.pop(0)

    stuck.list_topics = list_topics  # type: ignore[method-assign]
    with pytest.raises(KafkaClientError, match="7 records not delivered yet, and the offsets could not follow them: "
                                               "node 3, the group's coordinator, left the cluster's metadata"):
        output.flush(30.0)
    assert not looks and stuck.flushes >= 3 and bool(output._recently_failed()) == failed


@pytest.mark.parametrize("failed", [None, 1])
def test_a_flush_waits_on_while_the_coordinators_node_did_not_fail(output: KafkaOutput, failed: int | None) -> None:
    """No node failed, or only another node than the coordinator: the coordinator stays; the
    flush waits for its records to its own bound."""
    output.transactional = True
    stuck = _Undelivered()
    stuck.md = _metadata([1, 2, 3], [1, 2, 3, 1])
    output._p = stuck  # type: ignore[assignment]
    if failed is not None:
        _refused(output, failed)
    with pytest.raises(KafkaClientError, match="7 records not delivered within 1.2s"):
        output.flush(1.2)


def test_the_coordinator_is_seen_afresh_after_offsets_reached_it(output: KafkaOutput) -> None:
    """A send_offsets_to_transaction that returned while a node failed recently remembers the
    coordinator the metadata names then, not an old one: a node failing later is judged by it."""
    _refused(output, 3)
    output._p.md = _metadata([1, 2, 3], [1, 2, 3, 1])  # type: ignore[attr-defined]
    assert output._coordinator_left() is None and output._coordinator == 3
    stuck = _Stuck()
    stuck.release.set()
    stuck.md = _metadata([1, 2, 3], [1, 2, 1, 1])
    output._p = stuck  # type: ignore[assignment]
    output.send_offsets({("t", 0): 1}, object(), 30.0)
    assert output._coordinator == 1
    assert output._coordinator_left() is None  # node 1 is still the coordinator: nothing moved
    stuck.md = _metadata([1, 2, 3], [1, 2, 2, 1])
    output.connectivity.node_failed[1] = output.connectivity.node_failed[3]
    assert output._coordinator_left() == "the group's coordinator moved from node 1, whose connection failed 0 s ago, to node 2"


def test_while_no_node_failed_the_coordinator_is_asked_for_after_offsets_once_in_ten_seconds(
        output: KafkaOutput, monkeypatch: pytest.MonkeyPatch) -> None:
    """In calm the coordinator is asked for after a send_offsets_to_transaction only when it
    was last seen ten seconds ago or more; a node that then fails while it is the coordinator
    is known to have been it, so the first look of a waiting flush can give up."""
    asked: list[float] = []
    stuck = _Stuck()
    stuck.release.set()
    stuck.md = _metadata([1, 2, 3], [1, 2, 3, 1])
    real = stuck.list_topics

    def list_topics(topic: str | None = None, timeout: float = -1) -> _Metadata:
        asked.append(timeout)
        return real(topic, timeout)

    stuck.list_topics = list_topics  # type: ignore[method-assign]
    output._p = stuck  # type: ignore[assignment]
    clock = [1000.0]
    monkeypatch.setattr("framework.kafka.clients.time.monotonic", lambda: clock[0])
    output.send_offsets({("t", 0): 1}, object(), 30.0)
    assert len(asked) == 1 and output._coordinator == 3
    clock[0] += 9.0
    output.send_offsets({("t", 0): 2}, object(), 30.0)
    assert len(asked) == 1
    clock[0] += 1.0
    output.send_offsets({("t", 0): 3}, object(), 30.0)
    assert len(asked) == 2

    _refused(output, 3)  # node 3 fails, and the cluster fences it: the coordinator moves to node 1
    stuck.md = _metadata([1, 2], [1, 2, 1, 1])
    assert output._coordinator_left() == ("node 3, the group's coordinator, left the cluster's metadata (stopped, "
                                          "and fenced by the cluster)")


def test_a_coordinator_whose_node_left_the_metadata_is_given_up_without_an_error_naming_it(
        output: KafkaOutput) -> None:
    """The second kill of a node: librdkafka did not report the node's own handle failing again
    (it repeats an error once). The coordinator last seen is no longer listed: the flush gives
    up all the same."""
    output._p.md = _metadata([1, 2, 3], [1, 2, 3, 1])  # type: ignore[attr-defined]
    assert output._coordinator_left() is None and output._coordinator == 3
    output._p.md = _metadata([1, 2], [1, 2, 1, 1])  # type: ignore[attr-defined]
    assert not output._recently_failed()
    assert output._coordinator_left() == ("node 3, the group's coordinator, left the cluster's metadata (stopped, "
                                          "and fenced by the cluster)")


def test_a_coordinators_handle_that_failed_names_the_node_at_its_address(output: KafkaOutput) -> None:
    """``TxnCoordinator: host:port: ...`` names no node id: the node is the one the metadata last
    listed at that address, listed still or not."""
    md = _metadata([1, 2, 3], [1, 2, 3, 1])
    output._p.md = md  # type: ignore[attr-defined]
    assert output._coordinator_left() is None
    output.connectivity.on_error(KafkaError(KafkaError._TRANSPORT, "TxnCoordinator: 127.0.0.1:29604: Connect to "
                                            "ipv4#127.0.0.1:29604 failed: Connection refused (after 0ms in state CONNECT)"))
    assert not output.connectivity.node_failed and output._recently_failed().keys() == {3}
    md.brokers = _brokers([1, 2])  # fenced: no longer listed
    assert output._recently_failed().keys() == {3}


def test_nodes_listed_after_offsets_reached_the_coordinator_count_as_seen(output: KafkaOutput) -> None:
    """The producer began while node 3 was away; node 3 came back and was listed when offsets
    reached the coordinator; then it died again: a stuck call names it once it leaves."""
    assert _answers(output, _metadata([1, 2], [1, 2, 1, 1])) is None
    stuck = _Stuck()
    stuck.release.set()
    stuck.md = _metadata([1, 2, 3], [1, 2, 3, 1])
    output._p = stuck  # type: ignore[assignment]
    output.send_offsets({("t", 0): 1}, object(), 30.0)
    assert _answers(output, _metadata([1, 2], [1, 2, 1, 1])) == (
        "node 3 left the cluster's metadata (stopped, and fenced by the cluster): its group coordinator moved")


class _SlowCommit(_Producer):
    """A producer whose commit_transaction times out (retriable) ``slow`` times, then commits;
    its poll serves the error events of ``events``."""

    def __init__(self, slow: int, events: list[KafkaError], on_error: Any) -> None:
        super().__init__()
        self.slow, self.events, self.on_error = slow, events, on_error
        self.asked: list[float] = []

    def commit_transaction(self, timeout: float) -> None:
        self.asked.append(timeout)
        if len(self.asked) <= self.slow:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed to flush all outstanding messages "
                                            "within the API timeout", retriable=True))

    def poll(self, timeout: float) -> int:
        for event in self.events:
            self.on_error(event)
        self.events = []
        return 0


def test_a_commit_is_asked_again_in_slices_until_it_completes(output: KafkaOutput) -> None:
    slow = _SlowCommit(2, [], output.connectivity.on_error)
    output._p = slow  # type: ignore[assignment]
    output.commit(30.0)
    assert slow.asked == [1.0, 1.0, 1.0]


def test_a_commit_is_given_up_once_every_broker_connection_is_down(output: KafkaOutput) -> None:
    """The only broker was SIGKILLed while the commit was under way: the commit's outcome is
    unknown, and the member says so at once instead of waiting out the outage, ready."""
    down = KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down")
    slow = _SlowCommit(5, [down], output.connectivity.on_error)
    output._p = slow  # type: ignore[assignment]
    with pytest.raises(KafkaClientError, match="the transaction's commit did not complete: every broker connection "
                                               "is down"):
        output.commit(30.0)
    assert len(slow.asked) == 1


def test_a_commit_past_its_bound_raises_the_timeout(output: KafkaOutput) -> None:
    slow = _SlowCommit(5, [], output.connectivity.on_error)
    output._p = slow  # type: ignore[assignment]
    with pytest.raises(KafkaException, match="API timeout"):
        output.commit(0.5)
    assert len(slow.asked) == 1 and slow.asked[0] <= 0.5
