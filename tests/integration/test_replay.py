"""``fw replay`` on the real broker with real PySpark, beyond parity (test_replay_parity.py):
Spark's task retries write nothing twice, a standalone Spark cluster runs the same job, an
archive replays like its topic, a bootstrap hands over to the live service exactly, a
wrong range or a missing tool is refused in one line, and a key that reaches an
order-sensitive step from several upstream partitions is refused before anything is
written (the same records keyed upstream replay as the live run)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from framework.engine.partitioner import partition_for
from framework.kafka.groups import active_members
from framework.replay import ledger
from framework.replay.launch import wait_for_archives
from framework.replay.plan import output_topics
from framework.replay.submit import cache_dir, connector_jars
from tests.integration.harness import (
    ServiceProcess,
    committed_offsets,
    produce_to_partitions,
    read_topic,
    read_topics,
    wait_until,
)
from tests.integration.replay_harness import (
    Results,
    assert_same,
    fw_replay,
    output_ends,
    parquet_outputs,
    results,
)
from tests.integration.test_replay_parity import (
    Case,
    avro_numbers,
    even_odd,
    event_time_windows,
    prepare,
    replay,
    run_live,
    sensors_service,
)


@pytest.mark.parametrize(("reader", "target"), [("spark", "even_odd"), ("librdkafka", "even_odd"),
                                               ("librdkafka", "avro_numbers")])
def test_a_retried_task_writes_nothing_twice(reader: str, target: str, kafka_bootstrap: str, unique: str,
                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             services: list[ServiceProcess]) -> None:
    """The first attempt of a task of each stage fails after it has committed some of its
    outputs (a commit every 10 records, batches of 5) and left others in an open transaction;
    Spark runs the task again (local[2,4]: up to four attempts), which reads its input again
    (with ``librdkafka``, from Kafka itself). A read_committed consumer sees each output once:
    the live run's. ``even_odd`` has two stages; ``avro_numbers`` one, which with
    ``librdkafka`` runs over a plain RDD instead of Spark SQL."""
    case = Case(target, {"even_odd": even_odd, "avro_numbers": avro_numbers}[target], reader=reader)
    pipeline, env = prepare(case, kafka_bootstrap, unique, monkeypatch)
    run_live(case, kafka_bootstrap, pipeline, env, tmp_path, services)
    live = results(kafka_bootstrap, pipeline)

    faults = ["0:1:25"]
    if target == "even_odd":  # and the task of stage 1 that sums both parities: the partition they went to live
        summing = {r.partition for r in read_topic(kafka_bootstrap, pipeline.repartition_topic("parity"))}
        assert len(summing) == 1
        faults.append(f"1:{summing.pop()}:7")
    log = replay(case, {**env, "FW_REPLAY_FAULT": ",".join(faults)}, "--output", "topic",
                 "--output-suffix", "-retried", "--batch-size", "5", "--commit-every", "10", master="local[2,4]")
    assert re.search(r"InjectedFault: fault injected into stage 0 task 1 after \d+ outputs", log)
    if target == "even_odd":
        assert re.search(r"InjectedFault: fault injected into stage 1 task \d after \d+ outputs", log)
    replayed = results(kafka_bootstrap, pipeline, "-retried")
    assert_same(pipeline, live, Results(replayed.outputs, live.state))


@pytest.mark.parametrize(("reader", "target"), [("spark", "svc_sensors"), ("librdkafka", "svc_sensors"),
                                               ("librdkafka", "avro_numbers")])
def test_a_replay_on_a_standalone_cluster_equals_the_live_run(reader: str, target: str, kafka_bootstrap: str,
                                                              unique: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              services: list[ServiceProcess],
                                                              spark_cluster: str) -> None:
    """``fw replay --master spark://...``: the job, the framework, the service's package and
    its Avro schemas reach executors that are not the driver's process (the test's topic
    suffix, which the pipeline reads from the environment, with spark.executorEnv); with
    ``--reader librdkafka`` the executors read Kafka themselves, and the one stage of
    ``avro_numbers`` runs as a plain RDD job."""
    case = Case(target, {"svc_sensors": sensors_service, "avro_numbers": avro_numbers}[target], reader=reader)
    pipeline, env = prepare(case, kafka_bootstrap, unique, monkeypatch)
    run_live(case, kafka_bootstrap, pipeline, env, tmp_path, services)
    live = results(kafka_bootstrap, pipeline)

    log = replay(case, env, "--bootstrap", "--output", "topic", "--output-suffix", "-cluster",
                 "--conf", f"spark.executorEnv.FW_TEST_SUFFIX={unique}", master=spark_cluster)
    assert f"master: {spark_cluster}" in log
    assert_same(pipeline, live, results(kafka_bootstrap, pipeline, "-cluster"))


def test_an_archive_replays_like_its_topic(kafka_bootstrap: str, unique: str, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch, services: list[ServiceProcess]) -> None:
    """``fw archive`` writes the sources as Parquet; ``fw replay --archive`` of it gives the
    live run's outputs (here written as Parquet, dead letters with their headers) and state,
    as a replay of the topics does."""
    case = Case("avro_numbers", avro_numbers)
    pipeline, env = prepare(case, kafka_bootstrap, unique, monkeypatch)
    run_live(case, kafka_bootstrap, pipeline, env, tmp_path, services)
    live = results(kafka_bootstrap, pipeline)

    path = tmp_path / "archive"
    source = pipeline.input_topics()[0]
    archived = fw_replay(["archive", source, "--path", str(path), "--master", "local[2]"], env)
    assert archived.returncode == 0, archived.stderr[-5000:]
    assert f"[replay] archived {sum(1 for _ in case.history(unique)[source]):,} records" in archived.stdout
    outputs = tmp_path / "outputs"
    replay(case, env, "--archive", str(path), "--bootstrap", "--output", f"parquet:{outputs}")
    replayed = Results(parquet_outputs(outputs, pipeline), results(kafka_bootstrap, pipeline).state)
    assert any(r.headers.get("origin") for r in replayed.outputs[pipeline.dead_letter.name])
    assert_same(pipeline, live, replayed)


def _renamed(value: object, mine: str, theirs: str) -> object:
    """``value`` with the topic names of one suffix written with the other's."""
    if isinstance(value, str):
        return value.replace(mine, theirs)
    if isinstance(value, dict):
        return {_renamed(k, mine, theirs): _renamed(v, mine, theirs) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_renamed(v, mine, theirs) for v in value)
    return value


