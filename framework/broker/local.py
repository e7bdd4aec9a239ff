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
- ``FW_BROKER_PORT``: client port on 127.0.0.1 (controller: port + 1); unset, the port of the
  broker the instance directory records, else 28092, below the kernel's ephemeral range: a
  client's outgoing connection cannot take it before the bind. ``framework.home`` has the
  rule; every client of the local broker follows the same one.
- ``FW_BOOTSTRAP_SERVERS``: an existing cluster; when set, nothing is started or stopped.

Security (``fw broker start --security``): ``plaintext`` (the default), ``sasl_plaintext`` or
``sasl_ssl``. The secured modes have a SASL/SCRAM-SHA-512 client listener (``sasl_ssl`` with TLS
too, its certificate generated with the JDK's keytool into ``<instance dir>/tls/``), the KRaft
standard authorizer, and one super user ``admin`` whose SCRAM credential is created when the
storage is formatted; its password is generated then and kept, with every other client
setting, in ``<instance dir>/client.env`` (mode 0600), never printed. Other principals get
SCRAM credentials and ACLs through the Admin API (``framework.kafka.acl``). The controller
listener stays PLAINTEXT on loopback, its principal ``User:ANONYMOUS`` a super user: the
broker's own requests to its controller come through it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from framework.classdata import DetachedArchive
from framework.errors import BrokerError, EnvironmentProblem
from framework.home import (
    BROKER_RECORD,
    CLUSTER_RECORD,
    broker_dir,
    fw_home,
    local_broker_address,
    recorded_broker,
)
from framework.kafka.admin import broker_answers

KAFKA_VERSION = "4.1.1"
_HERE = Path(__file__).resolve().parent
_START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0

# Every node is broker and controller. Transactions on one node need the transaction log (and
# offsets) at RF 1 / min ISR 1; a cluster (``framework.broker.cluster``) has RF 3 / min ISR 2 for
# every topic by default, the internal ones included.
# A node's session is 6 s of heartbeats sent every second (Kafka's defaults: 9 s, every 2 s). In
# a cluster the controller fences a dead node after the session, and refuses a node restarted
# after a clean shutdown (DUPLICATE_BROKER_REGISTRATION) until its old session has run out, as
# Kafka 4.1 does, retrying once a heartbeat interval: a restart took 9-11 s at the defaults.
_SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id={node_id}
controller.quorum.voters={voters}
controller.listener.names=CONTROLLER
log.dirs={data_dir}
num.partitions=1
default.replication.factor={rf}
offsets.topic.replication.factor={rf}
offsets.topic.num.partitions=10
transaction.state.log.replication.factor={rf}
transaction.state.log.min.isr={min_isr}
transaction.state.log.num.partitions=10
min.insync.replicas={min_isr}
group.initial.rebalance.delay.ms=0
broker.session.timeout.ms=6000
broker.heartbeat.interval.ms=1000
auto.create.topics.enable=false
log.retention.hours=-1
log.segment.bytes=67108864
transaction.max.timeout.ms=900000
"""

_PLAINTEXT_PROPERTIES = """\
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}{extra}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}{extra_advertised}
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT{extra_protocol}
"""

SECURITY_MODES = ("plaintext", "sasl_plaintext", "sasl_ssl")
ADMIN_USER = "admin"
SCRAM = "SCRAM-SHA-512"

# The client listener of a secured broker: SCRAM for everyone, the broker itself included
# (its inter-broker identity is the super user), and the standard authorizer with no ACL
# meaning no access.
_SECURED_PROPERTIES = """\
listeners={name}://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners={name}://127.0.0.1:{port}
inter.broker.listener.name={name}
listener.security.protocol.map={name}:{name},CONTROLLER:PLAINTEXT
sasl.enabled.mechanisms={scram}
sasl.mechanism.inter.broker.protocol={scram}
listener.name.{lname}.{lscram}.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{password}";
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:{user};User:ANONYMOUS
"""

_TLS_PROPERTIES = """\
ssl.keystore.type=PKCS12
ssl.keystore.location={keystore}
ssl.keystore.password={store_password}
ssl.key.password={store_password}
ssl.truststore.type=PKCS12
ssl.truststore.location={truststore}
ssl.truststore.password={store_password}
ssl.client.auth=none
"""


def external_bootstrap() -> str | None:
    """The bootstrap servers of an existing cluster named in the environment, if any."""
    return os.environ.get("FW_BOOTSTRAP_SERVERS") or None


@dataclass(frozen=True)
class NodeRole:
    """A node's place in a local cluster: its id, the controller quorum (``1@host:port,...``),
    the cluster's id (every node's storage is formatted with it) and replication."""

    node_id: int
    voters: str
    cluster_id: str
    replication: int
    min_insync: int


@dataclass(frozen=True)
class BrokerStatus:
    running: bool
    bootstrap: str
    pid: int | None
    instance_dir: Path
    log_file: Path
    external: bool = False
    security: str = "plaintext"

    def describe(self) -> str:
        if self.external:
            state = "reachable" if self.running else "NOT reachable"
            return f"external cluster {self.bootstrap} (FW_BOOTSTRAP_SERVERS): {state}"
        if not self.running:
            return f"not running (instance dir {self.instance_dir}, log {self.log_file})"
        line = f"running pid={self.pid} bootstrap={self.bootstrap} log={self.log_file}"
        if self.security != "plaintext":
            line += f" security={self.security} client settings: {self.instance_dir / 'client.env'}"
        return line


@dataclass(frozen=True)
class ExtraListener:
    """A second plaintext client listener: bound to ``host:port``, advertised as
    ``advertised_host:port``; for clients that cannot reach the host's loopback, containers on a
    bridge network (``tests/integration/test_kube_play.py``)."""

    host: str
    port: int
    advertised_host: str


class LocalBroker:
    """Start, inspect and stop the local broker of one instance directory."""

    def __init__(self, instance_dir: Path | None = None, port: int | None = None,
                 security: str | None = None, role: NodeRole | None = None,
                 extra_listener: ExtraListener | None = None) -> None:
        self.instance_dir = Path(instance_dir or broker_dir())
        self.role = role  # a node of a local cluster (``framework.broker.cluster``), else a single broker
        self.port = int(port or local_broker_address(directory=self.instance_dir).port)
        self.jar_dir = fw_home() / "kafka" / KAFKA_VERSION
        self.log_file = self.instance_dir / "broker.log"
        self._state_file = self.instance_dir / BROKER_RECORD
        self._secrets_file = self.instance_dir / "secrets.json"
        self.client_env = self.instance_dir / "client.env"
        if security is not None and security not in SECURITY_MODES:
            raise BrokerError(f"unknown security mode {security!r}; choose one of {', '.join(SECURITY_MODES)}")
        self._requested = security
        self._launched_at = 0  # where the log lines of the latest start begin
        self._proc: subprocess.Popen[bytes] | None = None
        self._explicit = instance_dir is not None
        if extra_listener is not None and self.security != "plaintext":
            raise BrokerError("an extra listener is for a plaintext broker only")
        self.extra_listener = extra_listener

    def _external(self) -> str | None:
        """FW_BOOTSTRAP_SERVERS, unless this broker's directory was named in code: then it
        is that broker that is meant (a test's own, beside a cluster the suite uses)."""
        return None if self._explicit else external_bootstrap()

    @property
    def security(self) -> str:
        """The instance's security mode: the one its storage was formatted with, else the
        requested one, else plaintext."""
        formatted = self.instance_dir / "security"
        if formatted.exists():
            return formatted.read_text().strip()
        if (self.instance_dir / "data" / "meta.properties").exists():
            return "plaintext"  # formatted before security modes existed
        return self._requested or "plaintext"

    def client_settings(self) -> dict[str, str]:
        """librdkafka settings of the super user on this instance's client listener
        (``bootstrap.servers`` included); for a plaintext instance only the address."""
        settings = {"bootstrap.servers": self.bootstrap}
        mode = self.security
        if mode == "plaintext":
            return settings
        secrets_ = self._secrets()
        settings.update({"security.protocol": mode.upper(), "sasl.mechanism": SCRAM,
                         "sasl.username": ADMIN_USER, "sasl.password": secrets_["admin_password"]})
        if mode == "sasl_ssl":
            settings["ssl.ca.location"] = str(self.instance_dir / "tls" / "ca.pem")
        return settings

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    # -- public commands ---------------------------------------------------------------

    def status(self) -> BrokerStatus:
        ext = self._external()
        if ext:
            return BrokerStatus(broker_answers(ext), ext, None, self.instance_dir, self.log_file, True)
        pid, bootstrap = self._recorded()
        running = pid is not None and alive(pid) and self._answers(bootstrap, 2.0)
        return BrokerStatus(running, bootstrap, pid if running else None, self.instance_dir, self.log_file,
                            security=self.security)

    def _answers(self, bootstrap: str, timeout_s: float) -> bool:
        extra = {k: v for k, v in self.client_settings().items() if k != "bootstrap.servers"}
        return broker_answers(bootstrap, timeout_s=timeout_s, extra=extra)

    def start(self, wait: bool = True) -> BrokerStatus:
        """Start the broker unless it runs already; return once it answers metadata requests
        (``wait=False``: at once, and ``wait_ready`` waits; the nodes of a cluster start
        together, none answering before a majority of controllers runs)."""
        ext = self._external()
        if ext:
            if not broker_answers(ext, timeout_s=10):
                raise BrokerError(f"FW_BOOTSTRAP_SERVERS={ext} does not answer a metadata request")
            return self.status()
        if self.role is None and (self.instance_dir / CLUSTER_RECORD).exists():
            raise BrokerError(f"{self.instance_dir} holds a local cluster (`fw broker start --nodes N`): start it "
                              "with `fw broker start`, or `fw broker stop --wipe` it for a single broker")
        current = self.status()
        if self._requested and self._requested != current.security:
            raise BrokerError(
                f"the broker in {self.instance_dir} was set up with security {current.security}, not "
                f"{self._requested}; start it without --security, or `fw broker stop --wipe` to start over"
            )
        if current.running and current.bootstrap != self.bootstrap:
            # Clients look for the broker at FW_BROKER_PORT: one running elsewhere is not found.
            raise BrokerError(
                f"the broker of {self.instance_dir} runs on {current.bootstrap}, not on {self.bootstrap} "
                "(FW_BROKER_PORT): `fw broker stop` it first, or unset FW_BROKER_PORT to use it where it runs"
            )
        if current.running:
            return current
        pid, _ = self._recorded()
        if pid is not None and alive(pid):
            # Started but not answering yet (e.g. a concurrent start): wait for it.
            return self._wait_ready(pid) if wait else current
        java = require_tool("java", "Install a Java 17+ JDK, e.g. `apt-get install openjdk-17-jdk-headless`.")
        self._check_ports()
        self.fetch()
        self._prepare(java)
        pid, self._proc = self.launch(java)
        return self._wait_ready(pid, self._proc) if wait else self.status()

    def wait_ready(self) -> BrokerStatus:
        """After ``start(wait=False)``: return once the broker answers metadata requests."""
        pid, _ = self._recorded()
        if pid is None:
            raise BrokerError(f"no broker was started in {self.instance_dir}")
        return self._wait_ready(pid, self._proc)

    def stop(self) -> bool:
        """Stop the broker; True when one was running. Leaves the data directory in place."""
        if self._external():
            return False
        stopped = stop_recorded(self._recorded()[0], self._state_file)
        java = shutil.which("java")
        archive = self._archive(java) if java else None
        if archive is not None:
            archive.settle()  # the class-data archive this broker's JVM wrote as it exited, if it did
        return stopped

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
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise BrokerError(f"mvn could not resolve the Kafka {KAFKA_VERSION} jars:\n{tail}")
        marker.write_text(KAFKA_VERSION)
        return self.jar_dir

    # -- steps -------------------------------------------------------------------------

    def _prepare(self, java: str) -> None:
        data_dir = self.instance_dir / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        formatted = (data_dir / "meta.properties").exists()
        mode = self.security
        secrets_ = self._secrets() if mode != "plaintext" and formatted else self._new_secrets(mode)
        props = self.instance_dir / "server.properties"
        fmt = {"port": self.port, "controller_port": self.port + 1, "data_dir": data_dir}
        role = self.role or NodeRole(1, f"1@127.0.0.1:{self.port + 1}", "", 1, 1)
        text = _SERVER_PROPERTIES.format(**fmt, node_id=role.node_id, voters=role.voters, rf=role.replication,
                                         min_isr=role.min_insync)
        if mode == "plaintext":
            x = self.extra_listener
            text += _PLAINTEXT_PROPERTIES.format(
                **fmt, extra=f",EXTRA://{x.host}:{x.port}" if x else "",
                extra_advertised=f",EXTRA://{x.advertised_host}:{x.port}" if x else "",
                extra_protocol=",EXTRA:PLAINTEXT" if x else "")
        else:
            name = mode.upper()
            text += _SECURED_PROPERTIES.format(
                **fmt, name=name, lname=name.lower(), scram=SCRAM, lscram=SCRAM.lower(),
                user=ADMIN_USER, password=secrets_["admin_password"])
            if mode == "sasl_ssl":
                keystore = self._tls(java, secrets_["store_password"])
                text += _TLS_PROPERTIES.format(keystore=keystore, truststore=keystore.parent / "truststore.p12",
                                               store_password=secrets_["store_password"])
        _write_private(props, text)
        if formatted:
            return
        cluster_id = role.cluster_id or cluster_id_new()
        archive = self._archive(java)
        cmd = [java, *(archive.mapped() if archive else []), "-cp", self._classpath(), "kafka.tools.StorageTool",
               "format",
               "-t", cluster_id, "-c", str(props)]
        if mode != "plaintext":
            cmd += ["--add-scram", f"{SCRAM}=[name={ADMIN_USER},password={secrets_['admin_password']}]"]
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=self._java_env())
        if proc.returncode != 0:
            out = (proc.stdout + proc.stderr).replace(secrets_.get("admin_password") or "\0", "***")
            raise BrokerError(f"formatting {data_dir} failed:\n{out}")
        (self.instance_dir / "security").write_text(mode)
        self._write_client_env()

    def _new_secrets(self, mode: str) -> dict[str, str]:
        if mode == "plaintext":
            return {}
        secrets_ = {"admin_password": secrets.token_urlsafe(18), "store_password": secrets.token_urlsafe(18)}
        _write_private(self._secrets_file, json.dumps(secrets_))
        return secrets_

    def _secrets(self) -> dict[str, str]:
        try:
            return dict(json.loads(self._secrets_file.read_text()))
        except (OSError, ValueError) as exc:
            raise BrokerError(f"the secured broker in {self.instance_dir} has lost its credentials "
                              f"({self._secrets_file}: {exc}); `fw broker stop --wipe` to start over") from None

    def _tls(self, java: str, store_password: str) -> Path:
        """The broker's key and self-signed certificate (for 127.0.0.1 and localhost), made
        once with the JDK's keytool; clients trust ``tls/ca.pem``."""
        tls = self.instance_dir / "tls"
        keystore, ca, truststore = tls / "broker.p12", tls / "ca.pem", tls / "truststore.p12"
        if keystore.exists() and ca.exists() and truststore.exists():
            return keystore
        tls.mkdir(parents=True, exist_ok=True)
        keytool = str(Path(java).resolve().parent / "keytool")
        if not os.access(keytool, os.X_OK):
            keytool = require_tool("keytool", "Install a Java 17+ JDK, e.g. `apt-get install openjdk-17-jdk-headless`.")
        common = ["-alias", "broker", "-keystore", str(keystore), "-storetype", "PKCS12",
                  "-storepass", store_password]
        for cmd in (
            [keytool, "-genkeypair", *common, "-keyalg", "RSA", "-keysize", "2048", "-validity", "3650",
             "-keypass", store_password, "-dname", "CN=localhost", "-ext", "SAN=ip:127.0.0.1,dns:localhost"],
            [keytool, "-exportcert", *common, "-rfc", "-file", str(ca)],
            # the broker is a client of its own listener too (inter-broker): it trusts the same
            [keytool, "-importcert", "-noprompt", "-alias", "ca", "-file", str(ca), "-keystore", str(truststore),
             "-storetype", "PKCS12", "-storepass", store_password],
        ):
            proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=self._java_env())
            if proc.returncode != 0:
                raise BrokerError(f"keytool could not make the broker's certificate in {tls}: "
                                  f"{(proc.stdout + proc.stderr).strip().replace(store_password, '***')}")
        return keystore

    def _write_client_env(self) -> None:
        """``client.env``: the environment that points ``fw`` and services at this broker as
        the super user (``set -a; . client.env; set +a``)."""
        lines = [f"FW_BOOTSTRAP_SERVERS={self.bootstrap}"]
        for key, value in self.client_settings().items():
            if key != "bootstrap.servers":
                lines.append(f"FW_KAFKA_SECURITY__{key.upper().replace('.', '_')}={value}")
        _write_private(self.client_env, "\n".join(lines) + "\n")

    def _check_ports(self) -> None:
        for port in (self.port, self.port + 1):
            if not port_free(port):
                raise BrokerError(
                    f"port {port} on 127.0.0.1 is taken by another process, so the broker of "
                    f"{self.instance_dir} cannot listen on {self.port} (client) and {self.port + 1} "
                    "(controller); stop that process or choose other ports with FW_BROKER_PORT"
                )

    def launch(self, java: str) -> tuple[int, subprocess.Popen[bytes]]:
        """Start the JVM of a prepared instance, without waiting for it to answer."""
        self.instance_dir.mkdir(parents=True, exist_ok=True)
        archive = self._archive(java)
        shared, lock = archive.options() if archive else ([], None)
        cmd = [
            java, "-Xms256m", "-Xmx1g", "-XX:+UseG1GC", "-XX:TieredStopAtLevel=1", *shared,
            f"-Dlog4j2.configurationFile={_HERE / 'log4j2.properties'}",
            "-cp", self._classpath(), "kafka.Kafka", str(self.instance_dir / "server.properties"),
        ]
        try:
            with open(self.log_file, "ab") as log:
                self._launched_at = log.tell()  # where this start's lines begin
                proc = subprocess.Popen(
                    cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True, env=self._java_env(), pass_fds=() if lock is None else (lock,),
                )
        finally:
            if lock is not None:
                os.close(lock)  # the JVM holds the archive's lock now, until it exits
        self._state_file.write_text(json.dumps({"pid": proc.pid, "bootstrap": self.bootstrap}))
        return proc.pid, proc

    def _wait_ready(self, pid: int, proc: subprocess.Popen[bytes] | None = None) -> BrokerStatus:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None or not alive(pid):
                if "BindException" in log_since(self.log_file, self._launched_at):
                    raise BrokerError(
                        f"port {self.port} or {self.port + 1} on 127.0.0.1 was taken by another process while "
                        f"the broker started (see {self.log_file}); choose other ports with FW_BROKER_PORT, "
                        f"below the ephemeral range {ephemeral_ports().start}-{ephemeral_ports().stop - 1}"
                    )
                raise BrokerError(
                    f"the broker exited during start-up; last lines of {self.log_file}:\n{self._log_tail()}"
                )
            if self._answers(self.bootstrap, 1.0):
                return self.status()
            time.sleep(0.2)
        raise BrokerError(f"the broker did not answer within {_START_TIMEOUT_S:.0f}s; see {self.log_file}")

    def _recorded(self) -> tuple[int | None, str]:
        return recorded_broker(self.instance_dir) or (None, self.bootstrap)

    def _jars(self) -> list[Path]:
        return sorted(self.jar_dir.glob("*.jar"))

    def _classpath(self) -> str:
        # each jar named, in one order: a class-data archive holds the class path it was written with
        return os.pathsep.join(map(str, self._jars()))

    def _archive(self, java: str) -> DetachedArchive | None:
        """The brokers' class-data archive (``framework.classdata``) for this Java and these
        jars: the first broker stopped cleanly writes it as it exits, later starts map it
        (its JVM took 1.7 CPU seconds to answer instead of 2.6, ``benchmarks/NOTES.md``)."""
        jars = self._jars()
        directory = fw_home() / "kafka-cds"
        if not jars or any(c.isspace() for c in str(directory)):
            return None
        return DetachedArchive(java, jars, directory)

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
        """Stop the broker and delete its instance directory (data included). Refused while
        FW_BOOTSTRAP_SERVERS names a cluster: ``stop`` leaves that alone, and the directory
        may be the data of the very broker it names."""
        ext = self._external()
        if ext:
            raise BrokerError(f"FW_BOOTSTRAP_SERVERS={ext} names a cluster this command does not manage, so it "
                              f"neither stops a broker nor deletes {self.instance_dir}; unset it to wipe the "
                              "local broker")
        was_running = self.stop()
        shutil.rmtree(self.instance_dir, ignore_errors=True)
        return was_running


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` readable by this user only (it may hold a password)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(path, 0o600)


def require_tool(name: str, how: str, needed_by: str = "the local Kafka broker") -> str:
    path = shutil.which(name)
    if path is None:
        raise EnvironmentProblem(f"`{name}` is not on PATH; {needed_by} needs it. {how}")
    return path


def stop_recorded(pid: int | None, state_file: Path) -> bool:
    """Stop the process a state file records (``terminate``) and forget it; True when one
    was running."""
    if pid is None or not alive(pid):
        state_file.unlink(missing_ok=True)
        return False
    terminate(pid)
    state_file.unlink(missing_ok=True)
    return True


def terminate(pid: int) -> None:
    """SIGTERM, then SIGKILL if ``pid`` is still there after ``STOP_TIMEOUT_S``; returns
    once it is gone."""
    os.kill(pid, signal.SIGTERM)
    finish(pid, time.monotonic() + STOP_TIMEOUT_S)


def finish(pid: int, deadline: float) -> None:
    """Wait until ``pid`` (signalled to stop) is gone, SIGKILLing it at ``deadline`` (monotonic)."""
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
        wait_gone(pid)


def log_since(path: Path, offset: int) -> str:
    """A log file's text from byte ``offset`` on (empty when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def port_free(port: int) -> bool:
    """True when nothing listens on (or holds) ``port`` on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def ephemeral_ports() -> range:
    """The kernel's range for the local ports of outgoing connections. A port chosen for a
    broker inside it can be taken by any client's connect() between the check and the bind."""
    try:
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    return range(low, high + 1)


def free_ports(start: int, stop: int, count: int = 1) -> int:
    """The first port ``p`` in ``range(start, stop, count)`` with ``p`` .. ``p + count - 1``
    all free and outside the ephemeral range (see ``ephemeral_ports``)."""
    ephemeral = ephemeral_ports()
    for port in range(start, stop, count):
        ports = range(port, port + count)
        if any(p in ephemeral for p in ports):
            continue
        if all(port_free(p) for p in ports):
            return port
    what = "free port" if count == 1 else f"{count} free consecutive ports"
    raise BrokerError(f"no {what} between {start} and {stop} on 127.0.0.1 outside the "
                      f"ephemeral range {ephemeral.start}-{ephemeral.stop - 1}")


def free_port_pair(start: int = 29192, stop: int = 29992) -> int:
    """The first even port in ``[start, stop)`` that is free together with the next one,
    outside the ephemeral range."""
    return free_ports(start, stop, 2)


def cluster_id_new() -> str:
    # KRaft cluster ids are 16 random bytes, URL-safe base64 without padding (22 chars).
    # Like Kafka's own Uuid.randomUuid, refuse ids starting with "-": the storage tool's
    # argument parser would read one as an option (one id in 64 would fail to format).
    import base64

    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie child of ours is reaped, and does not)."""
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


def wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
