"""A real local Apache Kafka cluster of several KRaft nodes, for tests and for trying broker
failures at home: ``fw broker start --nodes 3``.

Every node is broker and controller, in ``<instance dir>/node-<i>/`` (the layout of a single
broker's directory, ``framework.broker.local``), on consecutive port pairs from the base port
(``FW_BROKER_PORT``, else 28092): node ``i`` listens for clients on ``base + 2(i - 1)`` and for
its controller on the next port. Topics are created at replication factor ``min(3, nodes)``
and ``min.insync.replicas`` one less (at least 1), the offsets and transaction logs too, so
an acknowledged write survives one node lost, and a producer with ``acks=all`` is refused
(``NOT_ENOUGH_REPLICAS``) rather than trusted to one copy when two of three are down.

``<instance dir>/cluster.json`` records the node count and the base port; its presence makes the
directory a cluster's for every ``fw broker`` command. The jars are the single broker's.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from framework.broker.local import (
    STOP_TIMEOUT_S,
    LocalBroker,
    NodeRole,
    alive,
    cluster_id_new,
    external_bootstrap,
    finish,
)
from framework.errors import BrokerError
from framework.home import (
    CLUSTER_RECORD,
    DEFAULT_BROKER_PORT,
    broker_dir,
    recorded_broker,
    recorded_cluster,
)
from framework.kafka.admin import under_replicated

_READY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class NodeStatus:
    node: int
    running: bool
    bootstrap: str
    pid: int | None
    log_file: Path


@dataclass(frozen=True)
class ClusterStatus:
    nodes: tuple[NodeStatus, ...]
    bootstrap: str
    under_replicated: tuple[str, ...]  # ``topic[partition]`` with fewer in-sync replicas than replicas
    instance_dir: Path
    brokers_seen: int = 0  # brokers in the cluster's metadata (0: no node answered)
    active_controller: int | None = None  # the node leading the KRaft quorum, as the running nodes record it

    @property
    def running(self) -> bool:
        return any(n.running for n in self.nodes)

    def describe(self) -> list[str]:
        up = sum(n.running for n in self.nodes)
        head = f"cluster of {len(self.nodes)} nodes, {up} running, bootstrap={self.bootstrap}"
        lines = [f"{head} (instance dir {self.instance_dir})"]
        for n in self.nodes:
            state = f"running pid={n.pid}" if n.running else "stopped"
            lines.append(f"  node {n.node}: {state} {n.bootstrap} log={n.log_file}")
        if up:
            lines.append(f"under-replicated partitions: {', '.join(self.under_replicated)}" if self.under_replicated
                         else "under-replicated partitions: none")
            lines.append(f"active controller: node {self.active_controller}" if self.active_controller
                         else "active controller: none elected")
        return lines


def is_cluster(instance_dir: Path | None = None) -> bool:
    """Whether the local broker's directory holds a cluster (``fw broker start --nodes N``)."""
    return (Path(instance_dir or broker_dir()) / CLUSTER_RECORD).exists()


