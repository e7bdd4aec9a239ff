"""``fw savepoint create --master``: a savepoint whose stores Spark makes, on the real broker,
real ``fw run`` processes and the installed pyspark's ``spark-submit``.

On a Spark standalone cluster (executors in processes of their own), the savepoint of a
stopped service with a rolling aggregate, a half-full event-time window, pending timers,
clocks and records in flight holds exactly what the process-local savepoint holds (every
file's rows, and the manifest but its time and its files' names and checksums, which Spark
chooses); restored, its state is the service's again. A
changelog record the state encoding cannot read fails both ways with the same line, and
leaves no savepoint behind. (A table read from its own topic: tests/integration/test_tables.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from tests.integration.harness import ROOT, ServiceProcess, produce_to_partitions, read_topic
from tests.integration.test_ops_cli import fw_json
from tests.integration.test_savepoints import V1, A, Outputs, _in_flight, _produce, _run, _setup


def fw_spark(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The installed entry point in a subprocess (Spark's JVM writes to its pipes), as a user
    runs it; a Spark start takes longer than ``fw_process`` waits."""
    return subprocess.run([sys.executable, "-c", "from framework.cli import main; main()", *args],
                          env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, cwd=ROOT, capture_output=True,
                          check=False, text=True, timeout=600)


def rows(directory: Path) -> list[tuple[Any, ...]]:
    """Every row of every Parquet file of a dataset, sorted."""
    out = []
    for f in sorted(directory.glob("*.parquet")):
        out += [tuple(r.values()) for r in pq.read_table(f).to_pylist()]
    return sorted(out, key=repr)


def manifest(path: Path) -> dict[str, Any]:
    """The manifest but its time and its files: Spark names and encodes its Parquet files its
    own way; the rows in them are compared by ``rows``."""
    data = json.loads((path / "manifest.json").read_text())
    data.pop("created")
    files = data.pop("files")
    assert files and all(f.endswith(".parquet") and len(info["sha256"]) == 64 for f, info in files.items())
    return data


def test_a_savepoint_made_by_spark_on_a_cluster_holds_what_the_process_local_one_holds(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess], spark_cluster: str) -> None:
    env, svc = _setup(kafka_bootstrap, unique, tmp_path, "s")
    services.append(svc)
    out = Outputs(kafka_bootstrap, unique)
    _produce(kafka_bootstrap, f"sp-in-{unique}", A)
    _run(svc, lambda: len(out.totals()) == len(A), "the totals of A")
    _in_flight(kafka_bootstrap, f"sp-{unique}")

    local = fw_json({**env, "FW_STATE_DIR": str(svc.state_dir)}, "savepoint", "create", V1,
                    "--path", str(tmp_path / "local"))
    done = fw_spark(env, "savepoint", "create", V1, "--path", str(tmp_path / "spark"), "--master", spark_cluster,
                    "--conf", f"spark.executorEnv.FW_TEST_SUFFIX={unique}", "--json")
    assert done.returncode == 0, done.stderr[-4000:]
    made = json.loads(done.stdout)  # the job's progress went to stderr
    assert f"master: {spark_cluster}" in done.stderr
    assert {k: v for k, v in made.items() if k not in ("path", "created")} == \
        {k: v for k, v in local.items() if k not in ("path", "created")}
    assert made["stores"]["per-second"]["entries"] > 2  # windows, timers and the signature

    assert manifest(tmp_path / "spark") == manifest(tmp_path / "local")
    datasets = sorted(p.relative_to(tmp_path / "local") for p in (tmp_path / "local").glob("*/*"))
    assert [str(d) for d in datasets] == ["in-flight/" + f"sp-{unique}-by-group-repartition",
                                          "stores/_time", "stores/per-second", "stores/totals"]
    for dataset in datasets:
        assert rows(tmp_path / "spark" / dataset) == rows(tmp_path / "local" / dataset), dataset
    assert sorted(os.listdir(tmp_path / "spark")) == ["in-flight", "manifest.json", "stores"]

    restored = fw_json({**env, "FW_STATE_DIR": str(svc.state_dir)}, "savepoint", "restore", V1,
                       str(tmp_path / "spark"))
    assert restored["stores_written"] == {s: local["stores"][s]["entries"] for s in ("_time", "per-second", "totals")}
    again = fw_json({**env, "FW_STATE_DIR": str(svc.state_dir)}, "savepoint", "create", V1,
                    "--path", str(tmp_path / "again"))
    for store in ("_time", "per-second", "totals"):
        assert rows(tmp_path / "again" / "stores" / store) == rows(tmp_path / "local" / "stores" / store), store
    assert again["stores"] == local["stores"]


def test_an_unreadable_changelog_record_fails_a_spark_savepoint_as_it_fails_the_local_one(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    env, svc = _setup(kafka_bootstrap, unique, tmp_path, "s")
    services.append(svc)
    out = Outputs(kafka_bootstrap, unique)
    _produce(kafka_bootstrap, f"sp-in-{unique}", A[:8])
    _run(svc, lambda: len(out.totals()) == 8, "the totals of A's first 8")
    changelog = f"sp-{unique}-totals-changelog"
    produce_to_partitions(kafka_bootstrap, changelog, [(1, b"\x01junk", b"junk")])
    offset = max(r.offset for r in read_topic(kafka_bootstrap, changelog) if r.partition == 1)
    line = (f"error: {changelog}[1]@{offset}: cannot restore store 'totals' of service 'sp-{unique}': not in the "
            "framework's value encoding: the first byte is 0x6a, not the version byte 0x01 (written by something "
            "else, e.g. pickle). Fix: only the service writes its changelogs; remove this record (produce a "
            f"tombstone for its key, or delete the topic '{changelog}' and the service's local state, then "
            "reprocess the input), and check who else can write to the topic")

    local = fw_spark(env, "savepoint", "create", V1, "--path", str(tmp_path / "local"))
    spark = fw_spark(env, "savepoint", "create", V1, "--path", str(tmp_path / "spark"), "--master", "local[1]")
    for done, said in ((local, line), (spark, f"{line} (StateError in a Spark task)")):
        assert done.returncode == 1
        assert next(x for x in done.stderr.splitlines() if x.startswith("error:")) == said, done.stderr[-3000:]
    assert "the Spark job that writes the savepoint's stores failed (exit code 1" in spark.stderr
    assert not (tmp_path / "local").exists() and not (tmp_path / "spark").exists()

