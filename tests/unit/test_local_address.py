"""One address for the local broker (framework.home): FW_BROKER_PORT, else the broker its
directory records, else 127.0.0.1:28092; the configuration, LocalBroker and fw doctor's
config line all follow it, and FW_BOOTSTRAP_SERVERS or a file still name another cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framework.broker.local import LocalBroker
from framework.config import Config
from framework.errors import ConfigError
from framework.home import local_broker_address
from framework.ops.doctor import load_config


def _record(directory: Path, port: int) -> None:
    """What a running broker leaves in its directory (LocalBroker writes it at start)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "broker.json").write_text(json.dumps({"pid": 4321, "bootstrap": f"127.0.0.1:{port}"}))


def test_fw_broker_port_names_the_local_broker(tmp_path: Path) -> None:
    _record(tmp_path, 29400)
    env = {"FW_BROKER_DIR": str(tmp_path), "FW_BROKER_PORT": "30092"}
    assert local_broker_address(env).bootstrap == "127.0.0.1:30092"
    assert local_broker_address(env).origin == "FW_BROKER_PORT"
    assert Config.load(env=env).kafka.bootstrap_servers == "127.0.0.1:30092"


def test_without_fw_broker_port_the_recorded_broker_is_found(tmp_path: Path) -> None:
    _record(tmp_path, 29400)
    env = {"FW_BROKER_DIR": str(tmp_path)}
    address = local_broker_address(env)
    assert (address.bootstrap, address.origin) == (
        "127.0.0.1:29400", f"the local broker recorded in {tmp_path / 'broker.json'}")
    assert Config.load(env=env).kafka.bootstrap_servers == "127.0.0.1:29400"


def test_a_local_cluster_is_every_node_from_its_base_port(tmp_path: Path) -> None:
    """``fw broker start --nodes 3`` records its base port and size: clients bootstrap from
    every node, so one node down does not keep a new client out."""
    (tmp_path / "cluster.json").write_text(json.dumps({"nodes": 3, "port": 29600, "cluster_id": "x"}))
    env = {"FW_BROKER_DIR": str(tmp_path)}
    address = local_broker_address(env)
    assert (address.bootstrap, address.origin) == (
        "127.0.0.1:29600,127.0.0.1:29602,127.0.0.1:29604", f"the local cluster recorded in {tmp_path / 'cluster.json'}")
    assert Config.load(env=env).kafka.bootstrap_servers == "127.0.0.1:29600,127.0.0.1:29602,127.0.0.1:29604"
    assert local_broker_address({**env, "FW_BROKER_PORT": "30092"}).bootstrap == (
        "127.0.0.1:30092,127.0.0.1:30094,127.0.0.1:30096")


def test_the_default_directory_is_under_fw_home(tmp_path: Path) -> None:
    _record(tmp_path / "broker", 29500)
    assert local_broker_address({"FW_HOME": str(tmp_path)}).port == 29500


def test_nothing_recorded_is_the_default_port(tmp_path: Path) -> None:
    env = {"FW_BROKER_DIR": str(tmp_path), "FW_BROKER_PORT": ""}  # empty counts as unset
    address = local_broker_address(env)
    assert address.bootstrap == "127.0.0.1:28092"
    assert address.origin == f"the local broker's default port: FW_BROKER_PORT is unset and {tmp_path} records no broker"


def test_fw_bootstrap_servers_and_the_file_still_win(tmp_path: Path) -> None:
    env = {"FW_BROKER_DIR": str(tmp_path), "FW_BROKER_PORT": "30092"}
    assert Config.load(env={**env, "FW_BOOTSTRAP_SERVERS": "kafka:9092"}).kafka.bootstrap_servers == "kafka:9092"
    toml = tmp_path / "fw.toml"
    toml.write_text('[kafka]\nbootstrap_servers = "file:9092"\n')
    assert Config.load(toml, env=env).kafka.bootstrap_servers == "file:9092"
    assert Config.load(env=env, kafka={"bootstrap_servers": "code:9092"}).kafka.bootstrap_servers == "code:9092"


def test_the_origins_say_where_the_bootstrap_servers_came_from(tmp_path: Path) -> None:
    toml = tmp_path / "fw.toml"
    toml.write_text('[kafka]\nbootstrap_servers = "file:9092"\n')
    env = {"FW_BROKER_DIR": str(tmp_path), "FW_BROKER_PORT": "30092"}
    origin = "kafka.bootstrap_servers"
    assert Config.load_with_origins(env=env)[1][origin] == "FW_BROKER_PORT"
    assert Config.load_with_origins(env={**env, "FW_BOOTSTRAP_SERVERS": "k:1"})[1][origin] == "FW_BOOTSTRAP_SERVERS"
    assert Config.load_with_origins(toml, env=env)[1][origin] == f"kafka.bootstrap_servers in {toml}"


def test_fw_doctor_says_where_the_address_came_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FW_BOOTSTRAP_SERVERS", "FW_CONFIG", "FW_STATE_DIR", "FW_GUARANTEE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FW_BROKER_DIR", str(tmp_path))
    monkeypatch.setenv("FW_BROKER_PORT", "30092")
    check, _ = load_config(None)
    assert check.detail == ("from defaults and FW_* variables: bootstrap 127.0.0.1:30092 (FW_BROKER_PORT), "
                            "state.dir state, exactly_once")


def test_the_broker_starts_where_the_clients_look(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FW_BROKER_PORT", raising=False)
    _record(tmp_path, 29400)
    assert LocalBroker(tmp_path).bootstrap == "127.0.0.1:29400"  # restarted where it ran
    assert LocalBroker(tmp_path / "new").bootstrap == "127.0.0.1:28092"
    monkeypatch.setenv("FW_BROKER_PORT", "30092")
    assert LocalBroker(tmp_path).bootstrap == "127.0.0.1:30092"
    assert LocalBroker(tmp_path, port=30192).bootstrap == "127.0.0.1:30192"  # named in code


@pytest.mark.parametrize("raw", ["abc", "0", "65535", "-1"])
def test_a_port_that_is_not_one_is_named(raw: str) -> None:
    with pytest.raises(ConfigError) as failed:
        Config.load(env={"FW_BROKER_PORT": raw})
    assert str(failed.value) == (f"FW_BROKER_PORT={raw!r} is not a TCP port for the local broker; set it to a "
                                 "number from 1 to 65534 (the controller takes the next port), or unset it for "
                                 "28092")
