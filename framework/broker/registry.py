"""A real schema registry for development and tests: Apicurio Registry, which speaks the
Confluent Schema Registry API at ``/apis/ccompat/v7``, with in-memory storage.

Its distribution comes from Maven Central through the machine's ``mvn`` (the
``apicurio-registry-app`` zip, classifier ``all``), unpacked once into a cache directory
outside the repository, and runs on the machine's Java 17. One registry instance lives in
one directory::

    <instance dir>/registry.log    stdout and stderr of the JVM
    <instance dir>/registry.json   pid and port of the running registry

Its schemas live in memory: a stopped registry forgets them, as a test wants.

Locations (all optional environment variables):

- ``FW_HOME``: cache root, default ``~/.cache/fw``; the registry goes to
  ``$FW_HOME/apicurio/<version>``.
- ``FW_REGISTRY_DIR``: instance directory, default ``$FW_HOME/registry``.
- ``FW_REGISTRY_PORT``: HTTP port on 127.0.0.1, default 28081 (below the kernel's ephemeral
  port range, so no client connection can take it).
- ``FW_SCHEMA_REGISTRY_URL``: the registry services use; when it names another registry than
  this one, nothing is started or stopped.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from framework.broker.local import (
    alive,
    ephemeral_ports,
    free_ports,
    log_since,
    port_free,
    require_tool,
    stop_recorded,
)
from framework.errors import BrokerError, FrameworkError
from framework.home import fw_home
from framework.serde.registry import SchemaRegistryClient

APICURIO_VERSION = "2.6.13.Final"
_ARTIFACT = f"io.apicurio:apicurio-registry-app:{APICURIO_VERSION}:zip:all"
_RUNNER = f"apicurio-registry-app-{APICURIO_VERSION}-runner.jar"
API_PATH = "/apis/ccompat/v7"
DEFAULT_PORT = 28081
_START_TIMEOUT_S = 120.0
_NEEDED_BY = "the local schema registry"


def external_registry() -> str | None:
    """The registry named in the environment (``FW_SCHEMA_REGISTRY_URL``), if any."""
    return os.environ.get("FW_SCHEMA_REGISTRY_URL", "").strip().rstrip("/") or None


@dataclass(frozen=True)
class RegistryStatus:
    running: bool
    url: str
    pid: int | None
    instance_dir: Path
    log_file: Path
    external: bool = False

    def describe(self) -> str:
        if self.external:
            state = "answers" if self.running else "does NOT answer"
            return f"external registry {self.url} (FW_SCHEMA_REGISTRY_URL): {state}"
        if not self.running:
            return f"not running (instance dir {self.instance_dir}, log {self.log_file})"
        return f"running pid={self.pid} url={self.url} log={self.log_file}"


class LocalRegistry:
    """Fetch, start, inspect and stop the local schema registry of one instance directory."""

    def __init__(self, instance_dir: Path | None = None, port: int | None = None) -> None:
        self.instance_dir = Path(instance_dir or os.environ.get("FW_REGISTRY_DIR") or fw_home() / "registry")
        self.port = int(port or os.environ.get("FW_REGISTRY_PORT") or DEFAULT_PORT)
        self.dist_dir = fw_home() / "apicurio" / APICURIO_VERSION
        self.log_file = self.instance_dir / "registry.log"
        self._state_file = self.instance_dir / "registry.json"
        self._explicit = instance_dir is not None
        self._launched_at = 0  # where the log lines of the latest start begin

    @property
    def url(self) -> str:
        """The Confluent-compatible API root: what ``FW_SCHEMA_REGISTRY_URL`` should say."""
        return f"http://127.0.0.1:{self.port}{API_PATH}"

    def _external(self) -> str | None:
        """FW_SCHEMA_REGISTRY_URL when it names another registry than this one (and this
        one's directory was not named in code: then it is this one that is meant)."""
        ext = None if self._explicit else external_registry()
        return None if ext == self.url else ext

    # -- public commands ---------------------------------------------------------------

    def status(self) -> RegistryStatus:
        ext = self._external()
        if ext:
            return RegistryStatus(_answers_as_configured(), ext, None, self.instance_dir, self.log_file, True)
        pid, port = self._recorded()
        url = f"http://127.0.0.1:{port}{API_PATH}"
        running = pid is not None and alive(pid) and _answers(url, 2.0)
        return RegistryStatus(running, url, pid if running else None, self.instance_dir, self.log_file)

    def start(self) -> RegistryStatus:
        """Start the registry unless it runs already; return once its API answers."""
        if self._external():
            current = self.status()
            if not current.running:
                raise BrokerError(f"FW_SCHEMA_REGISTRY_URL={current.url} does not answer GET /subjects; start "
                                  "that registry, or unset FW_SCHEMA_REGISTRY_URL to start the local one")
            return current
        current = self.status()
        if current.running:
            return current
        pid, _ = self._recorded()
        if pid is not None and alive(pid):
            return self._wait_ready(pid)  # started but not answering yet: a concurrent start
        java = require_tool("java", "Install a Java 17+ JDK, e.g. `apt-get install openjdk-17-jdk-headless`.", _NEEDED_BY)
        if not port_free(self.port):
            raise BrokerError(f"port {self.port} on 127.0.0.1 is taken by another process, so the schema registry "
                              f"of {self.instance_dir} cannot listen on it; stop that process or choose another "
                              "port with FW_REGISTRY_PORT")
        self.fetch()
        return self._launch(java)

    def stop(self) -> bool:
        """Stop the registry (its schemas are lost); True when one was running."""
        if self._external():
            return False
        return stop_recorded(self._recorded()[0], self._state_file)

    def fetch(self) -> Path:
        """Resolve the registry's distribution from Maven Central and unpack it into the
        cache (once; concurrent fetches wait for each other)."""
        marker = self.dist_dir / ".complete"
        if marker.exists():
            return self.dist_dir
        mvn = require_tool("mvn", "Install Apache Maven, e.g. `apt-get install maven`.", _NEEDED_BY)
        self.dist_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.dist_dir.parent / f".{APICURIO_VERSION}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not marker.exists():
                self._download_and_unpack(mvn)
                marker.write_text(APICURIO_VERSION)
        return self.dist_dir

    # -- steps -------------------------------------------------------------------------

    def _download_and_unpack(self, mvn: str) -> None:
        download = self.dist_dir.parent / f".download-{APICURIO_VERSION}"
        unpacked = self.dist_dir.parent / f".unpacked-{APICURIO_VERSION}"
        for leftover in (download, unpacked, self.dist_dir):
            shutil.rmtree(leftover, ignore_errors=True)
        download.mkdir()
        # run where there is no pom.xml: the plugin goal needs no project
        cmd = [mvn, "-q", "-B", "dependency:copy", f"-Dartifact={_ARTIFACT}", f"-DoutputDirectory={download}"]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=download, check=False)
        zips = list(download.glob("*.zip"))
        if proc.returncode != 0 or not zips:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise BrokerError(f"mvn could not resolve Apicurio Registry {APICURIO_VERSION} ({_ARTIFACT}) "
                              f"from Maven Central:\n{tail}")
        with zipfile.ZipFile(zips[0]) as archive:
            archive.extractall(unpacked)
        if not (unpacked / _RUNNER).is_file():
            raise BrokerError(f"the Apicurio Registry zip {zips[0].name} has no {_RUNNER}")
        unpacked.rename(self.dist_dir)  # whole or not at all: a start never sees half a copy
        shutil.rmtree(download, ignore_errors=True)

    def _launch(self, java: str) -> RegistryStatus:
        self.instance_dir.mkdir(parents=True, exist_ok=True)
        cmd = [
            java, "-Xms64m", "-Xmx512m", "-XX:TieredStopAtLevel=1",
            "-Dquarkus.http.host=127.0.0.1", f"-Dquarkus.http.port={self.port}",
            "-jar", str(self.dist_dir / _RUNNER),
        ]
        env = {k: v for k, v in os.environ.items() if k != "CLASSPATH"}
        with open(self.log_file, "ab") as log:
            self._launched_at = log.tell()
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=self.instance_dir, start_new_session=True, env=env)
        self._state_file.write_text(json.dumps({"pid": proc.pid, "port": self.port}))
        return self._wait_ready(proc.pid, proc)

    def _wait_ready(self, pid: int, proc: subprocess.Popen[bytes] | None = None) -> RegistryStatus:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None or not alive(pid):
                self._state_file.unlink(missing_ok=True)
                raise self._start_failure()
            if _answers(self.url, 1.0):
                return self.status()
            time.sleep(0.2)
        raise BrokerError(f"the schema registry did not answer within {_START_TIMEOUT_S:.0f}s; see {self.log_file}")

    def _start_failure(self) -> BrokerError:
        since = log_since(self.log_file, self._launched_at)
        if "seems to be in use by another process" in since or "Address already in use" in since:
            ephemeral = ephemeral_ports()
            return BrokerError(
                f"port {self.port} on 127.0.0.1 was taken by another process while the schema registry started "
                f"(see {self.log_file}); choose another port with FW_REGISTRY_PORT, below the ephemeral range "
                f"{ephemeral.start}-{ephemeral.stop - 1}")
        tail = "\n".join(since.splitlines()[-20:]) or "(no output)"
        return BrokerError(f"the schema registry exited during start-up; last lines of {self.log_file}:\n{tail}")

    def _recorded(self) -> tuple[int | None, int]:
        try:
            state = json.loads(self._state_file.read_text())
            return int(state["pid"]), int(state["port"])
        except (OSError, ValueError, KeyError):
            return None, self.port


def free_port(start: int = DEFAULT_PORT, count: int = 900) -> int:
    """The first free port in ``[start, start + count)`` outside the kernel's ephemeral range."""
    return free_ports(start, start + count)


def _answers(url: str, timeout_s: float) -> bool:
    """True when ``GET <url>/subjects`` answers 200 with a JSON list."""
    try:
        with urllib.request.urlopen(f"{url}/subjects", timeout=timeout_s) as response:
            return response.status == 200 and isinstance(json.loads(response.read()), list)
    except (OSError, ValueError):  # refused, timed out, HTTP error, not JSON
        return False


def _answers_as_configured() -> bool:
    """Whether the registry of ``FW_SCHEMA_REGISTRY_URL`` answers, with its credentials."""
    try:
        client = SchemaRegistryClient.from_env(timeout_s=5.0)
        if client is None:
            return False
        try:
            client.subjects()
        finally:
            client.close()
    except FrameworkError:
        return False
    return True
