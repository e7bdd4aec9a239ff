"""``fw doctor`` through the installed entry point, in a subprocess: against the real broker
every cluster check passes (the clock sampled through ``__fw_doctor``); against an address
where nothing listens the cluster line fails with its fix, in one line, without a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.integration.harness import ROOT


def fw_doctor(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FW_BOOTSTRAP_SERVERS": bootstrap, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8"}
    return subprocess.run([sys.executable, "-c", "from framework.cli import main; main()", "doctor", *args],
                          env=env, cwd=ROOT, capture_output=True, check=False, text=True, timeout=120)


def test_on_the_real_broker_every_cluster_check_passes(kafka_bootstrap: str) -> None:
    done = fw_doctor(kafka_bootstrap, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    checks = {c["name"]: c for c in json.loads(done.stdout)}
    cluster = {name: checks[name] for name in ("cluster", "broker", "transactions", "durability", "clock")}
    assert {name: c["status"] for name, c in cluster.items()} == dict.fromkeys(cluster, "ok"), cluster
    assert cluster["cluster"]["detail"].startswith(f"{kafka_bootstrap} (PLAINTEXT) answers")
    assert "transaction.state.log.replication.factor=" in cluster["transactions"]["detail"]
    assert "controller" in cluster["broker"]["detail"]
    assert {c["status"] for c in checks.values()} <= {"ok", "warn", "skip"}


def test_an_unreachable_cluster_fails_its_line_with_the_fix_and_skips_what_depends_on_it() -> None:
    done = fw_doctor("127.0.0.1:1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = {line.split()[1]: line for line in done.stdout.splitlines() if len(line.split()) > 1}
    assert lines["cluster"].startswith("✗ cluster")
    assert "cannot reach 127.0.0.1:1 (PLAINTEXT)" in lines["cluster"]
    assert "Fix: check that the brokers at 127.0.0.1:1" in lines["cluster"]
    for name in ("broker", "transactions", "durability", "clock"):
        assert lines[name].startswith(f"- {name}") and "not reachable" in lines[name]
    assert " failed, " in done.stdout.splitlines()[-1]
