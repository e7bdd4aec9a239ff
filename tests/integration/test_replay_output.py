"""What ``fw replay`` prints: its own lines and nothing of Spark's, on a local master and on a
standalone cluster; Spark's ERRORs when a job fails; and all of Spark's log with ``--verbose``.

Before the framework gave the driver's JVM a log4j configuration of its own
(``framework/replay/log4j2.properties``), every run printed, besides its ``[replay]`` lines:
``WARNING: Using incubator modules: jdk.incubator.vector``, ``Using Spark's default log4j
profile: ...`` (twice), ``WARN Utils: Your hostname, ..., resolves to a loopback address``,
``WARN Utils: Set SPARK_LOCAL_IP if you need to bind to another address``, ``WARN
NativeCodeLoader: Unable to load native-hadoop library ...``, three ``INFO SparkContext`` lines
(the Spark version, the OS, Java) and ``Setting Spark log level to "WARN".``"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.integration.replay_harness import fw_replay
from tests.integration.test_replay_parity import Case, prepare, sensors_service

SPARK_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (?P<level>[A-Z]+) ")  # Spark's layout: time, level


def _replay(env: dict[str, str], master: str, *args: str) -> tuple[int, list[str], list[str]]:
    done = fw_replay(["replay", "tests.integration.pipelines:svc_sensors", "--master", master, *args], env)
    return done.returncode, done.stdout.splitlines(), done.stderr.splitlines()


@pytest.mark.parametrize("where", ["local", "cluster"])
def test_a_replay_prints_its_own_lines_and_nothing_of_sparks(where: str, kafka_bootstrap: str, unique: str,
                                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            request: pytest.FixtureRequest) -> None:
    """A replay that runs the order check and two stages and writes Parquet (Spark SQL, the
    most of Spark a replay uses): its ``[replay]`` lines and the framework's log of the history's
    poison record (by the order check in the driver, and by the task that reads it: on the
    cluster, in its worker's log), and nothing else."""
    master = "local[2]" if where == "local" else request.getfixturevalue("spark_cluster")
    _, env = prepare(Case("svc_sensors", sensors_service), kafka_bootstrap, unique, monkeypatch)
    code, out, err = _replay(env, master, "--output", f"parquet:{tmp_path / 'out'}",
                             *(["--conf", f"spark.executorEnv.FW_TEST_SUFFIX={unique}"] if where == "cluster" else []))
    assert code == 0, "\n".join(out[-30:] + err[-60:])
    # the poison record's, as the framework logs it (the driver's log goes to stdout)
    assert [line for line in err if not line.startswith("dead letter: ")] == []
    assert [line for line in out if not line.startswith(("[replay] ", "dead letter: "))] == []
    assert any(line.startswith("[replay] checked the order of ") for line in out)
    assert any(line.startswith("[replay] done: records read 601,") for line in out), out


def test_a_failed_job_shows_sparks_errors_and_verbose_shows_its_whole_log(
        kafka_bootstrap: str, unique: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first task of stage 0 fails (``FW_REPLAY_FAULT``; ``local[2]`` runs no second
    attempt): the job fails, and Spark's ERROR lines say so, with nothing below ERROR. With
    ``--verbose`` a run shows Spark's INFO and WARN lines as Spark's default profile has them."""
    _, env = prepare(Case("svc_sensors", sensors_service), kafka_bootstrap, unique, monkeypatch)
    code, out, err = _replay({**env, "FW_REPLAY_FAULT": "0:0:0"}, "local[2]", "--allow-nondeterministic")
    levels = {m.group("level") for m in map(SPARK_LINE.match, err) if m}
    assert code != 0 and levels == {"ERROR"}, "\n".join(err[-60:])
    assert any("fault injected into stage 0 task 0" in line for line in err)

    code, out, err = _replay(env, "local[2]", "--allow-nondeterministic", "--verbose")
    levels = {m.group("level") for m in map(SPARK_LINE.match, err) if m}
    assert code == 0 and "INFO" in levels, "\n".join(out[-30:] + err[-60:])
    assert "WARNING: Using incubator modules: jdk.incubator.vector" in err
