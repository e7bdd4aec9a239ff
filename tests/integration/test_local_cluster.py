"""A local cluster of three KRaft nodes (``fw broker start --nodes 3``), the shape production
runs: topics, the framework's internal ones included, at replication factor 3 with
min.insync.replicas 2, and an exactly-once service that rides out a node SIGKILLed and
restarted under load with nothing lost or doubled. The cluster is the test's own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner
from confluent_kafka.admin import ConfigResource

from framework.broker.cluster import LocalCluster
from framework.cli import cli
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from tests.integration.harness import (
    EvenOddOutputs,
    ServiceProcess,
    check_exactly_once,
    check_final_state,
    even_odd_inputs,
    produce,
    service_env,
    wait_until,
)

N = 12_000
KEYS = 300
TARGET = "tests.integration.pipelines:even_odd"


def _replication(bootstrap: str, topic: str) -> tuple[set[int], str]:
    """The replica counts of ``topic``'s partitions, and its effective min.insync.replicas."""
    admin = admin_client({"bootstrap.servers": bootstrap})
    md = admin.list_topics(topic, timeout=10).topics[topic]
    [configs] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
    return {len(p.replicas) for p in md.partitions.values()}, configs.result(10)["min.insync.replicas"].value


def _leader_of(bootstrap: str, topic: str, partition: int) -> int:
    md = admin_client({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return int(md.topics[topic].partitions[partition].leader)


def _more_than(out: EvenOddOutputs, outputs: int) -> Callable[[], bool]:
    return lambda: sum(out.drain()) > outputs


def test_a_service_on_three_nodes_rides_out_the_input_leader_sigkilled_and_restarted(
        three_nodes: LocalCluster, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    bootstrap = three_nodes.bootstrap
    source = f"numbers-{unique}"
    ensure_topics(admin_client({"bootstrap.servers": bootstrap}), [TopicSpec(source, 4)])
    svc = ServiceProcess(TARGET, tmp_path, "0", service_env(bootstrap, unique, checkpoint_interval_ms=200,
                                                            batch_size=1000))
    services.append(svc.start())
    out = EvenOddOutputs(bootstrap, unique, N)
    produce(bootstrap, source, even_odd_inputs(1, N // 2 + 1, KEYS))
    wait_until(_more_than(out, 0), 120, "outputs before a node is killed", svc.log_text)

    # Every topic of the service, the internal ones too, has three replicas and min ISR 2.
    topics = admin_client({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    theirs = sorted(t for t in topics if unique in t)
    assert any("changelog" in t for t in theirs), theirs
    assert {t: _replication(bootstrap, t) for t in theirs} == {t: ({3}, "2") for t in theirs}

    # The node leading the input's partition 0 is SIGKILLed mid-run: the status says which
    # partitions lost a copy, the member goes on, and the node comes back in sync.
    victim = _leader_of(bootstrap, source, 0)
    three_nodes.stop(victim, kill=True)
    wait_until(lambda: bool(three_nodes.status().under_replicated), 60, "under-replicated partitions reported")
    st = three_nodes.status()
    assert [n.node for n in st.nodes if not n.running] == [victim]
    before = sum(out.drain())
    produce(bootstrap, source, even_odd_inputs(N // 2 + 1, N + 1, KEYS))
    wait_until(_more_than(out, before), 120, "outputs while the node is down", svc.log_text)
    three_nodes.start(victim)
    wait_until(out.complete, 180, "all outputs", lambda: f"{out.drain()}\n{svc.log_text()[-3000:]}")
    wait_until(lambda: not three_nodes.status().under_replicated, 120, "every partition back in sync")
    assert svc.alive and svc.starts == 1, svc.log_text()[-3000:]
    assert svc.stop() == 0
    check_exactly_once(out, N, KEYS)
    out.close()
    check_final_state(bootstrap, unique, N, KEYS)


def test_fw_broker_runs_a_local_cluster_and_one_node_of_it(tmp_path: Path) -> None:
    """``fw broker start --nodes 3``, ``status``, ``stop --node``, ``start --node`` and
    ``stop --wipe`` on a directory and ports of the test's own."""
    from tests.ports import worker_ports

    port = worker_ports(6)
    env = {"FW_BROKER_DIR": str(tmp_path / "cluster"), "FW_BROKER_PORT": str(port), "FW_BOOTSTRAP_SERVERS": ""}
    run = CliRunner()
    try:
        started = run.invoke(cli, ["broker", "start", "--nodes", "3"], env=env)
        assert started.exit_code == 0, started.output
        assert started.output.strip() == f"127.0.0.1:{port},127.0.0.1:{port + 2},127.0.0.1:{port + 4}"
        stopped = run.invoke(cli, ["broker", "stop", "--node", "2"], env=env)
        assert (stopped.exit_code, stopped.output.strip()) == (0, "stopped")
        status = run.invoke(cli, ["broker", "status"], env=env)
        assert status.exit_code == 0, status.output
        lines = status.output.splitlines()
        assert lines[0].startswith("cluster of 3 nodes, 2 running")
        assert lines[2].startswith(f"  node 2: stopped 127.0.0.1:{port + 2}")
        assert lines[1].startswith("  node 1: running") and lines[3].startswith("  node 3: running")
        again = run.invoke(cli, ["broker", "start", "--node", "2"], env=env)
        assert again.exit_code == 0, again.output
        status = run.invoke(cli, ["broker", "status"], env=env)
        assert status.output.splitlines()[0].startswith("cluster of 3 nodes, 3 running"), status.output
        wrong = run.invoke(cli, ["broker", "start", "--nodes", "5"], env=env)
        assert "holds a cluster of 3 nodes, not 5" in str(wrong.exception)
    finally:
        wiped = run.invoke(cli, ["broker", "stop", "--wipe"], env=env)
    assert wiped.exit_code == 0 and not (tmp_path / "cluster").exists()
