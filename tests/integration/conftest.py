import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol, TypeVar

import pytest

from framework.broker.local import LocalBroker
from framework.broker.registry import LocalRegistry, external_registry
from framework.replay.submit import environment, spark_home
from tests.integration.harness import ServiceProcess, wait_until
from tests.ports import worker_port, worker_port_pair

# The modules of the longest tests, longest first, each at the head of one worker's share:
# ``--dist worksteal`` deals the collection out in contiguous shares, one per worker, each
# worker runs its share from the front, and an idle one steals from the back of the longest
# queue. With them all at the front of the first share (before), that worker ran the
# three-node cluster's module (about ten minutes), then the compose stack's, then the slow
# steps', while the others had nothing left but to wait.
LONG_FIRST = ("test_cluster_faults.py", "test_compose_stack.py", "test_slow_steps.py", "test_kube_play.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
    items[:] = spread_long_modules(items, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


class _InModule(Protocol):
    @property
    def path(self) -> Path: ...


Item = TypeVar("Item", bound=_InModule)


def spread_long_modules(items: list[Item], workers: int) -> list[Item]:
    """``items`` reordered so that each of the ``workers`` shares worksteal deals out (in
    turn, the pending tests divided by the workers still to serve) starts with the next of
    the ``LONG_FIRST`` modules, in that order; the rest keep theirs."""
    longest: dict[str, list[Item]] = {name: [] for name in LONG_FIRST}
    rest: list[Item] = []
    for item in items:
        longest.get(item.path.name, rest).append(item)
    heads: list[list[Item]] = [[] for _ in range(max(workers, 1))]
    for i, module in enumerate(m for m in longest.values() if m):
        heads[i % len(heads)] += module
    ordered: list[Item] = []
    for i, head in enumerate(heads):
        share = (len(items) - len(ordered)) // (len(heads) - i)
        fill = max(share - len(head), 0)
        ordered += head + rest[:fill]
        del rest[:fill]
    return ordered + rest


@pytest.fixture
def services() -> Iterator[list[ServiceProcess]]:
    """The test's services; any still running at the end (a failed test) is SIGKILLed."""
    started: list[ServiceProcess] = []
    yield started
    for svc in started:
        if svc.alive:
            svc.kill()


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Confluent-compatible schema registry for the session, its API URL:
    ``FW_SCHEMA_REGISTRY_URL`` when set, else a local one (``fw registry start``'s code) in a
    temporary directory on a free port, stopped at the end. Tests use subjects of their own."""
    external = external_registry()
    if external:
        yield external
        return
    # From this worker's window (tests.ports): a port found free can still be taken by
    # another worker's registry while this one starts.
    port = worker_port()
    registry = LocalRegistry(tmp_path_factory.mktemp("registry"), port=port)
    status = registry.start()
    try:
        yield status.url
    finally:
        registry.stop()


@pytest.fixture
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A broker of the test's own, to kill and restart: its directory is named, so
    FW_BOOTSTRAP_SERVERS (the suite's cluster) does not stand in for it."""
    own = LocalBroker(tmp_path_factory.mktemp("fault-broker"), worker_port_pair())
    own.start()
    try:
        yield own
    finally:
        own.wipe()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark standalone cluster from the installed pyspark: a master and two workers (one
    core each) on loopback; yields its master URL once both workers have registered. One per
    test worker, shared by its tests: each job is an application of its own on it."""
    tmp_path = tmp_path_factory.mktemp("spark-cluster")
    port = worker_port_pair()  # the master's port, its web UI on the next
    ui = port + 1
    home = spark_home()
    env = {**environment(), "SPARK_NO_DAEMONIZE": "1"}  # fw replay's: pyspark's Spark, this Python, Java
    url = f"spark://127.0.0.1:{port}"
    procs = []

    def start(name: str, *args: str) -> None:
        with open(tmp_path / f"{name}.log", "wb") as log:  # the process writes to its own copy of the descriptor
            procs.append(subprocess.Popen([str(home / "bin" / "spark-class"), *args], env=env, stdout=log,
                                          stderr=subprocess.STDOUT))

    def workers() -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as answer:
                return int(json.load(answer).get("aliveworkers", 0))
        except (OSError, ValueError):  # ValueError: a starting master's UI answered its HTML page, not JSON yet
            return 0

    try:
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
              "--webui-port", str(ui))
        for i in range(2):
            start(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                  "--cores", "1", "--memory", "2g", "--webui-port", "0", "--work-dir", str(tmp_path / f"work-{i}"))
        wait_until(lambda: workers() == 2, 120, "two Spark workers registered with the master",
                   lambda: "\n".join((tmp_path / f).read_text(errors="replace")[-2000:]
                                     for f in ("master.log", "worker-0.log", "worker-1.log")))
        yield url
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