def _suffixed(res: Results, mine: str, theirs: str) -> Results:
    return Results({t.replace(mine, theirs): rs for t, rs in res.outputs.items()},
                   {store: {k: _renamed(v, mine, theirs) for k, v in entries.items()}
                    for store, entries in res.state.items()})


def test_a_bootstrap_hands_over_to_the_live_service_exactly(kafka_bootstrap: str, unique: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            services: list[ServiceProcess]) -> None:
    """History H1 then H2, into an event-time pipeline with a repartition whose windows are
    open when H1 ends. Reference: the live service over H1+H2. Test: the live service over
    the first third of H1 (its host keeps that local state), ``fw replay --bootstrap
    --output topic`` over H1, then the same live service, same host, over H2. Its outputs
    after the first run and its final state equal the reference's: nothing twice, nothing
    missing, the older local state rebuilt instead of merged."""
    case = Case("event_time_windows", event_time_windows)
    n = min(len(records) for records in case.history("x").values())
    first, h1, h2 = slice(0, n // 6), slice(n // 6, n // 2), slice(n // 2, None)

    reference, ref_env = prepare(case, kafka_bootstrap, f"{unique}r", monkeypatch)
    run_live(case, kafka_bootstrap, reference, ref_env, tmp_path / "reference", services)
    expected = results(kafka_bootstrap, reference)

    pipeline, env = prepare(case, kafka_bootstrap, f"{unique}t", monkeypatch, first)
    run_live(case, kafka_bootstrap, pipeline, env, tmp_path, services)
    since = output_ends(kafka_bootstrap, pipeline)
    _produce(case, kafka_bootstrap, f"{unique}t", h1)
    log = replay(case, env, "--bootstrap", "--output", "topic")
    assert "state_entries" in log
    _produce(case, kafka_bootstrap, f"{unique}t", h2)
    run_live(case, kafka_bootstrap, pipeline, env, tmp_path, services)  # the same state directory
    assert "deleting it and rebuilding it from" in (tmp_path / "service-0.log").read_text()
    handed_over = _suffixed(results(kafka_bootstrap, pipeline, since=since), f"{unique}t", f"{unique}r")
    assert_same(reference, expected, handed_over)


def _produce(case: Case, bootstrap: str, suffix: str, part: slice) -> None:
    for topic, records in case.history(suffix).items():
        produce_to_partitions(bootstrap, topic, records[part])


# -- refused in one line ------------------------------------------------------------------

def _refused(args: list[str], env: dict[str, str], *expected: str) -> None:
    done = fw_replay(args, env)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr + done.stdout
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    for words in expected:
        assert words in lines[0], lines[0]


def test_the_first_replay_writes_the_jvms_class_archive_and_the_next_one_maps_it(
        kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine's first replay (here: a cache of its own, with the usual cache's Spark
    connector) writes the driver JVM's class-data archive as the JVM exits, after the command
    has ended with the job; later replays name it, and their JVM maps it: with ``-Xshare:on`` a JVM that cannot map it does not start."""
    case = Case("avro_numbers", avro_numbers, reader="librdkafka")
    target = f"tests.integration.pipelines:{case.target}"
    _pipeline, env = prepare(case, kafka_bootstrap, unique, monkeypatch)
    connector_jars()
    home = tmp_path / "home"
    home.mkdir()
    (home / "spark-kafka").symlink_to(cache_dir() / "spark-kafka")
    env = {**env, "FW_HOME": str(home)}

    first = replay(case, env, "--output", "none")
    assert "writes its class archive as it exits, once, after this command has ended" in first
    wait_for_archives(home / "spark-cds")  # its JVM's exit, after the command's
    [archive] = (home / "spark-cds").iterdir()  # and nothing half-written beside it
    assert archive.suffix == ".jsa"
    planned = fw_replay(["replay", target, "--allow-nondeterministic", "--master", "local[2]", "--dry-run"], env)
    assert planned.returncode == 0 and f"-XX:SharedArchiveFile={archive}" in planned.stdout, planned.stderr
    again = replay(case, env, "--output", "none", "--conf",
                   f"spark.driver.extraJavaOptions=-XX:SharedArchiveFile={archive} -Xshare:on")
    assert "writes its class archive" not in again
    # the runs shipped the same zip of the code, made once; only the dry run's plan is left
    [deps] = (home / "replay" / "deps").iterdir()
    [kept] = (home / "replay" / "runs").iterdir()
    assert f"--py-files {deps} " in planned.stdout and f"{kept / 'plan.json'} replay" in planned.stdout


def test_a_wrong_range_or_a_missing_tool_is_refused_in_one_line(kafka_bootstrap: str, unique: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                services: list[ServiceProcess]) -> None:
    """Refused before Spark starts, one line each, no traceback: a start below the log start
    (records deleted), an end past the log end, an unknown topic, an archive with a reader
    of Kafka, a bootstrap while the service runs, no Maven to resolve Spark's Kafka
    connector, no Java."""
    case = Case("even_odd", even_odd)
    target = f"tests.integration.pipelines:{case.target}"
    pipeline, env = prepare(case, kafka_bootstrap, unique, monkeypatch)
    topic = f"numbers-{unique}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})  # kept: its futures need it alive
    for future in admin.delete_records([TopicPartition(topic, 0, 5)]).values():
        future.result(30)

    _refused(["replay", target, "--from", f"{topic}:0:2", "--allow-nondeterministic"], env, f"{topic}[0]", "5",
             "--from")
    _refused(["replay", target, "--to", f"{topic}:1:100000", "--allow-nondeterministic"], env, f"{topic}[1]", "--to")
    _refused(["archive", f"nothing-here-{unique}", "--path", str(tmp_path / "a")], env, f"nothing-here-{unique}")
    _refused(["replay", target, "--archive", str(tmp_path), "--reader", "librdkafka", "--dry-run",
              "--allow-nondeterministic"], env, "--reader", "archive")

    svc = ServiceProcess(target, tmp_path, "0", env).start()
    services.append(svc)
    wait_until(lambda: bool(active_members({"bootstrap.servers": kafka_bootstrap}, pipeline.name)), 60,
               "the service joined its group", svc.log_text)
    _refused(["replay", target, "--bootstrap", "--dry-run", "--allow-nondeterministic"], env, "active member", "stop")
    assert svc.stop() == 0

    monkeypatch.setenv("FW_TEST_SUFFIX", f"{unique}-gone")
    _refused(["replay", target, "--allow-nondeterministic"], {**env, "FW_TEST_SUFFIX": f"{unique}-gone"},
             f"numbers-{unique}-gone")

    empty = tmp_path / "bin"
    empty.mkdir()
    no_tools = {**env, "PATH": str(empty), "JAVA_HOME": ""}
    _refused(["replay", target, "--dry-run", "--allow-nondeterministic"], {**no_tools, "FW_HOME": str(tmp_path / "c")},
             "Maven", "install")
    connector_jars()  # resolved (with the machine's Maven) into the usual cache: what is missing is Java
    _refused(["replay", target, "--allow-nondeterministic"], no_tools, "Java", "install")


# -- the order check: decided by the data -------------------------------------------------

def _keyed_by_parity(s: str) -> dict[str, list[tuple]]:
    """even_odd's numbers keyed by their parity: each parity in one partition of the source."""
    rows = [("even" if n % 2 == 0 else "odd", n) for n in range(1, 201)]
    return {f"numbers-{s}": [(partition_for(k.encode(), 4), k.encode(), json.dumps(v).encode()) for k, v in rows]}


def _nothing_committed(bootstrap: str, group: str, topics: list[str]) -> None:
    """``group`` has no offsets of ``topics`` committed, and no replay group of it exists."""
    for topic in topics:
        assert set(committed_offsets(bootstrap, group, topic).values()) <= {0}, topic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    groups = admin.list_consumer_groups(request_timeout=30).result().valid
    assert [g.group_id for g in groups if g.group_id.startswith(f"{group}-replay-")] == []


@pytest.mark.parametrize("reader", ["spark", "librdkafka", "archive"])
def test_a_key_fed_from_two_upstream_partitions_is_refused_before_anything_is_written(
        reader: str, kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """even_odd's numbers keyed by n % 7 over four partitions: each parity reaches the
    rolling sum from several of them. Without --allow-nondeterministic the backfill and
    bootstrap fail with one line naming the step, the keys and their upstream partitions,
    and nothing is written: no output (read_committed), no state, no committed offsets. The
    range is small: read from the topics, it is checked in the driver; an archive, by a Spark
    job (as a range of more than 100,000 records is)."""
    case = Case("even_odd", even_odd, reader="spark" if reader == "archive" else reader)
    target = f"tests.integration.pipelines:{case.target}"
    pipeline, env = prepare(case, kafka_bootstrap, unique, monkeypatch)
    source = f"numbers-{unique}"
    fed: dict[str, set[int]] = {"even": set(), "odd": set()}
    for partition, _, value, *poison in case.history(unique)[source]:
        if not poison:
            fed["even" if json.loads(value) % 2 == 0 else "odd"].add(partition)
    assert all(len(partitions) > 1 for partitions in fed.values())
    inputs = ["--reader", case.reader]
    if reader == "archive":
        archived = fw_replay(["archive", source, "--path", str(tmp_path / "archive"), "--master", "local[2]"], env)
        assert archived.returncode == 0, archived.stderr[-5000:]
        inputs = ["--archive", str(tmp_path / "archive")]

    done = fw_replay(["replay", target, *inputs, "--master", "local[2]", "--output", "topic", "--output-suffix",
                      "-refused", "--bootstrap"], env)
    keys = "; ".join(f'key "{parity}" from ' + ", ".join(f"{source}[{p}]" for p in sorted(fed[parity]))
                     for parity in ("even", "odd"))
    expected = (f"error: step 'sums' (a rolling aggregate) receives records of one key from several upstream "
                f"partitions ({keys}): live processing interleaves them by timing, so a replay cannot reproduce its "
                "intermediate outputs. Fix: key the input by the step's key before it is written, or pass "
                "--allow-nondeterministic to replay it anyway (what it reproduces: docs/replay.md)")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-5000:]
    shown = (done.stdout + done.stderr).splitlines()  # spark-submit passes the driver's stderr on to stdout
    assert expected in shown, done.stdout[-3000:]
    assert [line for line in shown if line.startswith("error:")] == [expected]
    assert "Traceback" not in done.stdout + done.stderr
    written = [f"{t}-refused" for t in output_topics(pipeline)]
    changelogs = [pipeline.changelog_topic(s) for s in pipeline.store_names()]
    assert {t: rs for t, rs in read_topics(kafka_bootstrap, written + changelogs).items() if rs} == {}
    _nothing_committed(kafka_bootstrap, pipeline.name, [source, pipeline.repartition_topic("parity")])
    # and the backfill's ledger forgot it: run again, it is refused again, not "continued"
    assert ledger.read_ledger({"bootstrap.servers": kafka_bootstrap}, pipeline.name) == []


def test_the_same_numbers_keyed_upstream_replay_as_the_live_run(kafka_bootstrap: str, unique: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                services: list[ServiceProcess]) -> None:
    """Each parity in one source partition: the check (in the driver: a small range) finds every
    key from one upstream partition, and the replay (no --allow-nondeterministic) writes the live run's outputs,
    each parity's running sums in the live order."""
    case = Case("even_odd", _keyed_by_parity)
    pipeline, env = prepare(case, kafka_bootstrap, unique, monkeypatch)
    run_live(case, kafka_bootstrap, pipeline, env, tmp_path, services)
    live = results(kafka_bootstrap, pipeline)

    done = fw_replay(["replay", f"tests.integration.pipelines:{case.target}", "--master", "local[2]", "--output",
                      "topic", "--output-suffix", "-keyed"], env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    # a small range: checked in the driver, without a Spark job of its own
    assert re.search(r"^\[replay\] checked the order of sums: each key from one upstream partition \(200 records "
                     r"read and run in the driver, \d+\.\d s\)$", done.stdout, re.MULTILINE), done.stdout
    replayed = results(kafka_bootstrap, pipeline, "-keyed")
    assert_same(pipeline, live, Results(replayed.outputs, live.state))
    sums = f"sums-{unique}"

    def by_key(res: Results) -> dict[bytes | None, list[bytes | None]]:
        out: dict[bytes | None, list[bytes | None]] = {}
        for r in sorted(res.outputs[sums], key=lambda r: (r.partition, r.offset)):
            out.setdefault(r.key, []).append(r.value)
        return out

    assert by_key(replayed) == by_key(live) and len(live.outputs[sums]) == 200


def test_an_empty_range_says_why_and_starts_no_spark(kafka_bootstrap: str, unique: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    pipeline, env = prepare(Case("even_odd", even_odd), kafka_bootstrap, unique, monkeypatch)
    target = "tests.integration.pipelines:even_odd"
    done = fw_replay(["replay", target, "--allow-nondeterministic", "--to", "committed", "--output", "topic",
                      "--output-suffix", "-empty"], env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        f"[replay] nothing to replay: --to committed ends where the group {pipeline.name} has committed, and it has "
        "committed nothing past the start (run the service first, or choose --to latest): "
        f"numbers-{unique}[0] at 0, "), done.stdout
    assert "Spark was not started" in done.stdout and "[replay] replay of" not in done.stdout
    latest = fw_replay(["replay", target, "--allow-nondeterministic", "--from", "latest"], env)
    assert latest.returncode == 0 and latest.stdout.startswith(
        "[replay] nothing to replay: --from latest and --to latest meet in every partition: "), latest.stdout
    existing = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=30).topics
    assert not [t for t in output_topics(pipeline) if f"{t}-empty" in existing]  # nothing made on the cluster
