"""A missing `java` or `mvn` is one line that says what to install, not a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from framework.broker.local import free_port_pair

FW = [sys.executable, "-c", "from framework.cli import main; main()"]


def _start_with_path(tmp_path: Path, bin_dir: Path, port: int | None = None) -> subprocess.CompletedProcess[str]:
    # a free pair: a fixed one may be some process's ephemeral port (ports are checked before mvn)
    port = free_port_pair(29392) if port is None else port
    env = {k: v for k, v in os.environ.items() if k != "FW_BOOTSTRAP_SERVERS"}
    env.update(PATH=str(bin_dir), FW_HOME=str(tmp_path / "home"), FW_BROKER_PORT=str(port),
               FW_BROKER_DIR=str(tmp_path / "broker"))
    return subprocess.run([*FW, "broker", "start"], capture_output=True, text=True, env=env, timeout=60, check=False)


def test_missing_java_is_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    proc = _start_with_path(tmp_path, empty)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "`java` is not on PATH" in lines[0] and "Install a Java 17+ JDK" in lines[0]


def test_missing_mvn_is_one_line(tmp_path: Path) -> None:
    only_java = tmp_path / "bin"
    only_java.mkdir()
    java = subprocess.run(["which", "java"], capture_output=True, text=True, check=False).stdout.strip()
    (only_java / "java").symlink_to(os.path.realpath(java))
    proc = _start_with_path(tmp_path, only_java)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "`mvn` is not on PATH" in lines[0] and "Install Apache Maven" in lines[0]


def test_taken_port_is_one_line_naming_the_port_and_the_setting(tmp_path: Path) -> None:
    only_java = tmp_path / "bin"
    only_java.mkdir()
    java = subprocess.run(["which", "java"], capture_output=True, text=True, check=False).stdout.strip()
    (only_java / "java").symlink_to(os.path.realpath(java))
    from framework.broker.local import free_port_pair

    # The controller port (client + 1) is the taken one here. Both ports of the pair were
    # free a moment ago: an ephemeral port's neighbour could be in use by anything.
    client = free_port_pair(29850, 29990)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", client + 1))
        holder.listen()
        taken = holder.getsockname()[1]
        proc = _start_with_path(tmp_path, only_java, port=client)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert f"port {taken} on 127.0.0.1 is taken" in lines[0] and "FW_BROKER_PORT" in lines[0]


def test_cluster_ids_never_start_with_a_dash(monkeypatch) -> None:
    """The storage tool reads an id starting with "-" as an option; one uuid in 64 encodes that way."""
    import uuid

    from framework.broker import local

    dashed = uuid.UUID(bytes=b"\xfb" + bytes(15))  # base64 of 0xfb... starts with "-"
    plain = uuid.UUID(bytes=bytes(16))
    draws = iter([dashed, plain])
    monkeypatch.setattr(local.uuid, "uuid4", lambda: next(draws))
    cluster_id = local.cluster_id_new()
    assert len(cluster_id) == 22 and not cluster_id.startswith("-")


def test_wipe_refuses_while_fw_bootstrap_servers_names_a_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The local broker's directory may hold the data of the very cluster the variable names."""
    from framework.broker.local import LocalBroker
    from framework.errors import BrokerError

    (tmp_path / "data").mkdir()
    monkeypatch.setenv("FW_BROKER_DIR", str(tmp_path))
    monkeypatch.setenv("FW_BOOTSTRAP_SERVERS", "127.0.0.1:28092")
    with pytest.raises(BrokerError, match="names a cluster this command does not manage"):
        LocalBroker().wipe()
    assert (tmp_path / "data").is_dir()


def test_free_port_pairs_lie_outside_the_ephemeral_range(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client's outgoing connection takes its local port from the ephemeral range."""
    from framework.broker import local

    monkeypatch.setattr(local, "ephemeral_ports", lambda: range(29193, 29400))
    assert free_port_pair(29192) >= 29400
