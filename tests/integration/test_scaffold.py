"""`fw new` end to end: what it generates passes its own tests, unmodified, on the real broker.

- Every template, generated into a copy of this repository: the generated TestDriver and
  real-broker tests pass (one pytest run for all six), and ruff and mypy accept the code.
- A generated project, from a clean virtualenv made by its own scripts: its CI script (lint,
  types, then its tests) passes on this session's broker (``FW_BOOTSTRAP_SERVERS``, which
  its scripts honour as this repository's do), its demo runs the main job, and `fw new
  service` works from the framework installed as a package (the templates are package data).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from framework.scaffold import TEMPLATES
from framework.scaffold.prometheus import PROMETHEUS, targets_of

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def repo_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This repository's files (tracked, and new ones not ignored) in a temporary directory."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    copy = tmp_path_factory.mktemp("repo")
    for rel in filter(None, listed):
        source = ROOT / rel
        if source.is_file():
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / rel)
    return copy


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, f"{' '.join(args)} exited {done.returncode}\n{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
    return done


def test_every_template_generated_into_this_repository_passes_its_tests(repo_copy: Path, kafka_bootstrap: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(repo_copy), "FW_BOOTSTRAP_SERVERS": kafka_bootstrap}
    generated: list[str] = []
    for template in TEMPLATES:
        package = f"gen_{template}"
        _run([sys.executable, "-m", "framework.cli", "new", "service", package.replace("_", "-"),
              "--template", template], repo_copy, env, 120)
        generated += [f"services/{package}", f"tests/topology/test_{package}.py",
                      f"tests/integration/test_{package}.py"]

    tests = [p for p in generated if p.startswith("tests/")]
    done = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests], repo_copy, env, 600)
    # The summary is pytest's last line; the names of tests (and their durations) may hold any word.
    summary = done.stdout.strip().splitlines()[-1].strip("= ")
    assert re.fullmatch(r"22 passed in [\d.]+s( \([\d:]+\))?", summary), done.stdout  # 15 TestDriver, 7 real-broker
    _run([sys.executable, "-m", "ruff", "check", *generated], repo_copy, env, 120)
    _run([sys.executable, "-m", "mypy", "--follow-imports=silent", *generated], repo_copy, env, 300)
    # The compose file now has an entry per generated service, and still every other one;
    # Prometheus scrapes each of them too.
    compose = (repo_copy / "docker-compose.yml").read_text()
    assert all(f"services.gen_{t}.pipeline:pipeline" in compose for t in TEMPLATES)
    before = (ROOT / "docker-compose.yml").read_text().count("<<: *service")
    assert compose.count("<<: *service") == before + len(TEMPLATES)
    scraped = targets_of((repo_copy / PROMETHEUS).read_text())
    assert scraped == sorted(targets_of((ROOT / PROMETHEUS).read_text())
                             + [f"gen-{t}:9400" for t in TEMPLATES])


@pytest.mark.timeout(1500)
def test_a_new_project_passes_its_ci_from_a_clean_virtualenv(repo_copy: Path, kafka_bootstrap: str,
                                                             tmp_path: Path) -> None:
    project = tmp_path / "shop"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "FW_VENV")}
    env.update({"FW_BOOTSTRAP_SERVERS": kafka_bootstrap, "PYTHON": sys.executable})
    _run([sys.executable, "-m", "framework.cli", "new", "project", str(project),
          "--framework", f"kstreamflow @ {repo_copy.as_uri()}"], repo_copy, {**env, "PYTHONPATH": str(repo_copy)}, 120)

    started = time.monotonic()
    bootstrap = _run(["bash", "-c", "source scripts/bootstrap.sh"], project, env, 1200)
    installed = time.monotonic()
    # A quiet first run: the two lines that say what happens, nothing of pip's (setuptools'
    # "Editable installation" warning block included).
    assert bootstrap.stdout.splitlines() == [
        f"[bootstrap] creating virtualenv {project / '.venv'}",
        "[bootstrap] installing the project, the framework and the test dependencies (first time: pyspark is large)"]
    assert bootstrap.stderr == ""
    ci = _run(["scripts/ci"], project, env, 900)
    tested = time.monotonic()
    assert " passed" in ci.stdout and "failed" not in ci.stdout and "skipped" not in ci.stdout, ci.stdout
    demo = _run(["scripts/demo"], project, env, 300)
    assert "check: every user's last total equals the direct sum of their purchases" in demo.stdout, demo.stdout
    print(f"\n[project] venv + install {installed - started:.1f}s, scripts/ci {tested - installed:.1f}s, "
          f"scripts/demo {time.monotonic() - tested:.1f}s")

    # The framework as installed in the project: `fw new service` renders from package data.
    venv_bin = project / ".venv" / "bin"
    _run([str(venv_bin / "fw"), "new", "service", "alerts", "--template", "stateless"], project, env, 120)
    assert targets_of((project / PROMETHEUS).read_text()) == ["alerts:9400", "spend:9400"]
    _run([str(venv_bin / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/topology/test_alerts.py"],
         project, env, 120)
    assert (project / ".venv" / ".fw-installed").is_file()
