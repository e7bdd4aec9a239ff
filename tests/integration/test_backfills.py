"""A backfill is exactly once across runs, on the real broker with real PySpark: killed mid-run
(SIGKILL of the whole ``fw replay`` process group) and started again, its outputs, read
read_committed or from its Parquet path, are those of one clean run; run again once complete,
it writes nothing and says so; ``--again`` writes only into a destination that holds nothing;
nothing but the ledger stays on the broker, and ``--clean`` removes it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from framework.kafka.admin import group_ids
from framework.replay.plan import output_topics
from tests.integration.harness import ROOT, read_topics, wait_until
from tests.integration.replay_harness import fw_replay, parquet_outputs
from tests.integration.test_replay_parity import Case, even_odd, prepare

TARGET = "tests.integration.pipelines:even_odd"
# small batches, each committed: a task held after a few of them has committed outputs
ARGS = ["--allow-nondeterministic", "--master", "local[2]", "--batch-size", "10", "--commit-every", "10"]


def _killed_mid_run(args: list[str], env: dict[str, str], hold: str, log: Path) -> None:
    """``fw replay`` until a task reaches its injected hold (``FW_REPLAY_HOLD``), then SIGKILL
    of its process group: spark-submit, the driver, the Python workers."""
    full = {**os.environ, **env, "PYTHONPATH": str(ROOT), "FW_REPLAY_HOLD": hold}
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "framework.cli", "replay", TARGET, *args], env=full, cwd=ROOT,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(lambda: "[replay] injected hold:" in log.read_text() or proc.poll() is not None, 300,
                   "a task to reach its hold", log.read_text)
        assert proc.poll() is None, log.read_text()[-3000:]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _ok(args: list[str], env: dict[str, str]) -> str:
    done = fw_replay(["replay", TARGET, *args], env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return done.stdout


def _outputs(bootstrap: str, topics: list[str]) -> dict[str, Counter[tuple[bytes | None, bytes | None]]]:
    read = read_topics(bootstrap, topics)
    return {t: Counter((r.key, r.value) for r in read[t]) for t in topics}


def _groups(bootstrap: str, prefix: str) -> list[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive while its future is open
    return [g for g in group_ids(admin) if g.startswith(prefix)]


def test_a_backfill_to_topics_killed_and_run_again_writes_each_output_once(
        kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pipeline, env = prepare(Case("even_odd", even_odd), kafka_bootstrap, unique, monkeypatch)
    args = [*ARGS, "--output", "topic", "--output-suffix", "-bf"]
    _killed_mid_run(args, env, "0:0:20", tmp_path / "killed.log")
    bf = [f"{t}-bf" for t in output_topics(pipeline)]
    assert sum(c.total() for c in _outputs(kafka_bootstrap, bf).values())  # the killed run had committed outputs

    again = _ok(args, env)
    assert "did not complete: each task continues from what it committed" in again
    clean = _ok([*ARGS, "--output", "topic", "--output-suffix", "-one"], env)
    assert "did not complete" not in clean
    one = _outputs(kafka_bootstrap, [f"{t}-one" for t in output_topics(pipeline)])
    assert sum(c.total() for c in one.values()) > 0
    assert _outputs(kafka_bootstrap, bf) == {f"{t}-bf": c for t, c in zip(output_topics(pipeline), one.values())}

    # complete: nothing written, and said
    third = _ok(args, env)
    assert "completed at" in third and "nothing written" in third
    assert "[replay] replay of" not in third  # Spark never started
    assert _outputs(kafka_bootstrap, bf) == {f"{t}-bf": c for t, c in zip(output_topics(pipeline), one.values())}

    # --again: only into a destination that holds nothing
    refused = fw_replay(["replay", TARGET, *args, "--again"], env)
    assert refused.returncode != 0
    assert (f"--again writes a new copy of the backfill, into topics or a path that hold nothing yet: "
            f"{', '.join(bf)} hold records. Fix: choose new topics (--output-suffix) or a new path, or delete what "
            "is there first") in refused.stderr, refused.stderr

    # what stays: the ledger, no marker group; --clean removes it
    assert _groups(kafka_bootstrap, f"{pipeline.name}-backfill-") == []
    tail = fw_replay(["topics", "tail", f"{pipeline.name}-backfills", "--json"], env)
    assert tail.returncode == 0, tail.stderr
    entries = [json.loads(json.loads(line)["value"]) for line in tail.stdout.splitlines()]
    mine = [e for e in entries if e["destination"] == bf]
    assert [e["state"] for e in mine] == ["running", "complete"]  # compaction keeps the last
    [one_done] = [e for e in entries if e["destination"] == list(one) and e["state"] == "complete"]
    assert one_done["counts"]["outputs written"] == sum(c.total() for c in one.values())
    cleaned = _ok(["--clean"], env)
    assert cleaned.splitlines() == [f"removed topic {pipeline.name}-backfills"]


def test_a_parquet_backfill_killed_and_run_again_replaces_its_partial_files(
        kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pipeline, env = prepare(Case("even_odd", even_odd), kafka_bootstrap, unique, monkeypatch)
    path, clean_path = tmp_path / "bf", tmp_path / "one"
    args = [*ARGS, "--output", f"parquet:{path}"]
    # stage 1's tasks hold: stage 0's files are written (staged) by then
    _killed_mid_run(args, env, ",".join(f"1:{p}:1" for p in range(4)), tmp_path / "killed.log")
    assert list((path / "_fw_partial").rglob("*.parquet")), "stage 0's files, staged"
    assert not list(path.glob("topic=*"))

    again = _ok(args, env)
    assert "did not complete: each task continues from what it committed" in again
    _ok([*ARGS, "--output", f"parquet:{clean_path}"], env)

    def rows(p: Path) -> dict[str, Counter[tuple[bytes | None, bytes | None]]]:
        return {t: Counter((r.key, r.value) for r in records) for t, records in parquet_outputs(p, pipeline).items()}

    assert sum(c.total() for c in rows(clean_path).values()) > 0
    assert rows(path) == rows(clean_path)
    assert not (path / "_fw_partial").exists()

    files = sorted(path.rglob("*.parquet"))
    third = _ok(args, env)
    assert "completed at" in third and "nothing written" in third
    assert sorted(path.rglob("*.parquet")) == files
