"""A service on a three-node cluster (RF 3, min ISR 2), the shape production runs, while its
nodes fail and restart the way they do in production: one SIGKILLed (the one leading the
input, the one coordinating a member's transactions, the one coordinating the group), the
input's leader chased through restarts, a rolling restart of every node, two nodes down at
once. Two exactly-once members process a live feed throughout; neither may exit, and a
read_committed audit must see every input's effects exactly once. The cluster is the
module's own (``LocalCluster`` on ports and a directory of its own)."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException

from framework.broker.cluster import LocalCluster
from framework.kafka.admin import InternalTopics, TopicSpec, admin_client, ensure_topics
from framework.kafka.clients import coordinator_partition
from framework.runtime.topics import ensure_service_topics
from tests.integration.harness import (
    ROOT,
    EvenOddOutputs,
    ServiceProcess,
    check_exactly_once,
    check_final_state,
    end_offsets,
    even_odd_inputs,
    get_json,
    produce,
    read_topic,
    replication,
    service_env,
    wait_until,
)
from tests.integration.test_doctor import fw_doctor
from tests.ports import worker_ports

KEYS = 300
TARGET = "tests.integration.pipelines:even_odd"
INTERNAL_PARTITIONS = 10  # offsets.topic.num.partitions and transaction.state.log.num.partitions


@pytest.fixture(scope="module")
def cluster_of_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("cluster"), worker_ports(6), nodes=3)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.wipe()


@pytest.fixture
def three_nodes(cluster_of_module: LocalCluster) -> Iterator[LocalCluster]:
    """The module's cluster, every node of it running again after the test (one that failed
    with a node down leaves the next test the whole cluster, not its own failure)."""
    yield cluster_of_module
    cluster_of_module.start()


def _leader(bootstrap: str, topic: str, partition: int) -> int:
    """The node leading ``topic[partition]`` (-1 during its election). Asked again while the
    question fails: librdkafka answers a metadata request sent to a node that has just died,
    or is starting, with a transport failure rather than asking another node."""
    admin = admin_client({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 30
    while True:
        try:
            md = admin.list_topics(topic, timeout=10)
            return int(md.topics[topic].partitions[partition].leader)
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _coordinator(bootstrap: str, internal: str, key: str) -> int:
    """The node coordinating ``key`` (a group or a transactional id): the leader of its
    partition of the internal topic, as Kafka picks it (abs(String.hashCode) % partitions)."""
    return _leader(bootstrap, internal, coordinator_partition(key, INTERNAL_PARTITIONS))


class Members:
    """Two members of the even/odd service on the cluster, their outputs' audit, and a
    watcher that records every /health answer that was not 200."""

    def __init__(self, cluster: LocalCluster, unique: str, tmp_path: Path, services: list[ServiceProcess],
                 n: int, chunks: int) -> None:
        self.cluster, self.unique, self.n = cluster, unique, n
        self.bootstrap = cluster.bootstrap
        self.source = f"numbers-{unique}"
        ensure_topics(admin_client({"bootstrap.servers": self.bootstrap}), [TopicSpec(self.source, 4)])
        env = service_env(self.bootstrap, unique, checkpoint_interval_ms=200, batch_size=1000)
        del env["FW_KAFKA_CONSUMER__SESSION_TIMEOUT_MS"]  # the default's: no member is killed here
        self.members = [ServiceProcess(TARGET, tmp_path, str(i), env) for i in range(2)]
        for m in self.members:
            services.append(m.start())
        self.out = EvenOddOutputs(self.bootstrap, unique, n)
        bounds = [1 + n * i // chunks for i in range(chunks)] + [n + 1]
        self.chunks = iter(itertools.pairwise(bounds))
        self.unhealthy: list[str] = []
        self._stop = threading.Event()
        self._urls = [m.endpoint() for m in self.members]
        self._starting: set[int] = set()  # members whose new endpoint is not known yet
        self._watch = threading.Thread(target=self._watch_health, daemon=True)
        self._watch.start()

    def _watch_health(self) -> None:
        while not self._stop.wait(0.5):
            for i, (m, url) in enumerate(zip(self.members, self._urls)):
                if i in self._starting:
                    continue
                try:
                    code, body = get_json(f"{url}/health")
                except OSError as exc:
                    code, body = 0, str(exc)
                # a member restarted meanwhile (restart) was asked at its old address: not counted
                if code != 200 and m.alive and i not in self._starting and self._urls[i] == url:
                    self.unhealthy.append(f"member {m.instance}: {code} {body}")

    def log(self) -> str:
        fresh = {t: sum(end_offsets(self.bootstrap, f"{t}-{self.unique}").values()) for t in ("seen", "counts", "sums")}
        status = [get_json(f"{url}/status")[1] for url in self._urls]
        health = [get_json(f"{url}/health") for url in self._urls]
        committed = {t: len(read_topic(self.bootstrap, f"{t}-{self.unique}")) for t in ("seen", "counts", "sums")}
        return "\n".join([(f"tails read {self.out.drain()}; the outputs' end offsets {fresh}; read_committed "
                            f"now {committed}; health {health}"),
                          *(f"== member {m.instance}: {json.dumps(st)[:1500]}\n{m.log_text()[-4000:]}"
                            for m, st in zip(self.members, status))])

    def outputs(self) -> int:
        return sum(self.out.drain())

    def feed(self) -> None:
        """The next chunk of the input, and wait until outputs follow it."""
        before = self.outputs()
        produce(self.bootstrap, self.source, even_odd_inputs(*next(self.chunks), KEYS))
        wait_until(lambda: self.outputs() > before, 180, "outputs of the chunk fed", self.log)

    def group_coordinator(self) -> int:
        return _coordinator(self.bootstrap, "__consumer_offsets", f"eo-{self.unique}")

    def transaction_coordinator(self, member: int) -> int:
        return _coordinator(self.bootstrap, "__transaction_state", f"eo-{self.unique}-{member}")

    def input_leader(self) -> int:
        return _leader(self.bootstrap, self.source, 0)

    def in_sync(self) -> None:
        wait_until(lambda: not self.cluster.status().under_replicated, 180, "every partition back in sync")

    def restart(self, i: int, *, wipe: bool, meanwhile: Callable[[], object] = lambda: None) -> None:
        """Stop member ``i`` (SIGTERM: a final checkpoint, then it leaves the group), call
        ``meanwhile``, and start it again, without its local state when ``wipe`` (it restores
        from the changelogs)."""
        member = self.members[i]
        self._starting.add(i)
        assert member.stop() == 0, self.log()
        if wipe:
            shutil.rmtree(member.state_dir)
        meanwhile()
        member.start()
        self._urls[i] = member.endpoint()
        self._starting.discard(i)

    def finish(self, starts: tuple[int, int] = (1, 1)) -> None:
        for rest in self.chunks:
            produce(self.bootstrap, self.source, even_odd_inputs(*rest, KEYS))
        wait_until(self.out.complete, 300, "all outputs", lambda: f"{self.out.drain()}\n{self.log()}")
        self._stop.set()
        self._watch.join()
        for m, n in zip(self.members, starts):
            assert m.alive and m.starts == n, self.log()
        assert self.unhealthy == [], self.unhealthy[:5]
        for m in self.members:
            assert m.stop() == 0, self.log()
        check_exactly_once(self.out, self.n, KEYS)
        self.out.close()
        check_final_state(self.bootstrap, self.unique, self.n, KEYS)


def _bounce(members: Members, which: int | Callable[[], int], kill: bool) -> int:
    """Stop node ``which`` (or ``which()``) with SIGKILL or SIGTERM, feed a chunk while it is
    down and wait for its outputs, start it again, wait until every partition is in sync;
    the node."""
    node = which if isinstance(which, int) else which()
    members.cluster.stop(node, kill=kill)
    members.feed()
    members.cluster.start(node)
    members.in_sync()
    return node


def test_members_ride_out_the_input_leader_a_transaction_coordinator_and_the_group_coordinator_sigkilled(
        three_nodes: LocalCluster, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    m = Members(three_nodes, unique, tmp_path, services, 16_000, 8)
    m.feed()
    for which in (m.input_leader, lambda: m.transaction_coordinator(0), m.group_coordinator):
        _bounce(m, which, kill=True)
        m.feed()
    m.finish()


def test_members_ride_out_two_rolling_restarts_and_the_input_leader_chased_through_five_restarts(
        three_nodes: LocalCluster, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    """As an upgrade restarts a cluster: each node in turn stopped cleanly, started, and in
    sync before the next, twice over; then, as Kafka Streams' broker-bounce system test does,
    the node leading the input's partition 0 restarted five times in a row, each time the
    new leader, cleanly and SIGKILLed in turn."""
    m = Members(three_nodes, unique, tmp_path, services, 24_000, 13)
    m.feed()
    for _ in range(2):
        for node in (1, 2, 3):
            _bounce(m, node, kill=False)
    for i in range(5):
        _bounce(m, m.input_leader, kill=i % 2 == 1)
    m.finish()


def test_members_ride_out_the_active_controller_chased_through_five_restarts(
        three_nodes: LocalCluster, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    """The node leading the KRaft quorum restarted five times in a row, each time the new
    leader, cleanly and SIGKILLed in turn: the other two elect a new one, and the topics'
    metadata (leaders, in-sync replicas) moves through it meanwhile."""
    m = Members(three_nodes, unique, tmp_path, services, 12_000, 7)
    m.feed()
    chased = []
    for i in range(5):
        wait_until(lambda: three_nodes.active_controller() is not None, 60, "an active controller")
        chased.append(_bounce(m, lambda: three_nodes.active_controller() or 0, kill=i % 2 == 1))
    assert all(a != b for a, b in itertools.pairwise(chased)), chased  # a new leader each time
    m.finish()


def test_members_wait_while_two_nodes_are_down_and_go_on_when_one_returns(
        three_nodes: LocalCluster, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    """Two of three nodes SIGKILLed while a chunk is processed: below min.insync.replicas (and,
    the nodes being controllers too, without a KRaft quorum) no write is acknowledged. The
    members must neither exit nor lose or repeat anything: not ready while they wait, and on
    by themselves once one node is back."""
    m = Members(three_nodes, unique, tmp_path, services, 8_000, 4)
    m.feed()
    before = m.outputs()
    produce(m.bootstrap, m.source, even_odd_inputs(*next(m.chunks), KEYS))
    down = [m.input_leader()]
    down.append(next(n for n in (1, 2, 3) if n not in down))
    for node in down:
        three_nodes.stop(node, kill=True)
    wait_until(lambda: not any(get_json(f"{url}/ready")[0] == 200 for url in m._urls), 120,
               "both members not ready", m.log)
    three_nodes.start(down[0])
    wait_until(lambda: m.outputs() > before, 300, "outputs of the chunk fed", m.log)
    three_nodes.start(down[1])
    m.in_sync()
    m.finish()


def test_a_member_restores_from_changelogs_whose_leader_is_sigkilled_as_it_starts(
        three_nodes: LocalCluster, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    """A member restarted without its local state rebuilds it from the changelogs while the
    node leading them has just been SIGKILLed: its restore waits for the new leaders (the
    cluster fences the dead node after broker.session.timeout.ms) and reads on from them."""
    m = Members(three_nodes, unique, tmp_path, services, 8_000, 4)
    m.feed()
    m.feed()
    node = _leader(m.bootstrap, f"eo-{unique}-sums-changelog", 0)
    m.restart(0, wipe=True, meanwhile=lambda: three_nodes.stop(node, kill=True))
    m.feed()
    three_nodes.start(node)
    m.in_sync()
    m.finish(starts=(2, 1))


def test_a_services_own_topics_take_the_cluster_defaults_or_the_internal_settings(
        three_nodes: LocalCluster, unique: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The service's repartition topic, changelogs and dead letters at the cluster's RF 3 / min
    ISR 2, or as ``kafka.internal_replication_factor`` and ``internal_min_insync_replicas``
    say; its sources and sinks at the cluster's defaults either way."""
    from tests.integration.pipelines import even_odd

    bootstrap = three_nodes.bootstrap
    for suffix, internal, expected in ((f"{unique}d", InternalTopics(), ({3}, "2")),
                                       (f"{unique}s", InternalTopics(2, 1), ({2}, "1"))):
        monkeypatch.setenv("FW_TEST_SUFFIX", suffix)
        pipeline = even_odd()
        ensure_service_topics(pipeline, {"bootstrap.servers": bootstrap}, internal=internal)
        own = [*(t for t in pipeline.input_topics() if "repartition" in t),
               *(pipeline.changelog_topic(s) for s in pipeline.changelogged_stores()), pipeline.dead_letter.name]
        users = [f"numbers-{suffix}", f"sums-{suffix}", f"counts-{suffix}", f"seen-{suffix}"]
        assert len(own) == 4
        assert {t: replication(bootstrap, t) for t in own} == dict.fromkeys(own, expected)
        assert {t: replication(bootstrap, t) for t in users} == dict.fromkeys(users, ({3}, "2"))

        # fw doctor SERVICE reports the same, and warns about the ones a write reaches one node of
        checks = {c["name"]: c for c in json.loads(fw_doctor(bootstrap, TARGET, "--json", "--skip-clock").stdout)}
        if expected == ({3}, "2"):
            assert (checks["topics"]["status"], checks["topics"]["detail"]) == (
                "ok", f"eo-{suffix}: 8 topics (8 at RF 3/min ISR 2)"), checks["topics"]
        else:
            assert checks["topics"]["status"] == "warn", checks["topics"]
            assert checks["topics"]["detail"].endswith(
                "; ".join(f"{t} min.insync.replicas=1" for t in own)), checks["topics"]


def test_fw_doctor_reports_the_clusters_replication_and_warns_about_a_lax_producer(three_nodes: LocalCluster) -> None:
    checks = {c["name"]: c for c in json.loads(fw_doctor(three_nodes.bootstrap, "--json", "--skip-clock").stdout)}
    assert checks["durability"]["status"] == "ok", checks["durability"]
    assert checks["durability"]["detail"] == "3 brokers; default.replication.factor=3, min.insync.replicas=2"
    env_lax = {**os.environ, "FW_KAFKA_PRODUCER__ACKS": "1"}
    lax = subprocess.run([sys.executable, "-c", "from framework.cli import main; main()", "doctor", "--json",
                          "--skip-clock"], env={**env_lax, "FW_BOOTSTRAP_SERVERS": three_nodes.bootstrap,
                                                "PYTHONPATH": str(ROOT)},
                         cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    found = {c["name"]: c for c in json.loads(lax.stdout)}["durability"]
    assert found["status"] == "warn" and "kafka.producer acks=1" in found["detail"], found
