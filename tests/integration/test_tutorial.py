"""docs/tutorial.md, executed: its marked blocks run in page order, as a reader types them.

The marker convention (``<!-- run -->`` and its options, background blocks and their
readiness, ``<!-- stop: NAME -->``, ``<!-- excerpt: FILE -->``) is described and
implemented in ``tests/docblocks.py``.

Each run starts in a fresh directory, so the tutorial's ``fw new project shop`` makes a
new project. The commands run with this virtualenv's ``fw``, ``python`` and ``pytest``
first on PATH: the virtualenv that the tutorial's first (unmarked) step, ``source
scripts/bootstrap.sh``, makes; the project uses the framework installed there instead of a
``.venv`` of its own (tests/integration/test_scaffold.py covers that one).

As a reader who moved the local broker off its default port: no ``FW_BOOTSTRAP_SERVERS``, a
broker directory of the test's own (``FW_BROKER_DIR``) and a free port (``FW_BROKER_PORT``).
The tutorial's ``fw broker start`` starts that broker, and every later command (``fw run``,
``fw topics``, ``fw status``, ``fw replay``, the send script) must find it by the same rule
with nothing else said; the broker is stopped and deleted afterwards.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from framework.broker.local import LocalBroker
from framework.kafka.inspect import Cluster
from tests.docblocks import ROOT, Block, Runner, clean_env, parse
from tests.ports import worker_port_pair

TUTORIAL = ROOT / "docs" / "tutorial.md"
SERVICE = "orders"  # the service the tutorial creates: its topics and groups start with this


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[LocalBroker]:
    """Where the tutorial's ``fw broker start`` starts its broker: a directory of its own on a
    free port pair that is not the default one; stopped and deleted at the end."""
    broker = LocalBroker(tmp_path / "broker", worker_port_pair())
    assert broker.port != 28092
    yield broker
    broker.wipe()


@pytest.mark.timeout(900)
def test_the_tutorial_runs_as_written(own_broker: LocalBroker, tmp_path: Path) -> None:
    page = parse(TUTORIAL)
    assert f"fw new service {SERVICE}\n" in TUTORIAL.read_text(), "SERVICE no longer names the tutorial's service"
    start = tmp_path / "work"
    start.mkdir()
    env = clean_env(FW_BROKER_DIR=str(own_broker.instance_dir), FW_BROKER_PORT=str(own_broker.port))
    assert "FW_BOOTSTRAP_SERVERS" not in env
    Runner(start, env, tmp_path / "blocks").run_all(page.steps)
    # The tutorial's own claims about where things end up.
    project = start / "shop"
    assert (project / "services" / SERVICE / "pipeline.py").is_file()
    assert (project / "state" / SERVICE / "totals").is_dir()  # fw run's local state, under ./state
    # ... and on the broker at FW_BROKER_PORT, the one `fw broker start` started.
    assert own_broker.status().running
    topics = {t.name for t in Cluster({"bootstrap.servers": own_broker.bootstrap}).topics()}
    assert {f"{SERVICE}-purchases", f"{SERVICE}-totals", f"{SERVICE}-totals-replay"} <= topics


def _send_block() -> Block:
    """The tutorial's block that writes the send script and runs it."""
    blocks = [b for b in parse(TUTORIAL).steps
              if isinstance(b, Block) and b.text.startswith("cat > services/orders/send_purchases.py")]
    assert len(blocks) == 1, "the tutorial no longer writes services/orders/send_purchases.py in one block"
    return blocks[0]


def test_the_send_script_says_in_one_line_that_the_cluster_cannot_be_reached(tmp_path: Path) -> None:
    """The tutorial's send script, run where nothing listens, prints one error line: no
    librdkafka lines (``%3|...|FAIL|rdkafka#producer-1|``), no traceback."""
    env = clean_env(FW_BOOTSTRAP_SERVERS="127.0.0.1:1")
    project = tmp_path / "shop"
    for cwd, argv in ((tmp_path, ["fw", "new", "project", "shop"]), (project, ["fw", "new", "service", SERVICE])):
        made = subprocess.run(argv, check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
        assert made.returncode == 0, made.stdout + made.stderr
    sent = subprocess.run(["bash", "-c", _send_block().text], check=False, cwd=project, env=env,
                          capture_output=True, text=True, timeout=120)
    assert (sent.returncode, sent.stdout) == (1, "")
    assert re.fullmatch(
        r"error: cannot reach the Kafka cluster at 127\.0\.0\.1:1 \(security\.protocol PLAINTEXT\): [^\n]+\. "
        r"Check that the brokers run \(the local one: fw broker start\), the address \(FW_BOOTSTRAP_SERVERS\) "
        r"and that their listener speaks PLAINTEXT \(FW_KAFKA_SECURITY__SECURITY_PROTOCOL\)\n",
        sent.stderr), sent.stderr
    assert "rdkafka" not in sent.stderr and "%3|" not in sent.stderr
