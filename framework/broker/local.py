"""A real single-node Apache Kafka broker (KRaft) for development and tests, without Docker.

The server jars come from Maven Central through the machine's ``mvn`` (``pom.xml`` beside
this file), copied into a cache directory outside the repository, and run on the
machine's Java 17. One broker instance lives in one directory::

    <instance dir>/server.properties   generated config
    <instance dir>/data/               log.dirs (formatted once with the KRaft storage tool)
    <instance dir>/broker.log          stdout and stderr of the JVM
    <instance dir>/broker.json         pid and bootstrap address of the running broker

Locations (all optional environment variables):

- ``FW_HOME``: cache root, default ``~/.cache/fw``; jars go to ``$FW_HOME/kafka/<version>``.
- ``FW_BROKER_DIR``: instance directory, default ``$FW_HOME/broker``.
- ``FW_BROKER_PORT``: client port on 127.0.0.1, default 39092 (controller: port + 1).
- ``FW_BOOTSTRAP_SERVERS``: an existing cluster; when set, nothing is started or stopped.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from framework.errors import BrokerError, EnvironmentProblem
from framework.kafka.admin import broker_answers

KAFKA_VERSION = "4.1.1"
_HERE = Path(__file__).resolve().parent
_START_TIMEOUT_S = 90.0
_STOP_TIMEOUT_S = 30.0

# Transactions on one node need the transaction log (and offsets) at RF 1 / min ISR 1.
_SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller_port}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={data_dir}
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=10
min.insync.replicas=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
log.retention.hours=-1
log.segment.bytes=67108864
transaction.max.timeout.ms=900000
"""


def fw_home() -> Path:
    return Path(os.environ.get("FW_HOME") or Path.home() / ".cache" / "fw")


def external_bootstrap() -> str | None:
    """The bootstrap servers of an existing cluster named in the environment, if any."""
    return os.environ.get("FW_BOOTSTRAP_SERVERS") or None


@dataclass(frozen=True)
class BrokerStatus:
    running: bool
    bootstrap: str
    pid: int | None
    instance_dir: Path
    log_file: Path
    external: bool = False

    def describe(self) -> str:
        if self.external:
            state = "reachable" if self.running else "NOT reachable"
            return f"external cluster {self.bootstrap} (FW_BOOTSTRAP_SERVERS): {state}"
        if not self.running:
            return f"not running (instance dir {self.instance_dir}, log {self.log_file})"
        return f"running pid={self.pid} bootstrap={self.bootstrap} log={self.log_file}"


