"""A real container engine for the tests: Debian's podman, set up for this machine.

Everything the engine keeps lives under the project's cache root (``framework.home.fw_home``,
default ``~/.cache/fw``), in ``containers/``::

    containers/containers.conf   the engine's settings (below), passed as CONTAINERS_CONF
    containers/storage.conf      where images and containers are stored, CONTAINERS_STORAGE_CONF
    containers/registries.conf   no registry to search: a short name is a local image,
                                 CONTAINERS_REGISTRIES_CONF
    containers/storage/          the image store: the images ``tests.containers.images`` builds

so the tests' images stay apart from a developer's own podman images and survive between runs,
and a warm run finds them. Every podman and podman-compose call of the tests runs with
``engine_env()``.

The settings, each for a reason of this kind of machine (a sandbox without systemd):

- ``default_ulimits = []``: podman otherwise asks for an open-files limit of 1048576 in every
  container, above the machine's hard limit, and the runtime may not raise it ("error setting
  rlimits ... operation not permitted"); containers inherit the engine's limit instead.
- ``runtime = "runc"``, ``cgroup_manager = "cgroupfs"``: no systemd to delegate cgroups to.
- ``network_backend = "netavark"``: with Debian's aardvark-dns, containers on a compose network
  find each other by service name (``kafka:9092``); netavark needs ``iptables`` for the
  network's NAT and published ports.

- no registry searched for a short name (``unqualified-search-registries = []``): nothing can
  be pulled here, and the images the compose file and the ``Dockerfile`` name by short name
  (``python:3.11-slim``, ``apache/kafka:4.1.1``) are the local stand-ins, stored as
  ``localhost/<name>``; on a user's machine the same short names are pulled from the registry.

Without systemd podman has no timers for healthchecks: a container's healthcheck runs only when
``podman healthcheck run`` asks for it (the tests do, as the engine's timer would).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from framework.home import fw_home
from tests.integration.harness import wait_until

__all__ = ["REQUIRED_TOOLS", "engine_dir", "engine_env", "machine_lock", "missing_tools", "podman"]

# The commands the container tests need, and the Debian package of each (scripts/test installs
# the missing ones with apt-get).
REQUIRED_TOOLS = {
    "podman": "podman", "runc": "runc", "debootstrap": "debootstrap", "iptables": "iptables",
    "/usr/lib/podman/netavark": "netavark", "/usr/lib/podman/aardvark-dns": "aardvark-dns",
}

_CONTAINERS_CONF = """\
# Written by tests/containers/engine.py: podman's settings for the tests on a machine without
# systemd, whose hard open-files limit a container may not raise.
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"

[network]
network_backend = "netavark"
"""

_REGISTRIES_CONF = """\
# Written by tests/containers/engine.py: no registry is searched for a short image name; the
# tests' images are local (localhost/<name>), built from Debian's packages and Maven Central.
unqualified-search-registries = []
short-name-mode = "permissive"
"""


def engine_dir() -> Path:
    """``$FW_HOME/containers``: the engine's configuration and image store."""
    return fw_home() / "containers"


def engine_env() -> dict[str, str]:
    """``os.environ`` with the engine's configuration files (written on first use)."""
    root = engine_dir()
    root.mkdir(parents=True, exist_ok=True)
    conf, storage, registries = root / "containers.conf", root / "storage.conf", root / "registries.conf"
    _write_if_changed(conf, _CONTAINERS_CONF)
    _write_if_changed(registries, _REGISTRIES_CONF)
    # The run root holds locks and runtime state, so it belongs on /run (a tmpfs, emptied at
    # boot); the image store persists under the cache.
    run_root = Path("/run") / f"fw-containers-{os.getuid()}"
    _write_if_changed(storage, f'[storage]\ndriver = "overlay"\ngraphroot = "{root / "storage"}"\n'
                               f'runroot = "{run_root}"\n')
    return {**os.environ, "CONTAINERS_CONF": str(conf), "CONTAINERS_STORAGE_CONF": str(storage),
            "CONTAINERS_REGISTRIES_CONF": str(registries)}


def missing_tools() -> list[str]:
    """The Debian packages of REQUIRED_TOOLS not on this machine."""
    return [pkg for tool, pkg in REQUIRED_TOOLS.items()
            if not (Path(tool).exists() if tool.startswith("/") else shutil.which(tool))]


def podman(*args: str, input: bytes | None = None, check: bool = True,
           timeout_s: float = 600.0) -> subprocess.CompletedProcess[bytes]:
    """Run ``podman ARGS`` with the tests' engine settings; its output is captured, and a
    failure (with ``check``) raises with podman's stderr in the message."""
    proc = subprocess.run(["podman", *args], input=input, capture_output=True, env=engine_env(),
                          timeout=timeout_s, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args[:3])} ... failed ({proc.returncode}):\n"
                           f"{proc.stderr.decode(errors='replace')[-3000:]}")
    return proc


@contextmanager
def machine_lock(name: str, timeout_s: float = 900) -> Iterator[None]:
    """One holder of ``name`` per machine (``$FW_HOME/containers/<name>.lock``): what a test
    runs in the engine under fixed names and ports (a compose stack, pods named after their
    service), so a second test run on the same machine (a developer's beside another) waits
    here for the first to take its containers down, instead of taking them down under it."""
    engine_dir().mkdir(parents=True, exist_ok=True)
    with open(engine_dir() / f"{name}.lock", "w") as lock:
        def acquired() -> bool:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                return False
        wait_until(acquired, timeout_s, f"another test run's containers to end ({name}.lock)")
        yield


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
