"""`fw broker start|status|stop` on a second, private broker instance."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from framework.broker import external_bootstrap
from tests.ports import worker_port_pair

FW = [sys.executable, "-c", "from framework.cli import main; main()"]


def _fw(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*FW, *args], capture_output=True, text=True, env=env, timeout=180, check=False)


@pytest.mark.skipif(external_bootstrap() is not None, reason="an external cluster is configured")
def test_start_twice_status_stop(tmp_path: Path, kafka_bootstrap: str) -> None:
    port = worker_port_pair()
    env = {**os.environ, "FW_BROKER_DIR": str(tmp_path / "b"), "FW_BROKER_PORT": str(port)}
    first = _fw("broker", "start", env=env)
    try:
        assert first.returncode == 0, first.stderr
        assert first.stdout.strip() == f"127.0.0.1:{port}"
        again = _fw("broker", "start", env=env)
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip() == f"127.0.0.1:{port}"
        status = _fw("broker", "status", env=env)
        assert status.returncode == 0
        assert "running pid=" in status.stdout and str(tmp_path / "b" / "broker.log") in status.stdout
    finally:
        stopped = _fw("broker", "stop", env=env)
    assert stopped.returncode == 0 and stopped.stdout.strip() == "stopped"
    after = _fw("broker", "status", env=env)
    assert after.returncode == 1 and after.stdout.startswith("not running")
    assert _fw("broker", "stop", env=env).stdout.strip() == "not running"


def test_a_port_taken_while_the_broker_starts_is_named(tmp_path: Path, kafka_bootstrap: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The ports are checked before the broker binds them; another process can take one in
    between. The start then fails with the ports and the setting named, not a Java trace."""
    import socket

    from framework.broker.local import LocalBroker
    from framework.errors import BrokerError

    port = worker_port_pair()
    broker = LocalBroker(tmp_path / "b", port)
    monkeypatch.setattr(broker, "_check_ports", lambda: None)  # the check passed; then the port went
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port + 1))
        holder.listen()
        with pytest.raises(BrokerError) as failed:
            broker.start()
    message = str(failed.value)
    assert f"port {port} or {port + 1} on 127.0.0.1 was taken" in message and "FW_BROKER_PORT" in message
    assert "\tat java" not in message