class LocalBroker:
    """Start, inspect and stop the local broker of one instance directory."""

    def __init__(self, instance_dir: Path | None = None, port: int | None = None) -> None:
        self.instance_dir = Path(instance_dir or os.environ.get("FW_BROKER_DIR") or fw_home() / "broker")
        self.port = int(port or os.environ.get("FW_BROKER_PORT") or 39092)
        self.jar_dir = fw_home() / "kafka" / KAFKA_VERSION
        self.log_file = self.instance_dir / "broker.log"
        self._state_file = self.instance_dir / "broker.json"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    # -- public commands ---------------------------------------------------------------

    def status(self) -> BrokerStatus:
        ext = external_bootstrap()
        if ext:
            return BrokerStatus(broker_answers(ext), ext, None, self.instance_dir, self.log_file, True)
        pid, bootstrap = self._recorded()
        running = pid is not None and _alive(pid) and broker_answers(bootstrap)
        return BrokerStatus(running, bootstrap, pid if running else None, self.instance_dir, self.log_file)

    def start(self) -> BrokerStatus:
        """Start the broker unless it runs already; return once it answers metadata requests."""
        ext = external_bootstrap()
        if ext:
            if not broker_answers(ext, timeout_s=10):
                raise BrokerError(f"FW_BOOTSTRAP_SERVERS={ext} does not answer a metadata request")
            return self.status()
        current = self.status()
        if current.running:
            return current
        pid, _ = self._recorded()
        if pid is not None and _alive(pid):
            # Started but not answering yet (e.g. a concurrent start): wait for it.
            return self._wait_ready(pid)
        java = require_tool("java", "Install a Java 17+ JDK, e.g. `apt-get install openjdk-17-jdk-headless`.")
        self._check_ports()
        self.fetch()
        self._prepare(java)
        return self._launch(java)

    def stop(self) -> bool:
        """Stop the broker; True when one was running. Leaves the data directory in place."""
        if external_bootstrap():
            return False
        pid, _ = self._recorded()
        if pid is None or not _alive(pid):
            self._state_file.unlink(missing_ok=True)
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + _STOP_TIMEOUT_S
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
            _wait_gone(pid)
        self._state_file.unlink(missing_ok=True)
        return True

    def fetch(self) -> Path:
        """Resolve the Kafka server jars from Maven Central into the cache (once)."""
        marker = self.jar_dir / ".complete"
        if marker.exists():
            return self.jar_dir
        mvn = require_tool("mvn", "Install Apache Maven, e.g. `apt-get install maven`.")
        self.jar_dir.mkdir(parents=True, exist_ok=True)
        cmd = [
            mvn, "-q", "-B", "-f", str(_HERE / "pom.xml"),
            f"-Dkafka.version={KAFKA_VERSION}",
            "dependency:copy-dependencies", f"-DoutputDirectory={self.jar_dir}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise BrokerError(f"mvn could not resolve the Kafka {KAFKA_VERSION} jars:\n{tail}")
        marker.write_text(KAFKA_VERSION)
        return self.jar_dir

    # -- steps -------------------------------------------------------------------------

    def _prepare(self, java: str) -> None:
        data_dir = self.instance_dir / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        props = self.instance_dir / "server.properties"
        props.write_text(
            _SERVER_PROPERTIES.format(port=self.port, controller_port=self.port + 1, data_dir=data_dir)
        )
        if (data_dir / "meta.properties").exists():
            return
        cluster_id = _cluster_id()
        cmd = [java, "-cp", self._classpath(), "kafka.tools.StorageTool", "format",
               "-t", cluster_id, "-c", str(props)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=self._java_env())
        if proc.returncode != 0:
            raise BrokerError(f"formatting {data_dir} failed:\n{proc.stdout}{proc.stderr}")

    def _check_ports(self) -> None:
        for port in (self.port, self.port + 1):
            if not port_free(port):
                raise BrokerError(
                    f"port {port} on 127.0.0.1 is taken by another process, so the broker of "
                    f"{self.instance_dir} cannot listen on {self.port} (client) and {self.port + 1} "
                    "(controller); stop that process or choose other ports with FW_BROKER_PORT"
                )

    def _launch(self, java: str) -> BrokerStatus:
        self.instance_dir.mkdir(parents=True, exist_ok=True)
        cmd = [
            java, "-Xms256m", "-Xmx1g", "-XX:+UseG1GC", "-XX:TieredStopAtLevel=1",
            f"-Dlog4j2.configurationFile={_HERE / 'log4j2.properties'}",
            "-cp", self._classpath(), "kafka.Kafka", str(self.instance_dir / "server.properties"),
        ]
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env=self._java_env(),
            )
        self._state_file.write_text(json.dumps({"pid": proc.pid, "bootstrap": self.bootstrap}))
        return self._wait_ready(proc.pid, proc)

    def _wait_ready(self, pid: int, proc: subprocess.Popen[bytes] | None = None) -> BrokerStatus:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None or not _alive(pid):
                raise BrokerError(
                    f"the broker exited during start-up; last lines of {self.log_file}:\n{self._log_tail()}"
                )
            if broker_answers(self.bootstrap, timeout_s=1.0):
                return self.status()
            time.sleep(0.2)
        raise BrokerError(f"the broker did not answer within {_START_TIMEOUT_S:.0f}s; see {self.log_file}")

    def _recorded(self) -> tuple[int | None, str]:
        try:
            state = json.loads(self._state_file.read_text())
            return int(state["pid"]), str(state["bootstrap"])
        except (OSError, ValueError, KeyError):
            return None, self.bootstrap

    def _classpath(self) -> str:
        return str(self.jar_dir / "*")

    def _java_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("CLASSPATH", None)
        return env

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def wipe(self) -> bool:
        """Stop the broker and delete its instance directory (data included)."""
        was_running = self.stop()
        shutil.rmtree(self.instance_dir, ignore_errors=True)
        return was_running


def require_tool(name: str, how: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise EnvironmentProblem(f"`{name}` is not on PATH; the local Kafka broker needs it. {how}")
    return path


def port_free(port: int) -> bool:
    """True when nothing listens on (or holds) ``port`` on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_pair(start: int = 39192, stop: int = 39992) -> int:
    """The first even port in ``[start, stop)`` that is free together with the next one."""
    for port in range(start, stop, 2):
        if port_free(port) and port_free(port + 1):
            return port
    raise BrokerError(f"no two free consecutive ports between {start} and {stop} on 127.0.0.1")


def _cluster_id() -> str:
    # KRaft cluster ids are 16 random bytes, URL-safe base64 without padding (22 chars).
    # Like Kafka's own Uuid.randomUuid, refuse ids starting with "-": the storage tool's
    # argument parser would read one as an option (one id in 64 would fail to format).
    import base64

    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of this process still "exists"; reap it if it is ours.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return _not_zombie(pid)


def _not_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
