"""docker-compose.yml deploys the broker and every service in services/ (no engine needed)."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


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


def test_every_entry_but_the_broker_is_a_service_directory() -> None:
    names = {d.name.replace("_", "-") for d in _service_dirs()}
    extra = set(_compose()["services"]) - names - {"kafka"}
    assert not extra, f"compose entries without a services/ directory: {sorted(extra)}"
