"""Every mistake a user can make, through the real ``fw`` command: one line on stderr that
says what is wrong and how to fix it, no traceback, no raw librdkafka line, and exit status
2 for a wrong command, argument, setting, target or pipeline, 1 for everything else.
``FW_DEBUG=1`` adds the traceback. (A refused login or ACL: tests/integration/test_secured_cluster.py.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.ports import worker_port_pair

ROOT = Path(__file__).resolve().parents[2]
RAW_CLIENT_LINE = re.compile(r"^%\d\|", re.MULTILINE)

# A project with broken services, written into a temporary directory.
BROKEN = {
    "services/__init__.py": "",
    "services/needs_dep/__init__.py": "",
    "services/needs_dep/pipeline.py": "import nosuchdependency\n",
    "services/typo/__init__.py": "",
    "services/typo/pipeline.py": "from framework import Pipeline\n\npipeline = Pipeline('typo'\n",
    "services/no_schema/__init__.py": "",
    "services/no_schema/pipeline.py": "from framework import load_schema\n\nSCHEMA = load_schema('shop.Order')\n",
}


@dataclass(frozen=True)
class Mistake:
    name: str
    args: tuple[str, ...]
    code: int
    says: tuple[str, ...]  # what the one error line contains
    env: dict[str, str] = field(default_factory=dict)
    in_project: bool = False  # run in the broken project instead of the repository


UNREACHABLE = {"FW_BOOTSTRAP_SERVERS": "127.0.0.1:1", "FW_KAFKA__CONNECT_TIMEOUT_MS": "1500"}
NO_TOOLS = {"PATH": "{empty}", "JAVA_HOME": ""}  # no java, no mvn, no spark-submit's java

MISTAKES = [
    Mistake("unknown command", ("rnu",), 2, ("No such command 'rnu'", "fw --help")),
    Mistake("unknown option", ("run", "services.even_odd.pipeline:pipeline", "--proceses", "2"), 2,
            ("No such option '--proceses'", "Did you mean '--processes'?", "fw run --help")),
    Mistake("target without attribute", ("run", "services.even_odd.pipeline"), 2, ("expected module:pipeline",)),
    Mistake("no such module", ("run", "nomodule:pipeline"), 2,
            ("cannot import 'nomodule'", "No module named 'nomodule'", "run fw from the project's root")),
    Mistake("misspelt service", ("run", "services.even_od.pipeline:pipeline"), 2,
            ("did you mean services.even_odd.pipeline:pipeline",)),
    Mistake("no such attribute", ("run", "services.even_odd.pipeline:pipelin"), 2,
            ("has no attribute 'pipelin'", "pipelines there: ['pipeline']")),
    Mistake("missing dependency", ("run", "services.needs_dep.pipeline:pipeline"), 2,
            ("ModuleNotFoundError: No module named 'nosuchdependency'", "services/needs_dep/pipeline.py:1",
             "install the missing package"), in_project=True),
    Mistake("syntax error", ("run", "services.typo.pipeline:pipeline"), 2,
            ("SyntaxError", "services/typo/pipeline.py:3"), in_project=True),
    Mistake("schema file not found", ("run", "services.no_schema.pipeline:pipeline"), 2,
            ("unknown Avro schema 'shop.Order'", "no .avsc file"), in_project=True),
    Mistake("misspelt setting", ("run", "services.even_odd.pipeline:pipeline"), 2,
            ("CHECKPOINT_INTERVALMS", "did you mean FW_PROCESSING__CHECKPOINT_INTERVAL_MS"),
            {"FW_PROCESSING__CHECKPOINT_INTERVALMS": "500"}),
    Mistake("bad setting value", ("run", "services.even_odd.pipeline:pipeline"), 2,
            ("FW_GUARANTEE",), {"FW_GUARANTEE": "sometimes"}),
    Mistake("unreachable broker", ("run", "services.even_odd.pipeline:pipeline"), 1,
            ("cannot reach the Kafka cluster at 127.0.0.1:1 (security.protocol PLAINTEXT)", "Connection refused",
             "fw broker start", "FW_BOOTSTRAP_SERVERS", "FW_KAFKA_SECURITY__SECURITY_PROTOCOL"), UNREACHABLE),
    Mistake("unreachable broker, ops command", ("topics", "list"), 1,
            ("cannot reach the Kafka cluster at 127.0.0.1:1", "fw broker start"), UNREACHABLE),
    Mistake("missing topic", ("topics", "tail", "no-such-topic-{unique}"), 1,
            ("topic 'no-such-topic-{unique}' does not exist", "fw topics list")),
    Mistake("missing topics with creation off", ("run", "tests.integration.pipelines:even_odd"), 1,
            ("needs topics that do not exist", "numbers-{unique}", "sums-{unique}", "kafka.create_topics is false",
             "fw topics create"), {"FW_KAFKA__CREATE_TOPICS": "false"}),
    Mistake("java missing for the broker", ("broker", "start"), 1, ("`java` is not on PATH", "JDK"),
            {**NO_TOOLS, "FW_BOOTSTRAP_SERVERS": "", "FW_BROKER_DIR": "{tmp}/broker", "FW_BROKER_PORT": "{port}"}),
    Mistake("maven missing for the jars", ("broker", "fetch"), 1, ("`mvn` is not on PATH", "Maven"),
            {**NO_TOOLS, "FW_HOME": "{tmp}/home"}),
    Mistake("java missing for spark", ("replay", "services.even_odd.pipeline:pipeline", "--output", "none",
                                      "--allow-nondeterministic"), 1, ("Java is not installed", "JAVA_HOME"),
            NO_TOOLS),
]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("broken-project")
    for rel, text in BROKEN.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.name for m in MISTAKES])
def test_a_mistake_is_one_line_with_the_fix_and_the_right_exit_status(
        mistake: Mistake, kafka_bootstrap: str, unique: str, project: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    fill = {"{unique}": unique, "{tmp}": str(tmp_path), "{empty}": str(empty), "{port}": str(worker_port_pair())}

    def filled(text: str) -> str:
        for k, v in fill.items():
            text = text.replace(k, v)
        return text

    env = {**os.environ, "FW_BOOTSTRAP_SERVERS": kafka_bootstrap, "FW_TEST_SUFFIX": unique,
           "FW_OBSERVE__PORT": "0", "FW_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(ROOT)}
    env.pop("FW_DEBUG", None)
    env.update({k: filled(v) for k, v in mistake.env.items()})
    cwd = project if mistake.in_project else ROOT
    done = subprocess.run([sys.executable, "-m", "framework.cli", *(filled(a) for a in mistake.args)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=180, check=False)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert done.stderr.rstrip().endswith(errors[0]), done.stderr  # the last thing said
    for part in mistake.says:
        assert filled(part) in errors[0], done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert not RAW_CLIENT_LINE.search(done.stderr + done.stdout), done.stderr
    assert done.returncode == mistake.code, done.stderr


def test_fw_debug_adds_the_traceback_to_the_line(project: Path) -> None:
    env = {**os.environ, "FW_DEBUG": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "framework.cli", "run", "services.needs_dep.pipeline:pipeline"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "Traceback (most recent call last)" in done.stderr
    assert done.stderr.rstrip().splitlines()[-1].startswith("error: importing 'services.needs_dep.pipeline'")


def test_a_broker_that_comes_late_is_waited_for_with_one_line(tmp_path: Path) -> None:
    """While the cluster does not answer, a starting service says so once and keeps asking
    until kafka.connect_timeout_ms; librdkafka's own connect failures stay out of the output."""
    env = {**os.environ, "FW_BOOTSTRAP_SERVERS": "127.0.0.1:1", "FW_KAFKA__CONNECT_TIMEOUT_MS": "4000",
           "FW_OBSERVE__PORT": "0", "FW_STATE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "framework.cli", "run", "services.even_odd.pipeline:pipeline"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    waiting = [line for line in done.stderr.splitlines() if "yet" in line and "trying again" in line]
    assert len(waiting) == 1, done.stderr
    assert "for up to 4s (FW_KAFKA__CONNECT_TIMEOUT_MS)" in waiting[0]
    assert "Connect to ipv4#127.0.0.1:1 failed" not in done.stderr.replace(waiting[0], "").rsplit("error:", 1)[0]
