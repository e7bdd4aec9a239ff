"""`fw demo --service NAME` for each example service, end to end on the real broker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from framework.cli.demo import demo

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("service", ["fraud-detection", "click-sessions", "traffic", "sales-per-month"])
def test_fw_demo_service_checks_its_results(kafka_bootstrap: str, service: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "framework.cli", "demo", "--service", service, "--records", "300"],
        cwd=ROOT, env={**os.environ, "FW_BOOTSTRAP_SERVERS": kafka_bootstrap},
        capture_output=True, text=True, timeout=180, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check passed:" in result.stdout, result.stdout
    assert "MISMATCH" not in result.stdout


def test_a_service_without_a_demo_is_a_one_line_error() -> None:
    result = CliRunner().invoke(demo, ["--service", "hashtags"])
    assert result.exit_code == 2
    assert "'hashtags' has no demo; services with one: sensors, click_sessions, fraud_detection" in result.output
