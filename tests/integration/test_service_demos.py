"""`fw demo --service NAME` for each example service, end to end on the real broker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from framework.cli.demo import demo

ROOT = Path(__file__).resolve().parents[2]


RAW_CLIENT_LINE = re.compile(r"^%\d\|", re.MULTILINE)  # librdkafka writing to the terminal itself


def test_fw_demo_the_main_job_prints_its_results_and_no_raw_client_lines(kafka_bootstrap: str) -> None:
    """``scripts/demo`` runs ``fw demo``: its output is the results, not librdkafka's chatter."""
    result = subprocess.run(
        [sys.executable, "-m", "framework.cli", "demo"],
        cwd=ROOT, env={**os.environ, "FW_BOOTSTRAP_SERVERS": kafka_bootstrap},
        capture_output=True, text=True, timeout=180, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "read 5000 means" in result.stdout and "check:" in result.stdout, result.stdout
    assert not RAW_CLIENT_LINE.search(result.stdout + result.stderr), result.stdout + result.stderr


@pytest.mark.parametrize("service", ["fraud-detection", "click-sessions", "traffic", "sales-per-month",
                                     "orders-enrich"])
def test_fw_demo_service_checks_its_results(kafka_bootstrap: str, service: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "framework.cli", "demo", "--service", service, "--records", "300"],
        cwd=ROOT, env={**os.environ, "FW_BOOTSTRAP_SERVERS": kafka_bootstrap},
        capture_output=True, text=True, timeout=180, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check passed:" in result.stdout, result.stdout
    assert "MISMATCH" not in result.stdout
    assert not RAW_CLIENT_LINE.search(result.stdout + result.stderr), result.stdout + result.stderr


def test_a_service_without_a_demo_is_a_one_line_error() -> None:
    result = CliRunner().invoke(demo, ["--service", "hashtags"])
    assert result.exit_code == 2
    assert "'hashtags' has no demo; services with one: sensors, click_sessions, fraud_detection" in result.output
