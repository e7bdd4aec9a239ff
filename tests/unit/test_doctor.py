"""``fw doctor`` without a cluster: reading ``java -version``, the disk and clock thresholds,
the report's lines, the exit status, and the runner's time limits (the checks are given)."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from framework import Pipeline, StringSerde, Topic
from framework.cli import cli
from framework.kafka import probe
from framework.kafka.probe import ClockSample
from framework.ops import doctor as D

GIB, MIB = 1 << 30, 1 << 20


@pytest.mark.parametrize(("output", "major"), [
    ('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment (build 17.0.15+6-Debian-1deb12u1)', 17),
    ('java version "1.8.0_292"\nJava(TM) SE Runtime Environment (build 1.8.0_292-b10)', 8),
    ('openjdk version "21" 2023-09-19', 21),
    ('openjdk version "24-ea" 2025-03-18', 24),
    ('Picked up JAVA_TOOL_OPTIONS: -Xmx1g\nopenjdk version "11.0.2" 2019-01-15', 11),
    ("bash: java: command not found", None),
])
def test_java_major_version_from_java_version_output(output: str, major: int | None) -> None:
    assert D.java_major(output) == major


@pytest.mark.parametrize(("free", "status"), [
    (0, D.Status.FAIL), (100 * MIB - 1, D.Status.FAIL), (100 * MIB, D.Status.WARN),
    (GIB - 1, D.Status.WARN), (GIB, D.Status.OK), (500 * GIB, D.Status.OK),
])
def test_disk_fails_below_100_mib_and_warns_below_1_gib(free: int, status: D.Status) -> None:
    assert D.disk_status(free) is status


def test_the_disk_line_names_the_state_dir_and_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(D.shutil, "disk_usage", lambda path: type("Usage", (), {"free": 300 * MIB})())
    [check] = D.check_disk(tmp_path / "not" / "created" / "yet")
    assert check.status is D.Status.WARN
    assert "300 MiB free under" in check.detail and str(tmp_path / "not") in check.detail
    assert check.fix is not None and "FW_STATE_DIR" in check.fix


def test_a_state_dir_that_cannot_be_created_fails_the_disk_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("in the way")
    [check] = D.check_disk(tmp_path / "file" / "state")
    uid = os.geteuid()
    name = pwd.getpwuid(uid).pw_name
    assert check == D.Check(
        "disk", D.Status.FAIL, f"the state directory {tmp_path}/file/state (state.dir) is not writable by user "
        f"{name} (uid {uid}): cannot create {tmp_path}/file/state: Not a directory",
        f"let {name} write there (e.g. chown -R {name} {tmp_path}/file/state), or set FW_STATE__DIR (state.dir in "
        "the configuration file) to a directory it may write")


def test_the_disk_check_creates_the_state_dir_as_a_member_would_and_leaves_it_empty(tmp_path: Path) -> None:
    [check] = D.check_disk(tmp_path / "new" / "state")
    assert check.name == "disk" and check.status is not D.Status.FAIL
    assert list((tmp_path / "new" / "state").iterdir()) == []


@pytest.mark.parametrize(("skew_ms", "status"), [
    (0.0, D.Status.OK), (1000.0, D.Status.OK), (-1000.5, D.Status.WARN), (30_000.0, D.Status.WARN),
    (30_001.0, D.Status.FAIL), (-45_000.0, D.Status.FAIL),
])
def test_clock_skew_warns_above_1_s_and_fails_above_30_s(skew_ms: float, status: D.Status) -> None:
    assert D.skew_status(skew_ms) is status


def test_skew_is_append_time_minus_the_midpoint_of_the_tightest_round_trip() -> None:
    samples = [ClockSample(1000.0, 5000, 1400.0),  # connecting: a 400 ms round trip
               ClockSample(2000.0, 4010, 2020.0),  # tightest: midpoint 2010, broker 2 s ahead
               ClockSample(3000.0, 5030, 3050.0)]
    assert D.skew_of(samples) == (2000.0, 10.0)


def _checks() -> list[D.Check]:
    return [D.Check("python", D.Status.OK, "Python 3.11.7"),
            D.Check("cluster", D.Status.FAIL, "cannot reach 127.0.0.1:1 (PLAINTEXT): refused", "fw broker start"),
            D.Check("disk", D.Status.WARN, "512 MiB free under /s (state.dir)", "free space"),
            D.Check("registry", D.Status.SKIP, "no schema registry configured; skipped")]


def test_each_line_has_the_symbol_the_name_the_detail_and_for_a_failure_or_warning_the_fix() -> None:
    lines = [D.line(c) for c in _checks()]
    assert lines[0].startswith("✓ python ") and lines[0].endswith("Python 3.11.7") and "Fix" not in lines[0]
    assert lines[1].startswith("✗ cluster ") and lines[1].endswith("refused. Fix: fw broker start")
    assert lines[2].startswith("! disk ") and lines[2].endswith(". Fix: free space")
    assert lines[3].startswith("- registry ")
    assert len({line.index(c.detail) for line, c in zip(lines, _checks(), strict=True)}) == 1  # details aligned
    assert D.line(_checks()[1], D.ASCII_SYMBOLS).startswith("x cluster ")


def test_the_exit_status_is_1_only_when_a_check_failed() -> None:
    checks = _checks()
    assert D.exit_code(checks) == 1
    assert D.exit_code([c for c in checks if c.status is not D.Status.FAIL]) == 0
    assert D.exit_code([]) == 0
    assert D.summary(checks) == "1 failed, 1 warning"
    assert D.summary(checks[:1]) == "all checks passed"


def test_results_come_in_order_and_a_check_past_its_limit_or_raising_fails_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(D, "_GRACE_S", 0.0)
    never = threading.Event()

    def hangs() -> list[D.Check]:
        never.wait()
        return []

    def raises() -> list[D.Check]:
        raise RuntimeError("surprise")

    def hung_tool() -> list[D.Check]:
        raise subprocess.TimeoutExpired(["mvn", "-v"], 15.0)

    todo = [D.Step(("first",), lambda: [D.Check("first", D.Status.OK, "fine")], 5.0),
            D.Step(("a", "b"), hangs, 0.05),
            D.Step(("c",), raises, 5.0),
            D.Step(("d",), hung_tool, 5.0)]
    try:
        results = list(D.run(todo))
    finally:
        never.set()
    assert [(c.name, c.status) for c in results] == [("first", D.Status.OK), ("a", D.Status.FAIL),
                                                      ("b", D.Status.FAIL), ("c", D.Status.FAIL),
                                                      ("d", D.Status.FAIL)]
    assert results[1].detail == "no result within 0.05s" and results[1].fix
    assert results[3].detail == "the check raised RuntimeError: surprise"
    assert results[4].detail == "mvn -v gave no answer within 15s" and results[4].fix


def test_the_command_prints_a_line_per_check_or_json_and_exits_1_on_a_failure(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(D, "steps", lambda config, clock=True, service=None: [D.Step(("x",), _checks, 5.0)])
    env = {"FW_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    shown = CliRunner().invoke(cli, ["doctor"], env=env)
    assert shown.exit_code == 1, shown.output
    lines = shown.output.splitlines()
    assert lines[0].startswith("✓ config ") and "bootstrap 127.0.0.1:1" in lines[0]
    assert lines[1:5] == [D.line(c) for c in _checks()] and lines[5] == "1 failed, 1 warning"

    as_json = CliRunner().invoke(cli, ["doctor", "--json"], env=env)
    assert as_json.exit_code == 1
    document = json.loads(as_json.output)
    assert [d["name"] for d in document] == ["config", "python", "cluster", "disk", "registry"]
    assert document[2] == {"name": "cluster", "status": "fail", "detail": "cannot reach 127.0.0.1:1 (PLAINTEXT): "
                           "refused", "fix": "fw broker start"}


def test_a_bad_configuration_fails_its_line_and_skips_what_needs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FW_PROCESSING__CHECKPOINT_INTERVAL_MS", "soon")
    check, config = D.load_config(None)
    assert config is None and check.status is D.Status.FAIL and "FW_PROCESSING__CHECKPOINT_INTERVAL_MS" in check.detail
    names = [name for step in D.steps(None) for name in step.names]
    assert "disk" not in names
    cluster = next(step for step in D.steps(None) if "cluster" in step.names).run()
    assert {c.status for c in cluster} == {D.Status.SKIP}


def _facts(brokers: int, **configs: int) -> probe.ClusterFacts:
    return probe.ClusterFacts("c", "1@h:1", [f"{i}@h:{i}" for i in range(1, brokers + 1)],
                              {k.replace("_", "."): v for k, v in configs.items()})


def test_durability_warns_when_one_node_can_hold_an_acknowledged_write_alone() -> None:
    safe = {"default_replication_factor": 3, "min_insync_replicas": 2}
    assert D.durability(_facts(1, default_replication_factor=1, min_insync_replicas=1), {}).status is D.Status.OK
    assert D.durability(_facts(3, **safe), {}).status is D.Status.OK
    rf1 = D.durability(_facts(3, default_replication_factor=1, min_insync_replicas=1), {})
    assert rf1.status is D.Status.WARN and "default.replication.factor=1" in rf1.detail and rf1.fix
    isr1 = D.durability(_facts(3, default_replication_factor=3, min_insync_replicas=1), {})
    assert isr1.status is D.Status.WARN and "min.insync.replicas=1" in isr1.detail
    acks = D.durability(_facts(3, **safe), {"acks": "1", "enable.idempotence": "false"})
    assert acks.status is D.Status.WARN
    assert "kafka.producer acks=1" in acks.detail and "enable.idempotence=false" in acks.detail


def test_a_services_topics_are_reported_and_one_kept_on_a_single_node_is_a_warning() -> None:
    kept = {"in": probe.TopicReplication(4, 3, 2), "svc-counts-changelog": probe.TopicReplication(4, 3, 2),
            "svc-dead-letters": None}
    ok = D.topic_durability("svc", kept, 3)
    assert ok.status is D.Status.OK
    assert ok.detail == ("svc: 2 topics (2 at RF 3/min ISR 2); not created yet (its first run creates them): "
                         "svc-dead-letters")
    lax = D.topic_durability("svc", {**kept, "out": probe.TopicReplication(4, 1, 1),
                                     "svc-counts-changelog": probe.TopicReplication(4, 3, 1)}, 3)
    assert lax.status is D.Status.WARN and lax.fix
    assert "svc-counts-changelog min.insync.replicas=1; out RF 1" in lax.detail
    assert D.topic_durability("svc", {"out": probe.TopicReplication(4, 1, 1)}, 1).status is D.Status.OK


def test_a_services_topics_are_its_sources_internal_topics_and_sinks_each_once() -> None:
    p = Pipeline("svc", partitions=2)
    p.source(Topic("in", key_serde=StringSerde(), value_serde=StringSerde())).key_by(lambda v: v, name="rekey") \
        .count(name="counts").to(Topic("out", key_serde=StringSerde(), value_serde=StringSerde()))
    assert D.service_topics(p) == ["in", p.repartition_topic("rekey"), p.changelog_topic("counts"),
                                   p.dead_letter.name, "out"]
