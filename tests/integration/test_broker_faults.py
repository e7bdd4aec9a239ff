"""Faults beyond a killed member, on the real broker: the broker itself SIGKILLed and
restarted under a running exactly-once service (on one broker, and on a three-node cluster
every node at once: a power cut), and a member that loses its local state while it is dead.
A read_committed consumer must see every expected output exactly once, and the final state
must equal a run without faults.

The brokers killed here are the test's own (``LocalBroker``, ``LocalCluster`` on their own
ports and directories), so the suite's broker is never touched. One node of a cluster at a
time, and two of three, are tests/integration/test_cluster_faults.py's.
"""

from __future__ import annotations

import itertools
import random
import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from framework.broker.cluster import LocalCluster
from framework.broker.local import LocalBroker
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from tests.integration.harness import (
    EvenOddOutputs,
    ServiceProcess,
    check_exactly_once,
    check_final_state,
    even_odd_inputs,
    kill_at_random_after,
    produce,
    service_env,
    sigkill_broker,
    wait_until,
)
from tests.ports import worker_ports

N = 30_000
KEYS = 500
TARGET = "tests.integration.pipelines:even_odd"


def _env(bootstrap: str, suffix: str) -> dict[str, str]:
    return service_env(bootstrap, suffix, checkpoint_interval_ms=200, batch_size=1000)


def _chunks(k: int) -> list[tuple[int, int]]:
    bounds = [1 + N * i // k for i in range(k)] + [N + 1]
    return list(itertools.pairwise(bounds))


def _feed(bootstrap: str, suffix: str, chunk: tuple[int, int]) -> None:
    produce(bootstrap, f"numbers-{suffix}", even_odd_inputs(*chunk, KEYS))


def _create_input(bootstrap: str, suffix: str) -> None:
    ensure_topics(admin_client({"bootstrap.servers": bootstrap}), [TopicSpec(f"numbers-{suffix}", 4)])


def _more_than(out: EvenOddOutputs, outputs: int) -> Callable[[], bool]:
    """Whether more than ``outputs`` outputs are visible now."""
    return lambda: sum(out.drain()) > outputs


# -- the tests ---------------------------------------------------------------------------

class Brokers:
    """The brokers a test kills: one ``LocalBroker``, or every node of a ``LocalCluster``
    at once."""

    def __init__(self, one: LocalBroker | None = None, cluster: LocalCluster | None = None) -> None:
        self.one, self.cluster = one, cluster
        self.bootstrap = one.bootstrap if one is not None else cluster.bootstrap  # type: ignore[union-attr]

    def kill(self) -> None:
        if self.one is not None:
            sigkill_broker(self.one)
        else:
            assert self.cluster is not None
            self.cluster.stop(kill=True)

    def start(self) -> None:
        (self.one or self.cluster).start()  # type: ignore[union-attr]


@pytest.fixture(params=["one broker", "three nodes"])
def brokers(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Brokers]:
    if request.param == "one broker":
        yield Brokers(one=request.getfixturevalue("broker"))
        return
    cluster = LocalCluster(tmp_path_factory.mktemp("cluster"), worker_ports(6), nodes=3)
    cluster.start()
    try:
        yield Brokers(cluster=cluster)
    finally:
        cluster.wipe()


@pytest.mark.chaos
def test_a_service_rides_out_broker_sigkills_and_restarts_exactly_once(
        brokers: Brokers, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    """The broker (every node of the cluster) is SIGKILLed at a random moment while the
    member processes, twice, and started again on its directory each time: the member
    survives every restart (as a Kafka Streams member does: its clients reconnect, the group
    gives up on it and takes it back, the interval it had open is aborted and processed
    again) and nothing is lost or doubled. Its producer must not re-bootstrap: librdkafka's
    re-bootstrap left the first checkpoint after a restart waiting forever in
    send_offsets_to_transaction."""
    rng = random.Random(unique)
    bootstrap = brokers.bootstrap
    _create_input(bootstrap, unique)
    svc = ServiceProcess(TARGET, tmp_path, "0", _env(bootstrap, unique))
    services.append(svc.start())
    out = EvenOddOutputs(bootstrap, unique, N)
    chunks = _chunks(3)
    for chunk in chunks[:2]:
        progress = sum(out.drain())
        _feed(bootstrap, unique, chunk)
        wait_until(_more_than(out, progress), 120, "progress before the broker is killed", svc.log_text)
        time.sleep(rng.uniform(0.0, 1.0))  # a random moment: no result may depend on it
        brokers.kill()
        brokers.start()
        assert svc.alive, f"the member exited when the broker restarted:\n{svc.log_text()[-3000:]}"
    _feed(bootstrap, unique, chunks[2])
    wait_until(out.complete, 180, "all outputs", lambda: f"{out.drain()}\n{svc.log_text()[-3000:]}")
    assert svc.stop() == 0
    assert svc.starts == 1
    check_exactly_once(out, N, KEYS)
    out.close()
    check_final_state(bootstrap, unique, N, KEYS)


@pytest.mark.chaos
def test_a_member_that_lost_its_state_while_dead_restores_it_from_the_changelogs(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    """Two members; one is SIGKILLed at a random moment, its state directory deleted (a lost
    disk), and started again, three times: it rebuilds its stores from the changelogs before
    it processes, and outputs and final state are those of a run without faults."""
    rng = random.Random(unique)
    _create_input(kafka_bootstrap, unique)
    env = _env(kafka_bootstrap, unique)
    stable = ServiceProcess(TARGET, tmp_path, "0", env)
    victim = ServiceProcess(TARGET, tmp_path, "1", env)
    services.extend([stable.start(), victim.start()])
    out = EvenOddOutputs(kafka_bootstrap, unique, N)
    first, *faulted, last = _chunks(5)
    _feed(kafka_bootstrap, unique, first)  # committed in full first: every member has state to lose
    wait_until(lambda: out.seen.drain() >= first[1] - 1, 120, "the first chunk's outputs", victim.log_text)
    for chunk in faulted:
        progress = sum(out.drain())
        _feed(kafka_bootstrap, unique, chunk)
        kill_at_random_after(victim, _more_than(out, progress), rng, "progress with both members")
        shutil.rmtree(victim.state_dir)
        victim.start()
        wait_until(lambda: "restored and running" in victim.log_text().rsplit("---- start", 1)[-1], 120,
                   "the restarted member's restore", victim.log_text)
    _feed(kafka_bootstrap, unique, last)
    wait_until(out.complete, 180, "all outputs", lambda: f"{out.drain()}\n{victim.log_text()[-3000:]}")
    assert stable.stop() == 0 and victim.stop() == 0
    assert stable.starts == 1 and victim.starts == 4
    restarts = victim.log_text().split("---- start")[2:]
    assert all(_restored_records(log) > 0 for log in restarts), "each restart rebuilt its stores"
    check_exactly_once(out, N, KEYS)
    out.close()
    check_final_state(kafka_bootstrap, unique, N, KEYS)


def _restored_records(log: str) -> int:
    """Changelog records a member's restores applied, from its ``restored <store>[p]: n records`` lines."""
    return sum(int(n) for n in re.findall(r"restored \w+\[\d+\]: (\d+) records", log))
