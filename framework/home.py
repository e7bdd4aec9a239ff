"""Where the local tools live on this machine, and the one address of the local broker.

``FW_HOME`` (default ``~/.cache/fw``) holds the caches (Kafka's jars, Apicurio, Spark's
connector) and, by default, the local broker's directory ``$FW_HOME/broker``
(``FW_BROKER_DIR`` names another). While a broker runs, its directory records it in
``broker.json`` (pid and bootstrap address; ``framework.broker.local.LocalBroker`` writes it,
and deletes it when the broker stops).

``local_broker_address`` is the rule every part of the framework follows when no cluster is
named (neither ``FW_BOOTSTRAP_SERVERS`` nor a configuration file's
``kafka.bootstrap_servers``): ``fw broker`` starts the broker there, and ``Config.load`` (so
``fw run``, ``fw doctor``, ``fw topics``, the runtime and scripts), the test fixtures and
generated projects connect there. Nothing else decides it, so a broker started on another
port is found by every command that runs after it.

This module imports nothing of the framework but its errors: the configuration, at the bottom
of the layers, depends on it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from framework.errors import ConfigError

__all__ = ["BROKER_RECORD", "CLUSTER_RECORD", "DEFAULT_BROKER_PORT", "LocalAddress", "broker_dir", "fw_home",
           "local_broker_address", "recorded_broker", "recorded_cluster"]

# Below the kernel's ephemeral port range, so no client's outgoing connection can take it
# between the check and the broker's bind; the controller listens on the next port.
DEFAULT_BROKER_PORT = 28092
BROKER_RECORD = "broker.json"
CLUSTER_RECORD = "cluster.json"  # a local cluster's directory (framework.broker.cluster): nodes, base port


def fw_home(env: Mapping[str, str] | None = None) -> Path:
    """The cache root: ``FW_HOME``, default ``~/.cache/fw``."""
    env = os.environ if env is None else env
    return Path(env.get("FW_HOME") or Path.home() / ".cache" / "fw")


def broker_dir(env: Mapping[str, str] | None = None) -> Path:
    """The local broker's directory: ``FW_BROKER_DIR``, default ``$FW_HOME/broker``."""
    env = os.environ if env is None else env
    return Path(env.get("FW_BROKER_DIR") or fw_home(env) / "broker")


def recorded_broker(directory: Path) -> tuple[int, str] | None:
    """The pid and bootstrap address a broker directory records (``broker.json``), or None
    when it records none (never started, stopped, or the file unreadable)."""
    try:
        state = json.loads((directory / BROKER_RECORD).read_text())
        return int(state["pid"]), str(state["bootstrap"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


@dataclass(frozen=True)
class LocalAddress:
    """The local broker's client port on 127.0.0.1, and where that port came from (said by
    ``fw doctor``)."""

    port: int
    origin: str
    nodes: int = 1  # a local cluster's: node i at port + 2(i - 1)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.port + 2 * i}" for i in range(self.nodes))


def local_broker_address(env: Mapping[str, str] | None = None, directory: Path | None = None) -> LocalAddress:
    """The local broker's address: port ``FW_BROKER_PORT`` when set; else the port of the
    broker recorded in ``directory`` (default ``broker_dir(env)``), so that a broker started
    with ``FW_BROKER_PORT`` is found from a shell without it; else 28092. ``env`` defaults to
    ``os.environ``; an empty variable counts as unset. Raises ``ConfigError`` for a
    ``FW_BROKER_PORT`` that is not a port."""
    env = os.environ if env is None else env
    raw = env.get("FW_BROKER_PORT", "").strip()
    directory = broker_dir(env) if directory is None else directory
    cluster = _recorded_cluster(directory)
    if raw:
        return LocalAddress(_port(raw), "FW_BROKER_PORT", cluster[1] if cluster else 1)
    if cluster is not None:
        return LocalAddress(cluster[0], f"the local cluster recorded in {directory / CLUSTER_RECORD}", cluster[1])
    recorded = recorded_broker(directory)
    if recorded is not None:
        _, bootstrap = recorded
        port = bootstrap.rpartition(":")[2]
        if port.isdigit():
            return LocalAddress(int(port), f"the local broker recorded in {directory / BROKER_RECORD}")
    return LocalAddress(DEFAULT_BROKER_PORT, f"the local broker's default port: FW_BROKER_PORT is unset and "
                                             f"{directory} records no broker")


def recorded_cluster(directory: Path) -> dict[str, Any] | None:
    """What ``directory``'s local cluster records (``cluster.json``: ``nodes``, base ``port``,
    ``cluster_id``), or None when it holds none."""
    try:
        state = json.loads((directory / CLUSTER_RECORD).read_text())
    except (OSError, ValueError):
        return None
    return dict(state) if isinstance(state, dict) else None


def _recorded_cluster(directory: Path) -> tuple[int, int] | None:
    """The base port and node count of the local cluster ``directory`` holds, if any."""
    state = recorded_cluster(directory)
    try:
        return (int(state["port"]), int(state["nodes"])) if state is not None else None
    except (KeyError, TypeError, ValueError):
        return None


def _port(raw: str) -> int:
    if raw.isdigit() and 0 < int(raw) < 65535:
        return int(raw)
    raise ConfigError(f"FW_BROKER_PORT={raw!r} is not a TCP port for the local broker; set it to a number "
                      f"from 1 to 65534 (the controller takes the next port), or unset it for "
                      f"{DEFAULT_BROKER_PORT}")
