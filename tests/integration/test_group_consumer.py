"""The service's group member pauses only the partitions it holds for a restore, and a pause
does not outlive the assignment it was made for (librdkafka keeps a partition's pause across
an unassign and a new assign: a partition held when it was revoked would come back paused and
never be read, with nothing in any log)."""

from __future__ import annotations

from collections.abc import Callable

from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from framework.kafka.clients import TP, GroupConsumer
from tests.integration.harness import located, present, produce_to_partitions, wait_until


def _consume_until(members: list[GroupConsumer], read: dict[TP, list[bytes]], done: Callable[[], bool],
                   what: str) -> None:
    """Poll every member (each must take part in its group's rebalances) until ``done()``."""
    def polled() -> bool:
        for member in members:
            for msg in member.consume(100, 0.05):
                if msg.error() is None:
                    topic, partition, _, _ = located(msg)
                    read.setdefault((topic, partition), []).append(present(msg.value()))
        return done()

    wait_until(polled, 60, what, lambda: f"read {read}")


def test_a_partition_held_when_it_was_revoked_is_read_when_it_comes_back(kafka_bootstrap: str,
                                                                          unique: str) -> None:
    topic, group = f"held-{unique}", f"held-{unique}"
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(topic, 2)])
    produce_to_partitions(kafka_bootstrap, topic, [(p, b"k", f"{p}-{i}".encode()) for p in (0, 1) for i in range(10)])
    settings = {"bootstrap.servers": kafka_bootstrap}
    first, second = GroupConsumer(settings, group), GroupConsumer(settings, group)
    assigned: dict[str, list[list[TP]]] = {"first": [], "second": []}

    def on_assign(name: str, hold: bool) -> Callable[[list[TP]], list[TP]]:
        def assign(tps: list[TP]) -> list[TP]:
            assigned[name].append(sorted(tps))
            return tps if hold and len(assigned[name]) == 1 else []  # held only the first time
        return assign

    read: dict[TP, list[bytes]] = {}
    try:
        first.subscribe([topic], on_assign("first", True), lambda tps: None, lambda tps: None)
        _consume_until([first], read, lambda: bool(assigned["first"]), "the first assignment")
        assert assigned["first"] == [[(topic, 0), (topic, 1)]]
        assert first.paused == {(topic, 0), (topic, 1)}

        second.subscribe([topic], on_assign("second", False), lambda tps: None, lambda tps: None)
        # the rebalance takes both partitions from the first member, which gets one back, not held
        _consume_until([first, second], read, lambda: sum(map(len, read.values())) == 20, "every record")
        assert len(assigned["first"]) == 2 and len(assigned["first"][1]) == 1
        assert first.paused == set() and second.paused == set()
        assert {tp: sorted(values) for tp, values in read.items()} == {
            (topic, p): sorted(f"{p}-{i}".encode() for i in range(10)) for p in (0, 1)}
    finally:
        first.close()
        second.close()


def test_the_backlog_counts_records_waiting_in_a_partition_never_fetched(kafka_bootstrap: str,
                                                                          unique: str) -> None:
    """The stall warning's view: a partition held from its assignment on has no end offset in
    the client's cache; the broker's is asked instead, so its waiting records are seen."""
    topic = f"held-{unique}"
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(topic, 2)])
    produce_to_partitions(kafka_bootstrap, topic, [(0, b"k", str(i).encode()) for i in range(7)])
    member = GroupConsumer({"bootstrap.servers": kafka_bootstrap}, f"held-{unique}")
    assigned: list[TP] = []

    def hold_all(tps: list[TP]) -> list[TP]:
        assigned.extend(tps)
        return tps

    read: dict[TP, list[bytes]] = {}
    try:
        member.subscribe([topic], hold_all, lambda tps: None, lambda tps: None)
        _consume_until([member], read, lambda: bool(assigned), "the assignment")
        assert member.backlog() == {(topic, 0): (0, 7)}  # partition 1 is empty: nothing waits there
        assert read == {}
    finally:
        member.close()
