"""``fw topics``, ``fw group`` and ``fw state`` against the real broker, through the real CLI:
click's runner in this process for output, a subprocess where the one-line error and the
exit status are the subject. Services run as real ``fw run`` processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from framework.cli import cli
from framework.kafka.io import produce_values
from framework.serde import AvroSerde, load_schema
from tests.integration.harness import (
    ROOT,
    ServiceProcess,
    present,
    read_topic,
    service_env,
    wait_until,
)

TARGET = "tests.integration.pipelines:even_odd"  # JSON numbers -> sums by parity (key_by), counts by key


def fw(env: dict[str, str], *args: str) -> Result:
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=True)
    return result


def fw_json(env: dict[str, str], *args: str) -> Any:
    result = fw(env, *args, "--json")
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.output)


def fw_process(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The installed entry point's behaviour (one-line errors, exit status), in a subprocess."""
    return subprocess.run([sys.executable, "-c", "from framework.cli import main; main()", *args],
                          env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, cwd=ROOT, capture_output=True, check=False,
                          text=True, timeout=120)


def test_topics_create_list_describe_and_tail_an_avro_topic_with_a_poison_record(kafka_bootstrap: str,
                                                                                    unique: str) -> None:
    env = {"FW_BOOTSTRAP_SERVERS": kafka_bootstrap}
    topic = f"ops-avro-{unique}"
    created = fw_json(env, "topics", "create", topic, "--partitions", "2", "--config", "cleanup.policy=compact,delete")
    assert [p["partition"] for p in created["partitions"]] == [0, 1]
    listed = {t["name"]: t for t in fw_json(env, "topics", "list")}
    assert listed[topic]["partitions"] == 2 and listed[topic]["internal"] == ""

    serde = AvroSerde(load_schema("demo.Number"))
    now = int(time.time() * 1000) - 60_000  # timestamps in order, newest last, none in the future
    records = [(b"k%d" % (i % 3), serde.serialize({"n": i}), now + i) for i in range(12)]
    produce_values(kafka_bootstrap, topic, [*records, (b"poison", b"\x01\x02 not avro", now + 100)])
    described = fw_json(env, "topics", "describe", topic)
    assert described["config"] == {"cleanup.policy": "compact,delete"}
    assert sum(p["end"] for p in described["partitions"]) == 13

    rows = [json.loads(line) for line in fw(env, "topics", "tail", topic, "--schema", "demo.Number", "--from",
                                             "earliest", "--json").output.splitlines()]
    decoded = sorted(r["value"]["n"] for r in rows if "error" not in r)
    assert decoded == list(range(12))
    [poison] = [r for r in rows if "error" in r]
    assert poison["key"] == "poison"
    assert poison["error"].startswith(f"{topic}[{poison['partition']}]@{poison['offset']}: cannot decode the value")

    last = fw(env, "topics", "tail", topic, "--schema", "demo.Number", "-n", "2")  # the table, newest two
    assert last.exit_code == 0, last.output
    assert f"! {topic}[{poison['partition']}]@{poison['offset']}" in last.output and '{"n":11}' in last.output

    again = fw_process(env, "topics", "create", topic, "--partitions", "2")
    assert again.returncode == 1 and again.stderr.count("\n") == 1
    assert again.stderr.startswith(f"error: topic '{topic}' exists already")
    unknown = fw_process(env, "topics", "tail", f"ops-avro-{unique}x")
    assert unknown.returncode == 1 and f"did you mean {topic}" in unknown.stderr


def test_group_reset_refused_while_a_member_runs_then_state_and_offsets(kafka_bootstrap: str, unique: str,
                                                                       services: list[ServiceProcess],
                                                                       tmp_path: Path) -> None:
    env = {**service_env(kafka_bootstrap, unique), "FW_STATE_DIR": str(tmp_path / "state-0")}
    source = f"numbers-{unique}"
    assert fw(env, "topics", "create", source, "--partitions", "4").exit_code == 0
    numbers = list(range(1, 61))
    produce_values(kafka_bootstrap, source, [(f"k{n % 5}".encode(), str(n).encode()) for n in numbers])
    svc = ServiceProcess(TARGET, tmp_path, "0", service_env(kafka_bootstrap, unique)).start()
    services.append(svc)

    def members() -> list[Any]:
        return list(fw_json(env, "group", "describe", TARGET)["members"])

    wait_until(lambda: bool(members()), 120, "the member to join", svc.log_text)
    refused = fw_process(env, "group", "reset", TARGET, "--to", "earliest")
    assert refused.returncode != 0 and refused.stderr.count("\n") == 1, refused.stderr
    assert "active member" in refused.stderr and refused.stderr.startswith("error: ")

    even, odd = sum(n for n in numbers if n % 2 == 0), sum(n for n in numbers if n % 2)
    wait_until(lambda: _last_sums(kafka_bootstrap, unique) == {"even": even, "odd": odd}, 120, "the final sums",
               svc.log_text)
    assert svc.stop() == 0

    assert _get(env, "sums", "even") == ("local", even)
    assert _get(env, "counts", "k1") == ("local", 12)
    view = fw_json(env, "group", "describe", TARGET)
    lags = {r["partition"]: r["lag"] for r in view["partitions"] if r["topic"] == source}
    assert view["members"] == [] and lags == {0: 0, 1: 0, 2: 0, 3: 0}

    shutil.rmtree(env["FW_STATE_DIR"])  # no local copy: rebuilt from the changelog
    assert _get(env, "sums", "odd") == ("changelog", odd)
    assert _get(env, "counts", "k1") == ("changelog", 12)

    reset = fw_json(env, "group", "reset", TARGET, "--to", "earliest")
    assert reset["applied"] and reset["topics_recreated"] == [f"eo-{unique}-counts-changelog",
                                                             f"eo-{unique}-parity-repartition",
                                                             f"eo-{unique}-sums-changelog"]
    after = fw_json(env, "group", "describe", TARGET)
    committed = {(r["topic"], r["partition"]): r["committed"] for r in after["partitions"]}
    assert {p: committed[(source, p)] for p in range(4)} == {p: 0 for p in range(4)}
    assert all(r["lag"] == 0 for r in after["partitions"] if r["topic"].endswith("-repartition"))
    assert fw_json(env, "state", "get", TARGET, "sums", "even")["entries"] == []  # the changelog is empty now


def _get(env: dict[str, str], store: str, key: str) -> tuple[str, Any]:
    [entry] = fw_json(env, "state", "get", TARGET, store, key)["entries"]
    return entry["source"], entry["value"]


def _last_sums(bootstrap: str, suffix: str) -> dict[str, int]:
    return {r.key.decode(): json.loads(present(r.value)) for r in read_topic(bootstrap, f"sums-{suffix}") if r.key}
