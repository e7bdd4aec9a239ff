"""Avro services, ``fw schemas check`` and ``fw registry`` against a real Confluent-compatible
schema registry (the local Apicurio Registry the ``schema_registry`` fixture starts, or the
one ``FW_SCHEMA_REGISTRY_URL`` names). Every test works on subjects of its own."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from framework.broker.registry import API_PATH, free_port
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from framework.serde import AvroSerde, SchemaRegistryClient, load_schema
from tests.integration.harness import (
    ROOT,
    ServiceProcess,
    Tail,
    produce,
    read_topic,
    service_env,
    wait_until,
)
from tests.ports import worker_port

TARGET = "tests.integration.registry_pipelines:registry_numbers"
V1 = load_schema("demo.Number")
V2 = {**V1, "fields": [*V1["fields"], {"name": "unit", "type": "string", "default": "C"}]}  # evolved


def fw(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``fw ARGS`` in a subprocess, as a user runs it."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8", **(env or {})}
    return subprocess.run([sys.executable, "-m", "framework.cli", *args], env=full, cwd=ROOT,
                          capture_output=True, text=True, timeout=180, check=False)


def header(data: bytes) -> tuple[int, int]:
    """Magic byte and schema id of a record in the Confluent wire format."""
    magic, schema_id = struct.unpack_from(">bI", data)
    return magic, schema_id


def test_a_service_reads_and_writes_the_wire_format_and_an_evolved_producer(
        kafka_bootstrap: str, schema_registry: str, unique: str, tmp_path: Path,
        services: list[ServiceProcess]) -> None:
    source, seen, out = f"reg-numbers-{unique}", f"reg-seen-{unique}", f"reg-out-{unique}"
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(source, 2)])
    registry = SchemaRegistryClient(schema_registry)
    # The first producer registers demo.Number under <topic>-value (TopicNameStrategy).
    old = AvroSerde(V1, registry=registry).bind(source, is_key=False)
    produce(kafka_bootstrap, source, [(f"k{n % 7}".encode(), old.serialize({"n": n})) for n in range(200)])
    subject = f"{source}-value"
    assert registry.versions(subject) == [1]
    # The subject takes only backward-compatible schemas; a field with a default is one.
    registry.set_compatibility("BACKWARD", subject)
    new = AvroSerde(V2, registry=SchemaRegistryClient(schema_registry)).bind(source, is_key=False)
    produce(kafka_bootstrap, source,
            [(f"k{n % 7}".encode(), new.serialize({"n": n, "unit": "F"})) for n in range(200, 300)])
    assert registry.versions(subject) == [1, 2]
    ids = {v: registry.version(subject, v).schema_id for v in (1, 2)}
    written = read_topic(kafka_bootstrap, source)
    assert Counter(header(r.value) for r in written if r.value) == {(0, ids[1]): 200, (0, ids[2]): 100}

    env = {**service_env(kafka_bootstrap, unique), "FW_SCHEMA_REGISTRY_URL": schema_registry}
    svc = ServiceProcess(TARGET, tmp_path, "0", env).start()
    services.append(svc)
    tail = Tail(kafka_bootstrap, seen)
    wait_until(lambda: tail.drain() >= 300, 120, "every number echoed",
               lambda: f"{len(tail.records)} echoed\n{svc.log_text()[-3000:]}")
    tail.close()
    assert svc.stop() == 0
    # The service's reader schema (demo.Number) reads both versions: the new field is dropped.
    assert sorted(json.loads(r.value) for r in read_topic(kafka_bootstrap, seen) if r.value) == list(range(300))
    assert read_topic(kafka_bootstrap, f"reg-{unique}-dead-letter") == []

    # What it writes is in the wire format too, its schema registered under reg-out-...-value.
    echoed = [r.value for r in read_topic(kafka_bootstrap, out) if r.value]
    assert len(echoed) == 300
    out_version = registry.version(f"{out}-value")
    assert out_version.version == 1 and json.loads(out_version.schema)["name"] == "Number"
    assert {header(v) for v in echoed} == {(0, out_version.schema_id)}
    # A reader of the evolved schema reads them, the new field at its default.
    reader = AvroSerde(V2, registry=SchemaRegistryClient(schema_registry))
    assert sorted(reader.deserialize(v)["n"] for v in echoed) == list(range(300))
    assert {reader.deserialize(v)["unit"] for v in echoed} == {"C"}


def _schemas(directory: Path, namespace: str, *fields: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    schema = {"type": "record", "name": "Reading", "namespace": namespace,
              "fields": [{"name": "id", "type": "string"}, *fields]}
    (directory / "reading.avsc").write_text(json.dumps(schema))
    return directory


def test_fw_schemas_check_passes_a_compatible_change_and_refuses_an_incompatible_one(
        schema_registry: str, unique: str, tmp_path: Path) -> None:
    namespace = f"t{unique}"  # no other test's subject has this schema's full name
    subject = f"readings-{unique}-value"
    registry = SchemaRegistryClient(schema_registry)
    registry.register(subject, json.loads((_schemas(tmp_path / "v1", namespace) / "reading.avsc").read_text()))
    registry.set_compatibility("BACKWARD", subject)
    env = {"FW_SCHEMA_REGISTRY_URL": schema_registry}

    same = fw("schemas", "check", "--dir", str(tmp_path / "v1"), env=env)
    assert same.returncode == 0, same.stdout + same.stderr
    assert same.stdout.splitlines()[0].startswith(f"✓ {subject}  {namespace}.Reading (")
    assert "unchanged, latest version 1 (BACKWARD)" in same.stdout

    compatible = _schemas(tmp_path / "v2", namespace, {"name": "unit", "type": "string", "default": "C"})
    ok = fw("schemas", "check", "--dir", str(compatible), env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.splitlines() == [
        f"✓ {subject}  {namespace}.Reading ({compatible / 'reading.avsc'}): compatible, latest version 1 (BACKWARD)",
        "1 subject checked, 0 incompatible"]

    breaking = _schemas(tmp_path / "v3", namespace, {"name": "unit", "type": "string"})
    refused = fw("schemas", "check", "--dir", str(breaking), env=env)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert refused.stdout.splitlines() == [
        (f"✗ {subject}  {namespace}.Reading ({breaking / 'reading.avsc'}): field `unit` added without a "
         "default: old records cannot be read (BACKWARD)"),
        "1 subject checked, 1 incompatible"]
    as_json = fw("schemas", "check", "--dir", str(breaking), "--json", env=env)
    assert as_json.returncode == 1
    [line] = json.loads(as_json.stdout)
    assert (line["subject"], line["compatible"], line["level"], line["version"]) == (subject, False, "BACKWARD", 1)
    assert line["reasons"] == ["field `unit` added without a default: old records cannot be read (BACKWARD)"]
    # The check registers nothing.
    assert registry.versions(subject) == [1]


def test_a_wrong_registry_url_is_one_clear_line(schema_registry: str, tmp_path: Path) -> None:
    schemas = _schemas(tmp_path / "schemas", "wrong")
    nothing = f"http://127.0.0.1:{free_port()}{API_PATH}"  # nothing listens there
    done = fw("schemas", "check", "--dir", str(schemas), env={"FW_SCHEMA_REGISTRY_URL": nothing})
    assert done.returncode == 1 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(f"error: schema registry GET {nothing}/subjects failed: ")
    assert "Connection refused" in line and "fw registry start" in line and "FW_SCHEMA_REGISTRY_URL" in line
    if schema_registry.endswith(API_PATH):  # the server's root, not its Confluent-compatible API
        root = schema_registry[: -len(API_PATH)]
        done = fw("schemas", "check", "--dir", str(schemas), "--registry", root)
        assert done.returncode == 1
        [line] = done.stderr.splitlines()
        assert line.startswith(f"error: schema registry GET {root}/subjects failed: HTTP 404: ")


def test_fw_registry_start_status_stop(tmp_path: Path) -> None:
    port = worker_port()
    env = {"FW_REGISTRY_DIR": str(tmp_path / "registry"), "FW_REGISTRY_PORT": str(port),
           "FW_SCHEMA_REGISTRY_URL": ""}
    try:
        started = fw("registry", "start", env=env)
        assert started.returncode == 0, started.stderr
        assert started.stdout.strip() == f"http://127.0.0.1:{port}{API_PATH}"
        assert fw("registry", "start", env=env).stdout == started.stdout  # already running: the same
        status = fw("registry", "status", env=env)
        assert status.returncode == 0 and status.stdout.startswith("running pid=")
        assert SchemaRegistryClient(started.stdout.strip()).subjects() == []
    finally:
        stopped = fw("registry", "stop", env=env)
    assert stopped.stdout.strip() == "stopped"
    after = fw("registry", "status", env=env)
    assert after.returncode == 1 and after.stdout.startswith("not running")