class LocalCluster:
    """Start, inspect and stop a local cluster of ``nodes`` KRaft nodes in one directory, or
    one node of it."""

    def __init__(self, instance_dir: Path | None = None, port: int | None = None, nodes: int | None = None) -> None:
        self.instance_dir = Path(instance_dir or broker_dir())
        record = self._record()
        if record and nodes is not None and nodes != record["nodes"]:
            raise BrokerError(f"{self.instance_dir} holds a cluster of {record['nodes']} nodes, not {nodes}: "
                              "`fw broker stop --wipe` to start over with another size")
        self.nodes = int(nodes or (record or {}).get("nodes") or 3)
        if self.nodes < 2:
            raise BrokerError(f"a local cluster has 2 nodes or more, not {self.nodes}: `fw broker start` "
                              "without --nodes runs a single broker")
        if port is None and record:
            port = int(record["port"])
        self.port = int(port or os.environ.get("FW_BROKER_PORT") or DEFAULT_BROKER_PORT)
        self.replication = min(3, self.nodes)
        self.min_insync = max(1, self.replication - 1)

    # -- the nodes -----------------------------------------------------------------------

    def node_port(self, node: int) -> int:
        return self.port + 2 * (node - 1)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.node_port(i)}" for i in range(1, self.nodes + 1))

    def node(self, node: int) -> LocalBroker:
        """Node ``node`` (1-based) as a broker of its own directory."""
        if not 1 <= node <= self.nodes:
            raise BrokerError(f"the cluster in {self.instance_dir} has nodes 1 to {self.nodes}, not {node}")
        voters = ",".join(f"{i}@127.0.0.1:{self.node_port(i) + 1}" for i in range(1, self.nodes + 1))
        role = NodeRole(node, voters, self._cluster_id(), self.replication, self.min_insync)
        return LocalBroker(self.instance_dir / f"node-{node}", self.node_port(node), role=role)

    def _record(self) -> dict[str, Any] | None:
        return recorded_cluster(self.instance_dir)

    def _cluster_id(self) -> str:
        record = self._record()
        if record is None:
            raise BrokerError(f"no cluster is set up in {self.instance_dir}")
        return str(record["cluster_id"])

    def _set_up(self) -> None:
        if self._record() is not None:
            return
        if (self.instance_dir / "data").exists():
            raise BrokerError(f"{self.instance_dir} holds a single broker's data: `fw broker stop --wipe` first, "
                              "or give the cluster another directory (FW_BROKER_DIR)")
        self.instance_dir.mkdir(parents=True, exist_ok=True)
        (self.instance_dir / CLUSTER_RECORD).write_text(json.dumps(
            {"nodes": self.nodes, "port": self.port, "cluster_id": cluster_id_new(), "bootstrap": self.bootstrap}))

    # -- commands ------------------------------------------------------------------------

    def start(self, node: int | None = None) -> ClusterStatus:
        """Start every node (or ``node``) not running; return once each answers and the
        cluster's metadata has every running node."""
        ext = external_bootstrap()
        if ext:
            raise BrokerError(f"FW_BOOTSTRAP_SERVERS={ext} names a cluster this command does not manage; unset it "
                              "to start the local cluster")
        self._set_up()
        which = [node] if node is not None else list(range(1, self.nodes + 1))
        brokers = [self.node(i) for i in which]
        for b in brokers:  # together: no node answers before a majority of controllers runs
            b.start(wait=False)
        for b in brokers:
            b.wait_ready()
        self._wait_registered()
        return self.status()

    def stop(self, node: int | None = None, kill: bool = False) -> bool:
        """Stop every node, or ``node``: SIGTERM (a clean shutdown; one node alone first moves
        its partitions' leaders away), or with ``kill`` SIGKILL. The whole cluster's nodes are
        signalled together: one at a time, the last ones would wait for a controller quorum
        that has gone. True when one was running."""
        which = [node] if node is not None else list(range(1, self.nodes + 1))
        pids = [(self.node(i), _pid(self.instance_dir / f"node-{i}")) for i in which]
        for _, pid in pids:
            if pid is not None:
                os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for b, pid in pids:
            if pid is not None:
                finish(pid, deadline)
            b.stop()  # forgets the record
        return any(pid is not None for _, pid in pids)

    def wipe(self) -> bool:
        was_running = self.stop() if self._record() else False
        shutil.rmtree(self.instance_dir, ignore_errors=True)
        return was_running

    def status(self) -> ClusterStatus:
        nodes = []
        for i in range(1, self.nodes + 1):
            b = self.node(i) if self._record() else LocalBroker(self.instance_dir / f"node-{i}", self.node_port(i))
            st = b.status()
            nodes.append(NodeStatus(i, st.running, b.bootstrap, st.pid, st.log_file))
        running = ",".join(n.bootstrap for n in nodes if n.running)
        under, seen = under_replicated(running) if running else ((), 0)
        return ClusterStatus(tuple(nodes), self.bootstrap, under, self.instance_dir, seen, self.active_controller())

    def active_controller(self) -> int | None:
        """The node leading the KRaft quorum (the active controller), as the running nodes'
        ``quorum-state`` files record the leader they follow: the one of the latest epoch.
        Kafka's clients are not told which node it is (their metadata names a random broker)."""
        leader, epoch = None, -1
        for i in range(1, self.nodes + 1):
            node_dir = self.instance_dir / f"node-{i}"
            if _pid(node_dir) is None:
                continue
            try:
                state = json.loads((node_dir / "data" / "__cluster_metadata-0" / "quorum-state").read_text())
            except (OSError, ValueError):
                continue  # not written yet, or being rewritten
            if int(state.get("leaderId", -1)) > 0 and int(state.get("leaderEpoch", -1)) > epoch:
                leader, epoch = int(state["leaderId"]), int(state["leaderEpoch"])
        return leader if leader is not None and _pid(self.instance_dir / f"node-{leader}") is not None else None

    def _wait_registered(self) -> None:
        """Until the metadata of every running node lists every running node as a broker."""
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while True:
            st = self.status()
            up = sum(n.running for n in st.nodes)
            if st.brokers_seen >= up:
                return
            if time.monotonic() > deadline:
                raise BrokerError(f"{up} nodes run but the cluster's metadata lists {st.brokers_seen} brokers after "
                                  f"{_READY_TIMEOUT_S:.0f}s; see the nodes' logs in {self.instance_dir}")
            time.sleep(0.2)


def _pid(node_dir: Path) -> int | None:
    """The pid of a node's JVM while it lives (answering or not: a wedged node is stopped too)."""
    recorded = recorded_broker(node_dir)
    return recorded[0] if recorded is not None and alive(recorded[0]) else None
