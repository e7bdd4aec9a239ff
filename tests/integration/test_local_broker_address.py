"""One address for the local broker, through the real CLI on a real broker of this module's own.

The broker is started as a reader starts it, ``fw broker start`` with ``FW_BROKER_PORT`` on a
free port that is not the default and no ``FW_BOOTSTRAP_SERVERS``; then every other command
must find it with nothing more said: ``scripts/demo`` (whose output carries no librdkafka
retry lines on this fresh broker, where the transaction coordinator is still loading),
``fw doctor`` (its config line says where the address came from), ``fw run`` and ``fw topics
list``, and, from a shell without ``FW_BROKER_PORT``, the broker its directory records.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from framework.broker.local import LocalBroker
from tests.docblocks import clean_env
from tests.integration.harness import ROOT, get_json, wait_until
from tests.ports import worker_port_pair

# What librdkafka says while a fresh broker loads its coordinators, and of failed connections,
# in its own format (%3|...|FAIL|rdkafka#producer-1|) or as its log callback words it.
CLIENT_RETRY_LINES = re.compile(r"GETPID|Coordinator load|FAIL|rdkafka|^%\d\|")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A broker started by ``fw broker start`` on FW_BROKER_PORT; stopped and deleted after."""
    own = LocalBroker(tmp_path_factory.mktemp("address") / "broker", worker_port_pair())
    assert own.port != 28092
    started = _fw(_env(own), "broker", "start")
    try:
        assert (started.returncode, started.stdout) == (0, f"{own.bootstrap}\n"), started.stderr
        yield own
    finally:
        own.wipe()


def _env(broker: LocalBroker, port: bool = True) -> dict[str, str]:
    """A shell's environment with no FW_* settings but the local broker's directory and (with
    ``port``) FW_BROKER_PORT."""
    env = clean_env(FW_BROKER_DIR=str(broker.instance_dir))
    if port:
        env["FW_BROKER_PORT"] = str(broker.port)
    assert "FW_BOOTSTRAP_SERVERS" not in env
    return env


def _fw(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["fw", *args], check=False, cwd=ROOT, env={**env, "PYTHONIOENCODING": "utf-8"},
                          capture_output=True, text=True, timeout=300)


def test_scripts_demo_runs_there_without_client_retry_lines(broker: LocalBroker) -> None:
    """First on the fresh broker: the demo's first transactional producer meets the
    coordinator still loading (librdkafka's GETPID ... Coordinator load in progress)."""
    env = {**_env(broker), "FW_VENV": sys.prefix}
    done = subprocess.run(["scripts/demo", "--records", "1500"], check=False, cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = (done.stdout + done.stderr).splitlines()
    assert lines[0] == f"broker: {broker.bootstrap}"
    assert "check: readings, means and alerts equal a direct computation" in done.stdout
    assert [line for line in lines if CLIENT_RETRY_LINES.search(line)] == []


def test_fw_doctor_checks_it_and_says_why_that_address(broker: LocalBroker) -> None:
    done = _fw(_env(broker), "doctor", "--json", "--skip-clock")
    checks = {c["name"]: c for c in json.loads(done.stdout)}
    assert checks["config"]["detail"] == (f"from defaults and FW_* variables: bootstrap {broker.bootstrap} "
                                          "(FW_BROKER_PORT), state.dir state, exactly_once")
    assert checks["cluster"]["status"] == "ok"
    assert checks["cluster"]["detail"].startswith(f"{broker.bootstrap} (PLAINTEXT) answers: cluster ")


def test_fw_run_and_fw_topics_list_reach_it(broker: LocalBroker, tmp_path: Path) -> None:
    env = {**_env(broker), "FW_STATE_DIR": str(tmp_path / "state")}
    log_path = tmp_path / "service.log"
    with open(log_path, "wb") as log:
        service = subprocess.Popen(["fw", "run", "services.sensors.pipeline:pipeline"], cwd=ROOT, env=env,
                                   stdout=log, stderr=subprocess.STDOUT)
    try:
        found: list[str] = []

        def ready() -> bool:
            found[:] = re.findall(r"status endpoint (http://[^:\s]+:\d+)", log_path.read_text(errors="replace"))
            return bool(found) and get_json(found[0].replace("0.0.0.0", "127.0.0.1") + "/ready")[0] == 200

        wait_until(ready, 120, "fw run to be ready on the broker at FW_BROKER_PORT",
                   lambda: log_path.read_text(errors="replace"))
        listed = _fw(_env(broker), "topics", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert {"readings", "sensor-means", "sensors-dead-letter"} <= {t["name"] for t in json.loads(listed.stdout)}
    finally:
        service.send_signal(signal.SIGTERM)
        assert service.wait(60) == 0, log_path.read_text(errors="replace")


def test_without_fw_broker_port_the_broker_its_directory_records_is_found(broker: LocalBroker) -> None:
    env = _env(broker, port=False)
    status = _fw(env, "broker", "status")
    assert status.returncode == 0 and status.stdout.startswith("running pid="), status.stdout
    assert f"bootstrap={broker.bootstrap} " in status.stdout
    listed = _fw(env, "topics", "list")
    assert listed.returncode == 0, listed.stderr
    started = _fw(env, "broker", "start")  # the running broker, where it runs
    assert (started.returncode, started.stdout) == (0, f"{broker.bootstrap}\n")


def test_fw_broker_start_refuses_a_second_address_for_a_running_broker(broker: LocalBroker) -> None:
    other = broker.port + 2
    started = _fw({**_env(broker), "FW_BROKER_PORT": str(other)}, "broker", "start")
    assert (started.returncode, started.stdout) == (1, "")
    assert started.stderr == (f"error: the broker of {broker.instance_dir} runs on {broker.bootstrap}, not on "
                              f"127.0.0.1:{other} (FW_BROKER_PORT): `fw broker stop` it first, or unset "
                              "FW_BROKER_PORT to use it where it runs\n")
