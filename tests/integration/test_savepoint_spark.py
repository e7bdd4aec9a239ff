"""State with Spark on the real broker, real ``fw run`` processes and a real SparkSession
(``local[1]``): a stopped service's savepoint read as a DataFrame shows what ``fw state scan``
shows; migrated (each sum times 10, a bad key fixed) into a new savepoint and restored, the
service continues from the migrated state exactly; a value of the wrong shape is refused with
its line before anything is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyspark

from framework.engine.partitioner import partition_for
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from tests.integration.harness import (
    ROOT,
    Record,
    ServiceProcess,
    produce,
    read_topic,
    service_env,
    wait_until,
)
from tests.integration.test_ops_cli import fw_json

TARGET = "tests.integration.pipelines:spark_state"
USERS = ["u0", "u1", "u2", "u3"]
A = [(USERS[i % 4], i) for i in range(24)]  # sums u0 60, u1 66, u2 72, u3 78; 6 records each
B = [([*USERS, "u9"][i % 5], i) for i in range(100, 120)]


def _produce(bootstrap: str, topic: str, amounts: list[tuple[str, int]]) -> None:
    """Each record to the partition Kafka's murmur2 partitioner gives its key, as the service's
    placement of the key's state assumes."""
    produce(bootstrap, topic, [(user.encode(), json.dumps({"v": v}).encode()) for user, v in amounts])


def _per_key(records: list[Record]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        out[(r.key or b"").decode()].append(json.loads(r.value or b"null"))
    return dict(out)


def _running(start: dict[str, int], amounts: list[tuple[str, int]], step: Any) -> dict[str, list[int]]:
    """Each key's outputs from ``start``, ``step(acc, amount)`` per record."""
    acc, out = dict(start), defaultdict(list)
    for user, v in amounts:
        acc[user] = step(acc.get(user, 0), v)
        out[user].append(acc[user])
    return dict(out)


def _spark_job(env: dict[str, str], *args: str) -> dict[str, Any]:
    """tests/integration/savepoint_spark_job.py through the installed pyspark's spark-submit, as a
    user runs such a script."""
    out = Path(args[-1])
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    done = subprocess.run([str(submit), "--master", "local[1]", str(ROOT / "tests/integration/savepoint_spark_job.py"),
                           TARGET, *args],
                          env={**os.environ, **env, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable,
                               "PYSPARK_DRIVER_PYTHON": sys.executable}, cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text())


def test_a_store_read_as_a_dataframe_migrated_and_restored_is_the_state_the_service_continues_from(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    env = service_env(kafka_bootstrap, unique)
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(f"ss-in-{unique}", 2)])
    svc = ServiceProcess(TARGET, tmp_path, "s", env)
    services.append(svc)
    sums_topic, counts_topic = f"ss-sums-{unique}", f"ss-counts-{unique}"
    _produce(kafka_bootstrap, f"ss-in-{unique}", A)
    svc.start()
    wait_until(lambda: len(read_topic(kafka_bootstrap, counts_topic)) == len(A) == len(
        read_topic(kafka_bootstrap, sums_topic)), 180, "the outputs of A", svc.log_text)
    assert svc.stop() == 0
    local = {**env, "FW_STATE_DIR": str(svc.state_dir)}
    saved, migrated, refused = tmp_path / "sp", tmp_path / "migrated", tmp_path / "refused"
    fw_json(local, "savepoint", "create", TARGET, "--path", str(saved))
    scanned = fw_json(local, "state", "scan", TARGET, "sums", "--source", "changelog", "--limit", "0")["entries"]

    job = _spark_job(env, str(saved), str(migrated), str(refused), str(tmp_path / "job.json"))

    # read: what fw state scan shows, plus the store's signature in every partition
    state = [r for r in job["read"] if r["kind"] == "state"]
    assert sorted((r["partition"], r["key"], json.loads(r["value"])) for r in state) == sorted(
        (e["partition"], e["key"], e["value"]) for e in scanned)
    assert {(r["key"], json.loads(r["value"])) for r in state} == {("u0", 60), ("u1", 66), ("u2", 72), ("u3", 78)}
    assert all(r["state"] == "acc" and r["window_start"] is r["timer"] is r["map_key"] is None for r in state)
    assert [(r["partition"], r["state"], json.loads(r["value"])) for r in job["read"] if r["kind"] == "meta"] == [
        (0, "step", {"kind": "aggregate", "layout": 1}), (1, "step", {"kind": "aggregate", "layout": 1})]
    assert job["raw_columns"] == ["partition", "key_bytes", "value_bytes"]
    # the migrated savepoint reads back as written, u9 placed where the partitioner puts it
    assert {(r["partition"], r["key"], json.loads(r["value"])) for r in job["migrated"] if r["kind"] == "state"} == {
        (partition_for(k.encode(), 2), k, v) for k, v in (("u0", 600), ("u1", 660), ("u2", 720), ("u9", 780))}
    # a value of the wrong shape: its line, and nothing written
    assert job["refused"] == ("store 'sums', key 'u2': value \"ten\" is text; step 'sums' keeps a number (its "
                              "accumulator starts as 0). Fix: give the value as a number")
    assert not refused.exists()

    restored = fw_json({**env, "FW_STATE_DIR": str(tmp_path / "elsewhere")}, "savepoint", "restore", TARGET,
                       str(migrated))
    assert restored["applied"] and restored["stores_written"] == {"sums": 6, "counts": 6}
    _produce(kafka_bootstrap, f"ss-in-{unique}", B)
    svc.start()
    wait_until(lambda: len(read_topic(kafka_bootstrap, counts_topic)) == len(A + B) == len(
        read_topic(kafka_bootstrap, sums_topic)), 180, "the outputs of B", svc.log_text)
    assert svc.stop() == 0

    sums = _per_key(read_topic(kafka_bootstrap, sums_topic))
    assert {user: s[6 if user in USERS else 0:] for user, s in sums.items()} == _running({"u0": 600, "u1": 660, "u2": 720, "u9": 780}, B, int.__add__)  # u3 starts anew
    counts = _per_key(read_topic(kafka_bootstrap, counts_topic))
    assert {user: c[6 if user in USERS else 0:] for user, c in counts.items()} == _running(
        dict.fromkeys(USERS, 6), B, lambda acc, _v: acc + 1)  # counts: the base's, untouched
