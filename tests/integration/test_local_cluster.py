"""A local cluster of three KRaft nodes (``fw broker start --nodes 3``), the shape production
runs, driven through the CLI on a directory and ports of the test's own: a topic the framework
creates with the cluster's defaults (as it creates its internal topics) is at replication
factor 3 with min.insync.replicas 2; one node stopped and started again."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from framework.cli import cli
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from tests.integration.harness import replication, wait_until
from tests.ports import worker_ports


def test_fw_broker_runs_a_local_cluster_and_one_node_of_it(tmp_path: Path) -> None:
    """``fw broker start --nodes 3``, ``status``, ``stop --node``, ``start --node`` and
    ``stop --wipe`` on a directory and ports of the test's own."""
    port = worker_ports(6)
    env = {"FW_BROKER_DIR": str(tmp_path / "cluster"), "FW_BROKER_PORT": str(port), "FW_BOOTSTRAP_SERVERS": ""}
    run = CliRunner()
    try:
        started = run.invoke(cli, ["broker", "start", "--nodes", "3"], env=env)
        assert started.exit_code == 0, started.output
        bootstrap = started.output.strip()
        assert bootstrap == f"127.0.0.1:{port},127.0.0.1:{port + 2},127.0.0.1:{port + 4}"
        ensure_topics(admin_client({"bootstrap.servers": bootstrap}), [TopicSpec("defaults", 3)])
        assert replication(bootstrap, "defaults") == ({3}, "2")
        stopped = run.invoke(cli, ["broker", "stop", "--node", "2"], env=env)
        assert (stopped.exit_code, stopped.output.strip()) == (0, "stopped")
        status = run.invoke(cli, ["broker", "status"], env=env)
        assert status.exit_code == 0, status.output
        lines = status.output.splitlines()
        assert lines[0].startswith("cluster of 3 nodes, 2 running")
        assert lines[2].startswith(f"  node 2: stopped 127.0.0.1:{port + 2}")
        assert lines[1].startswith("  node 1: running") and lines[3].startswith("  node 3: running")
        wait_until(lambda: run.invoke(cli, ["broker", "status"], env=env).output.splitlines()[-1] in (
            "active controller: node 1", "active controller: node 3"), 60, "a controller among the running nodes")
        again = run.invoke(cli, ["broker", "start", "--node", "2"], env=env)
        assert again.exit_code == 0, again.output
        status = run.invoke(cli, ["broker", "status"], env=env)
        assert status.output.splitlines()[0].startswith("cluster of 3 nodes, 3 running"), status.output
        wrong = run.invoke(cli, ["broker", "start", "--nodes", "5"], env=env)
        assert "holds a cluster of 3 nodes, not 5" in str(wrong.exception)
    finally:
        wiped = run.invoke(cli, ["broker", "stop", "--wipe"], env=env)
    assert wiped.exit_code == 0 and not (tmp_path / "cluster").exists()
