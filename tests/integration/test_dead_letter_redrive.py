"""``fw dead-letters`` and ``fw dead-letters redrive`` against a real `fw run` process.

``redrive_orders`` fails in ``screen`` (an amount of 7, on the source topic's task) and in
``check`` (an amount of 13, behind the by-user repartition topic and after ``tally``, a
running count per user). Listed, then re-driven once the service runs the fixed code
(``FW_TEST_REDRIVE_FIXED=1``), each dead letter's effect appears once in the committed
output, the tally before ``check`` does not count a re-driven order twice, a second re-drive
writes nothing, and a record that fails again is a new dead letter naming the one re-driven.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from framework.engine.partitioner import partition_for
from framework.kafka.admin import CLUSTER_DEFAULTS, admin_client, ensure_topics
from framework.kafka.clients import KafkaOutput
from framework.kafka.io import produce_values
from framework.ops.deadletters import plan_redrive, read_letters
from framework.pipeline.loading import load_pipeline
from tests.integration.harness import (
    ROOT,
    Record,
    ServiceProcess,
    end_offsets,
    read_topic,
    service_env,
    wait_until,
)

TARGET = "tests.integration.pipelines:redrive_orders"
T0 = 1_790_000_000_000  # 2026-09-21T14:13:20Z: the inputs' timestamps, T0 + their index
FIXED = {"FW_TEST_REDRIVE_FIXED": "1"}


def _fw(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from framework.cli import main; main()", *args],
                          # a table as wide as its cells: pytest's workers set COLUMNS to their terminal's
                          env={**os.environ, **env, "COLUMNS": "250", "PYTHONPATH": str(ROOT)}, cwd=ROOT,
                          capture_output=True,
                          text=True, timeout=180, check=False)


def _checked(bootstrap: str, unique: str) -> list[dict[str, Any]]:
    return [json.loads(r.value) for r in read_topic(bootstrap, f"rdo-checked-{unique}") if r.value is not None]


def _letters(bootstrap: str, unique: str) -> list[Record]:
    return read_topic(bootstrap, f"rdo-{unique}-dead-letter")


def _groups(env: dict[str, str]) -> list[dict[str, Any]]:
    listed = _fw(env, "dead-letters", TARGET, "--json")
    assert listed.returncode == 0, listed.stderr
    groups: list[dict[str, Any]] = json.loads(listed.stdout)["groups"]
    return groups


def test_dead_letters_are_listed_and_redriven_once_to_the_step_they_failed_at(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess],
        monkeypatch: pytest.MonkeyPatch) -> None:
    env = {**service_env(kafka_bootstrap, unique), "FW_TEST_SUFFIX": unique}
    source, dlq, ledger = f"rdo-orders-{unique}", f"rdo-{unique}-dead-letter", f"rdo-{unique}-redrives"
    svc = ServiceProcess(TARGET, tmp_path, "0", env).start()
    services.append(svc)
    svc.endpoint()
    inputs = [{"user": "ann", "amount": 5}, {"user": "ann", "amount": 13}, {"user": "bob", "amount": 7},
              {"user": "ann", "amount": 20}]
    produce_values(kafka_bootstrap, source, [(b"k", json.dumps(v).encode(), T0 + i) for i, v in enumerate(inputs)])
    p = partition_for(b"k", 2)
    wait_until(lambda: len(_letters(kafka_bootstrap, unique)) == 2 and len(_checked(kafka_bootstrap, unique)) == 2,
               120, "two dead letters and two checked orders", svc.log_text)

    # Listed, grouped by step and error, with an example's coordinates.
    groups = _groups(env)
    assert [(g["step"], g["error_type"], g["error"], g["count"], g["again"], g["redriven"]) for g in groups] == [
        ("check", "ValueError", "ValueError: unlucky amount 13", 1, 0, 0),
        ("screen", "ValueError", "ValueError: seven is screened out", 1, 0, 0)]
    assert groups[1]["first"] == "2026-09-21T14:13:20.002Z" and groups[1]["example"].startswith(f"{dlq}[")
    later = _fw(env, "dead-letters", TARGET, "--since", "2026-09-21T14:13:20.002Z", "--json")
    assert [g["step"] for g in json.loads(later.stdout)["groups"]] == ["screen"]
    table = _fw(env, "dead-letters", TARGET)
    assert table.returncode == 0 and "unlucky amount 13" in table.stdout and f"{dlq}: 2 dead letters" in table.stdout

    # Bad input: one line, exit 2, nothing written.
    ends = end_offsets(kafka_bootstrap, source)
    for args, said in [(["--step", "chek"], f"error: service rdo-{unique} has no step 'chek'; its steps: orders, "),
                       (["--since", "yesterday"], "error: --since 'yesterday' is not a time")]:
        refused = _fw(env, "dead-letters", "redrive", TARGET, *args)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert refused.stderr.startswith(said), refused.stderr
    dry = _fw(env, "dead-letters", "redrive", TARGET, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[-1] == "would re-drive 2 dead letter(s); dry run: nothing was written"
    assert end_offsets(kafka_bootstrap, source) == ends
    assert read_topic(kafka_bootstrap, ledger) == []

    # A re-drive that crashed after writing, before its commit: its transaction stays open.
    monkeypatch.setenv("FW_TEST_SUFFIX", unique)
    pipeline = load_pipeline(TARGET)
    settings = {"bootstrap.servers": kafka_bootstrap}
    ensure_topics(admin_client(settings), [CLUSTER_DEFAULTS.spec(ledger, 1, {"cleanup.policy": "compact"})])
    crashed = KafkaOutput(settings, f"rdo-{unique}-redrive")
    crashed.init_transactions(60)
    crashed.begin()
    for item in plan_redrive(pipeline, read_letters(settings, pipeline), []).items:
        crashed.produce(item.topic, None, None, item.timestamp, list(item.headers), item.partition)
        crashed.produce(ledger, item.of.encode(), b"{}", 0)
    crashed.flush(30)

    # The fix deployed, then the re-drive: each dead letter once, resumed at its step.
    assert svc.stop() == 0
    svc.start(FIXED)
    svc.endpoint()
    done = _fw(env, "dead-letters", "redrive", TARGET)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "re-drove 2 dead letter(s)"
    assert sorted(line.split(" to step ")[1].split(" (")[0] for line in done.stdout.splitlines()[:-1]) == \
        ["'check'", "'screen'"]

    def outputs() -> list[dict[str, Any]]:
        return _checked(kafka_bootstrap, unique)

    wait_until(lambda: len(outputs()) >= 4, 120, "the two re-driven orders checked", svc.log_text)
    key = lambda t: (t["user"], t["orders"])
    assert sorted(outputs(), key=key) == sorted([
        {"user": "ann", "orders": 1, "amount": 5}, {"user": "ann", "orders": 3, "amount": 20},
        {"user": "ann", "orders": 2, "amount": 13},  # 'check' got the tally it failed with: not counted again
        {"user": "bob", "orders": 1, "amount": 7},  # 'screen' on: re-keyed and tallied for the first time
    ], key=key)
    assert len(_letters(kafka_bootstrap, unique)) == 2  # nothing failed again

    # A second re-drive finds both in the ledger and writes nothing.
    ends = end_offsets(kafka_bootstrap, source)
    again = _fw(env, "dead-letters", "redrive", TARGET)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-2:] == [f"already re-driven (the ledger {ledger}): 2",
                                              "re-drove 0 dead letter(s)"]
    assert end_offsets(kafka_bootstrap, source) == ends
    assert [g["redriven"] for g in _groups(env)] == [1, 1]

    # A record that fails again is a new dead letter naming the one re-driven.
    produce_values(kafka_bootstrap, source, [(b"k", b"not json", T0 + 9)])
    wait_until(lambda: len(_letters(kafka_bootstrap, unique)) == 3, 120, "the third dead letter", svc.log_text)
    [first] = [r for r in _letters(kafka_bootstrap, unique) if r.headers.get("fw.step") == b"orders"]
    assert _fw(env, "dead-letters", "redrive", TARGET, "--step", "orders").returncode == 0
    wait_until(lambda: len(_letters(kafka_bootstrap, unique)) == 4, 120, "the fourth dead letter", svc.log_text)
    [repeat] = [r for r in _letters(kafka_bootstrap, unique) if "fw.redrive.of" in r.headers]
    assert repeat.headers["fw.redrive.of"] == f"{dlq}[{first.partition}]@{first.offset}".encode()
    assert (repeat.key, repeat.value) == (b"k", b"not json")
    assert repeat.headers["fw.source.topic"] == source.encode() and repeat.headers["fw.source.partition"] == \
        str(p).encode()
    [orders] = [g for g in _groups(env) if g["step"] == "orders"]
    assert (orders["count"], orders["again"], orders["redriven"]) == (2, 1, 1)
    assert len(outputs()) == 4
    assert svc.alive and svc.stop() == 0

    # A reset keeps the ledger, and says so.
    reset = _fw(env, "group", "reset", TARGET, "--to", "latest", "--dry-run", "--json")
    assert reset.returncode == 0, reset.stderr
    assert json.loads(reset.stdout)["kept"]["re-drive ledger"] == [ledger]

