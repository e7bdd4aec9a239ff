"""A state directory the member cannot write is found before it does anything on the cluster:
``fw run`` stops with one line naming the directory, the user and the fix (exit status 1, an
environment problem), having created no topic and joined no group; ``fw doctor`` fails its
``disk`` line with the same words.

The directory is really read-only for the process (mode 0555). Root may write anywhere, so
when the tests run as root the command runs in a user namespace of its own: there it is the
overflow user (``nobody``), without root's power over the files outside, whose mode bits then
apply to it as to anyone (an unprivileged user namespace, as rootless containers use)."""

from __future__ import annotations

import ctypes
import os
import pwd
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from tests.integration.harness import ROOT

_CLONE_NEWUSER = 0x10000000


def _own_user_namespace() -> None:
    """In the child, before it runs fw: leave root's user namespace (see the module docstring)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWUSER) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER)")


def _as_the_user() -> tuple[dict[str, Any], str, str]:
    """How to start the command, and its user as the messages name it and as chown does."""
    if os.geteuid() != 0:
        uid = os.geteuid()
        options: dict[str, Any] = {}
    else:
        uid = int(Path("/proc/sys/kernel/overflowuid").read_text())
        options = {"preexec_fn": _own_user_namespace}
    name = pwd.getpwuid(uid).pw_name
    return options, f"{name} (uid {uid})", name


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o555)
    yield state
    state.chmod(0o755)


def _fw(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    options, _, _ = _as_the_user()
    full = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8", **env}
    full.pop("FW_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "framework.cli", *args], env=full, cwd=ROOT, capture_output=True,
                          text=True, timeout=180, check=False, **options)


def _fix(state: Path) -> str:
    _, _, name = _as_the_user()
    return (f"let {name} write there (e.g. chown -R {name} {state}), or set FW_STATE__DIR (state.dir in the "
            "configuration file) to a directory it may write")


def test_fw_run_stops_before_touching_the_cluster(read_only: Path, kafka_bootstrap: str, unique: str) -> None:
    done = _fw(["run", "tests.integration.pipelines:even_odd"],
               {"FW_BOOTSTRAP_SERVERS": kafka_bootstrap, "FW_TEST_SUFFIX": unique, "FW_OBSERVE__PORT": "0",
                "FW_STATE_DIR": str(read_only)})
    _, who, _ = _as_the_user()
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"error: the state directory {read_only} (state.dir) is not writable by user {who}: cannot create "
        f"{read_only}/eo-{unique}: Permission denied. Fix: {_fix(read_only)}"), done.stderr
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    assert [t for t in admin.list_topics(timeout=30).topics if unique in t] == []  # not even its sources
    groups = admin.list_consumer_groups(request_timeout=30).result().valid
    assert [g.group_id for g in groups if unique in g.group_id] == []


def test_fw_doctor_fails_the_disk_line(read_only: Path, kafka_bootstrap: str) -> None:
    done = _fw(["doctor", "--skip-clock"], {"FW_BOOTSTRAP_SERVERS": kafka_bootstrap, "FW_STATE_DIR": str(read_only)})
    _, who, _ = _as_the_user()
    assert done.returncode == 1, done.stdout + done.stderr
    [disk] = [line for line in done.stdout.splitlines() if line.split()[1:2] == ["disk"]]
    assert disk == (f"✗ disk          the state directory {read_only} (state.dir) is not writable by user {who}: "
                    f"cannot write a file in {read_only}: Permission denied. Fix: {_fix(read_only)}")
