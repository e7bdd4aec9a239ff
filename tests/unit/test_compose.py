"""docker-compose.yml deploys the broker, every service in services/ and a Prometheus that
scrapes them all; every service container is health-checked (no engine needed)."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = "deploy/prometheus/prometheus.yml"
PORT = 9400  # FW_OBSERVE__PORT of every service container
INFRASTRUCTURE = {"kafka", "prometheus"}  # the compose entries that are not services


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _service_dirs() -> list[Path]:
    return sorted(p for p in (ROOT / "services").iterdir() if p.is_dir() and (p / "__init__.py").exists())


def test_broker_is_kafka_kraft_with_single_node_transactions() -> None:
    kafka = _compose()["services"]["kafka"]
    assert kafka["image"].startswith("apache/kafka:4.")
    env = kafka["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == 1
    assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == 1


def test_every_service_directory_has_an_entry_that_builds_what_exists() -> None:
    services = _compose()["services"]
    for svc_dir in _service_dirs():
        name = svc_dir.name.replace("_", "-")
        assert name in services, f"services/{svc_dir.name} has no entry {name!r} in docker-compose.yml"
        entry = services[name]
        build = entry["build"]
        context = ROOT / build["context"]
        dockerfile = context / build["dockerfile"]
        assert dockerfile.is_file(), f"{name}: {dockerfile} does not exist"
        assert entry["depends_on"]["kafka"]["condition"] == "service_healthy"
        command = entry["command"]
        assert command[:2] == ["fw", "run"], command
        module, _, attr = command[2].partition(":")
        assert (ROOT / Path(*module.split("."))).with_suffix(".py").is_file(), command
        assert attr, f"{name}: `fw run` needs module:pipeline, got {command[2]!r}"


def test_every_entry_but_the_broker_and_prometheus_is_a_service_directory() -> None:
    names = {d.name.replace("_", "-") for d in _service_dirs()}
    extra = set(_compose()["services"]) - names - INFRASTRUCTURE
    assert not extra, f"compose entries without a services/ directory: {sorted(extra)}"


# -- health and metrics ----------------------------------------------------------------------


def _service_entries() -> dict[str, dict[str, Any]]:
    return {name: entry for name, entry in _compose()["services"].items()
            if name not in INFRASTRUCTURE}


def test_every_service_container_serves_its_endpoint_on_9400_and_is_checked_on_health() -> None:
    raw = (ROOT / "docker-compose.yml").read_text()
    assert "x-service: &service" in raw
    shared = _compose()["x-service"]
    assert shared["environment"]["FW_OBSERVE__PORT"] == str(PORT)
    assert shared["healthcheck"]["test"][:2] == ["CMD", "python"]
    for name, entry in _service_entries().items():
        # (an entry's own `environment` would replace the shared one: merges are shallow)
        assert entry["environment"]["FW_OBSERVE__PORT"] == str(PORT), name
        check = entry["healthcheck"]
        assert check == shared["healthcheck"], f"{name}: not the shared healthcheck"
        assert f"http://127.0.0.1:{PORT}/health" in " ".join(check["test"]), check
        for setting in ("interval", "timeout", "start_period"):
            assert re.fullmatch(r"\d+s", check[setting]), (setting, check[setting])
        assert int(check["timeout"][:-1]) < int(check["interval"][:-1]) and check["retries"] >= 2


class _Health(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:  # the name http.server calls
        self.send_response(self.status if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


@pytest.mark.parametrize(("status", "healthy"), [(200, True), (503, False), (None, False)])
def test_the_healthcheck_command_passes_on_200_only(status: int | None, healthy: bool) -> None:
    """The healthcheck's own command, run by this Python against a local /health that
    answers 200, 503, or nothing at all (no member listening)."""
    command = _compose()["x-service"]["healthcheck"]["test"]
    assert command[0] == "CMD"
    handler = type("Health", (_Health,), {"status": status or 200})
    server = HTTPServer(("127.0.0.1", 0), handler)
    port = server.server_address[1]
    if status is None:
        server.server_close()  # the port is free again: the connection is refused
    else:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        args = [sys.executable if arg == "python" else arg.replace(f":{PORT}/", f":{port}/")
                for arg in command[1:]]
        done = subprocess.run(args, check=False, capture_output=True, timeout=30)
    finally:
        if status is not None:
            server.shutdown()
            server.server_close()
    assert (done.returncode == 0) == healthy, done.stderr


def _prometheus() -> dict[str, Any]:
    return yaml.safe_load((ROOT / PROMETHEUS).read_text())


def test_prometheus_scrapes_exactly_the_service_containers_on_9400_at_metrics() -> None:
    [job] = [j for j in _prometheus()["scrape_configs"] if j["job_name"] == "services"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    assert job.get("scheme", "http") == "http"
    targets = [t for static in job["static_configs"] for t in static["targets"]]
    assert len(targets) == len(set(targets)), "a target listed twice"
    assert sorted(targets) == targets, "targets in alphabetical order, as fw new service keeps them"
    assert targets == [f"{name}:{PORT}" for name in sorted(_service_entries())]
    every = [t for j in _prometheus()["scrape_configs"] for s in j.get("static_configs", ())
             for t in s["targets"]]
    assert sorted(every) == targets, "no other job scrapes other targets"


def test_the_prometheus_service_runs_that_configuration_and_publishes_9090() -> None:
    prometheus = _compose()["services"]["prometheus"]
    image, _, tag = prometheus["image"].partition(":")
    assert image == "prom/prometheus" and re.fullmatch(r"v3\.\d+\.\d+", tag), prometheus["image"]
    assert "9090:9090" in prometheus["ports"]
    mounts = [v.split(":") for v in prometheus["volumes"]]
    config = [m for m in mounts if m[1] == "/etc/prometheus/prometheus.yml"]
    assert config and config[0][0] == f"./{PROMETHEUS}" and (ROOT / config[0][0]).is_file(), mounts
    assert "depends_on" not in prometheus and "healthcheck" not in prometheus
    named = [m[0] for m in mounts if not m[0].startswith(".")]
    assert set(named) <= set(_compose()["volumes"]), "its data volume is declared"
