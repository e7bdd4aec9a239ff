"""The replay's planning and its stage logic without Spark or a broker: stages per repartition
hop, the contract check, the plan as JSON, range times, the order of merged sources, and
the stages run in-process (``run_locally``) against the TestDriver on the same records, and
the spark-submit command."""

from __future__ import annotations

import io
import os
import random
import shutil
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import IO, Any, cast

import pytest
from confluent_kafka import KafkaError, TopicPartition

from framework import TumblingWindows, WatermarkStrategy
from framework.classdata import remove_unused
from framework.engine.partitioner import partition_for
from framework.engine.record import Record
from framework.errors import PipelineError
from framework.kafka.offsets import _Log, parse_time
from framework.pipeline import Pipeline, Topic
from framework.replay import submit
from framework.replay.daemon_path.fw_local_daemon import _installed_copies, prefer_installed
from framework.replay.launch import EXIT_MARK, JVM_NOISE, _Dropping, relay
from framework.replay.plan import (
    SMALL_RANGE,
    ReplayPlan,
    check_contract,
    choose_reader,
    definition_of,
    input_stages,
    stage_topics,
    store_stages,
)
from framework.replay.stage import StageOutput, merge_sources, merge_streams, run_locally
from framework.replay.submit import (
    LOCAL_DAEMON,
    LOCAL_JIT,
    LOG_CONFIG,
    ClassArchive,
    command,
    package,
)
from framework.serde import AvroSerde, StringSerde, load_schema
from framework.testing import TestDriver
from services.even_odd.pipeline import build_pipeline as even_odd
from tests.present import present


def test_each_repartition_hop_is_a_stage() -> None:
    p = even_odd("-x")
    assert stage_topics(p) == [["numbers-x"], [p.repartition_topic("parity")]]
    assert input_stages(p)[p.repartition_topic("parity")] == 1
    assert store_stages(p) == {"counts": 0, "sums": 1}


def test_the_contract_refuses_up_front_only_what_the_shape_decides() -> None:
    """Processing time and idleness are refused from the pipeline alone; an order-sensitive
    step after a repartition is not: the data decides it (tests/unit/test_replay_order.py)."""
    p = Pipeline("c")
    src = p.source(Topic("in"), name="in",
                   watermarks=WatermarkStrategy.bounded_out_of_orderness(10, timestamp="ts", idle_timeout_ms=1_000))
    src.count(name="per-key")
    src.key_by(lambda v: v["g"], name="by-g").count(name="rolling")
    src.window(TumblingWindows(1_000, clock="processing")).count(name="wall")
    issues = {i.step: i.reason for i in check_contract(p)}
    assert issues == {"in": "its idle timeout depends on the wall clock of live processing",
                      "wall": "processing-time windows fire on the wall clock"}


def test_a_step_reading_topics_of_two_stages_is_refused_with_the_fix() -> None:
    p = Pipeline("j")
    a = p.source(Topic("a"), name="a")
    b = p.source(Topic("b"), name="b").key_by(lambda v: v, name="by-v")
    a.union(b, name="both").count(name="n")
    with pytest.raises(PipelineError, match="re-key both inputs"):
        store_stages(p)


def test_a_plan_round_trips_through_json() -> None:
    plan = ReplayPlan(target="m:p", service="s", run_id="r", bootstrap_servers="b:1", partitions=4,
                      ranges={"t": {0: [0, 10], 3: [5, 7]}}, stages=[["t"]], output="topic", bootstrap=True,
                      definition="pipeline s")
    again = ReplayPlan.from_json(plan.to_json())
    assert again == plan
    assert again.ranges["t"][3] == [5, 7]


def test_the_definition_differs_when_the_environment_changed_the_topics() -> None:
    assert definition_of(even_odd("-a")) == definition_of(even_odd("-a"))
    assert definition_of(even_odd("-a")) != definition_of(even_odd("-b"))


@pytest.mark.parametrize("spec, ms", [
    ("1700000000000", 1_700_000_000_000),
    ("2026-11-01", 1_793_491_200_000),
    ("2026-11-01T00:00:00Z", 1_793_491_200_000),
    ("2026-11-01T01:00:00+01:00", 1_793_491_200_000),
    ("committed", None), ("t:0:5", None),
])
def test_range_times(spec: str, ms: int | None) -> None:
    assert parse_time(spec) == ms


class _AnsweringLate:
    """offsets_for_times as a broker whose leader for partition 1 is not known yet gives it:
    that partition's own error, then (asked again) every offset."""

    def __init__(self) -> None:
        self.asked = 0

    def offsets_for_times(self, tps: list[TopicPartition], timeout: float) -> list[SimpleNamespace]:
        self.asked += 1
        late = KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION)
        return [SimpleNamespace(topic=tp.topic, partition=tp.partition, offset=7, error=None)
                if self.asked > 1 or tp.partition != 1 else
                SimpleNamespace(topic=tp.topic, partition=tp.partition, offset=-1, error=late) for tp in tps]


def test_a_partition_without_its_leader_yet_is_asked_again_not_taken_as_past_its_time() -> None:
    """Its offset (-1, with the partition's error) once read as "no record at or after the
    time": the range would have started at the partition's end, skipping its records."""
    log = _Log.__new__(_Log)
    log.partitions, log.bounds, log.timeout_s = {"t": [0, 1]}, {("t", 0): (0, 9), ("t", 1): (0, 9)}, 10.0
    consumer = _AnsweringLate()
    log.consumer = cast(Any, consumer)  # a stand-in for confluent-kafka's Consumer: what at_time calls
    assert log.at_time(1_000) == {("t", 0): 7, ("t", 1): 7}
    assert consumer.asked == 2


def test_merged_sources_keep_each_topics_order_and_advance_together() -> None:
    a = [Record("a", 0, i, None, b"", ts) for i, ts in enumerate([10, 5, 30, 31])]
    b = [Record("b", 0, i, None, b"", ts) for i, ts in enumerate([20, 21, 1, 40])]
    merged = [(r.topic(), r.offset()) for r in merge_sources({"b": b, "a": a})]
    assert [o for t, o in merged if t == "a"] == [0, 1, 2, 3]
    assert [o for t, o in merged if t == "b"] == [0, 1, 2, 3]
    # by the largest timestamp seen so far in each topic: a@0,a@1 (10), b@0 (20), b@1, b@2 (21), a@2 (30) ...
    assert merged == [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("b", 2), ("a", 2), ("a", 3), ("b", 3)]


def test_merged_streams_give_the_same_order_in_lists_of_the_size_asked() -> None:
    """What a task reading its partitions itself (``--reader librdkafka``) merges: each topic
    a stream of lists, as they arrive; the order is ``merge_sources``' whatever the lists."""
    a = [Record("a", 0, i, None, b"", ts) for i, ts in enumerate([10, 5, 30, 31, 31, 50, 2])]
    b = [Record("b", 0, i, None, b"", ts) for i, ts in enumerate([20, 21, 1, 40, 41])]
    runs = list(merge_streams({"a": iter([a[:2], a[2:3], a[3:]]), "b": iter([b[:1], b[1:]])}, size=4))
    assert [len(r) for r in runs] == [4, 4, 4]
    assert [(r.topic(), r.offset()) for run in runs for r in run] == [
        (r.topic(), r.offset()) for r in merge_sources({"a": a, "b": b})]
    one = [a[:2], a[2:]]
    assert list(merge_streams({"a": iter(one)}, size=4)) == one  # one topic: its lists as they come


def test_the_stages_in_process_give_the_test_drivers_results() -> None:
    """The same records through ``run_locally`` (the Spark job's stage logic, no Spark) and
    through the TestDriver: each key's counts in the same order (one partition feeds them);
    the sums, fed by several upstream partitions, as many outputs and the same last sum per
    parity (the contract: their intermediate values depend on the interleaving)."""
    partitions, p = 3, even_odd("-t")
    serde, keys = AvroSerde(load_schema("demo.Number")), StringSerde()
    rng = random.Random(3)
    rows = [(f"k{rng.randrange(7)}", rng.randrange(-50, 50)) for _ in range(300)]

    driver = TestDriver(p, partitions=partitions)
    sources: dict[tuple[str, int], list[Record]] = {}
    for i, (k, n) in enumerate(rows):
        driver.pipe("numbers-t", {"n": n}, key=k, timestamp=1_000 + i)
        kb = keys.bind("numbers-t", True).serialize(k)
        part = partition_for(kb, partitions)
        mine = sources.setdefault(("numbers-t", part), [])
        mine.append(Record("numbers-t", part, len(mine), kb, serde.bind("numbers-t", False).serialize({"n": n}),
                           1_000 + i))
    plan = ReplayPlan(target="", service=p.name, run_id="u", bootstrap_servers="", partitions=partitions,
                      ranges={"numbers-t": {q: [0, len(sources.get(("numbers-t", q), []))] for q in range(partitions)}},
                      stages=stage_topics(p), output="parquet:/unused")
    out = run_locally(p, plan, sources)["out"]

    sinks = {t.name: t for t in p.sink_topics()}

    def replayed(topic: str) -> dict[object, list[object]]:
        kd = sinks[topic].key_serde.bind(topic, True).deserialize
        vd = sinks[topic].value_serde.bind(topic, False).deserialize
        got: dict[object, list[object]] = {}
        for r in out:
            if r.topic == topic:
                got.setdefault(kd(present(r.key)), []).append(vd(present(r.value)))
        return got

    def live(topic: str) -> dict[object, list[object]]:
        got: dict[object, list[object]] = {}
        for r in driver.output(topic):
            got.setdefault(r.key, []).append(r.value)
        return got

    assert replayed("number-counts-t") == live("number-counts-t")
    sums_live, sums_replay = live("even-odd-sums-t"), replayed("even-odd-sums-t")
    assert {k: len(v) for k, v in sums_replay.items()} == {k: len(v) for k, v in sums_live.items()}
    assert {k: v[-1] for k, v in sums_replay.items()} == {k: v[-1] for k, v in sums_live.items()}


def test_a_task_whose_outputs_all_go_out_has_its_steps_call_the_producer_under_the_renamed_topics() -> None:
    out = StageOutput(["sums-rp"], {"sums": "sums-x", "dead": "dead-x"}, 4, 0)
    assert out.route("sums") is None  # until the task knows every output is written: through produce
    counts: dict[str, int] = {}

    class Producer:  # what a KafkaOutput offers the task: its produce, its counts per topic
        produced = counts

        @staticmethod
        def produce(topic: str, *record: object) -> None:
            counts[topic] = counts.get(topic, 0) + 1

    producer = Producer.produce
    out.direct, out.sink = Producer(), producer  # type: ignore[assignment]
    assert out.route("sums") == (producer, "sums-x")
    assert out.route("sums-rp") is None  # a repartition topic's records stay rows of the next stage
    producer("sums-x", b"k", b"1", 5)  # as a sink step calls it
    out.produce("dead", b"k", None, 5)  # a dead letter still comes through produce
    out.produce("sums-rp", b"k", b"1", 5)
    assert out.count == 2 and counts == {"sums-x": 1, "dead-x": 1} and len(out.take_rows()) == 1


@pytest.mark.parametrize(("every", "interval_s", "commits"), [
    (10, 3_600.0, [10, 20, 23]),     # by records: at the first batch end at or past each 10 since the last
    (1_000, 0.0, [5, 10, 15, 20, 22, 23]),  # by time (here: at once): at every batch end
])
def test_a_backfill_task_commits_every_n_records_or_s_seconds_whichever_comes_first(
        every: int, interval_s: float, commits: list[int]) -> None:
    """A task's writer commits at batch ends (batches of 5 here), after ``commit_every``
    records or ``commit_interval_s`` seconds since its last commit; the last commit, one past
    the records, marks the task complete."""
    p = Pipeline("w")
    p.source(Topic("in"), name="in").map(lambda v: v, name="same").to(Topic("out"))
    records = [Record("in", 0, i, b'"k"', b'"v"', 1_000 + i) for i in range(22)]
    plan = ReplayPlan(target="", service="w", run_id="u", bootstrap_servers="", partitions=1,
                      ranges={"in": {0: [0, 22]}}, stages=stage_topics(p), batch_size=5, commit_every=every,
                      commit_interval_s=interval_s)
    positions: list[int] = []

    class Writer:  # a ResumableWriter's calls, recorded: nothing committed before
        @staticmethod
        def resume() -> int:
            return 0

        @staticmethod
        def commit(position: int) -> None:
            positions.append(position)

        @staticmethod
        def close() -> None:
            pass

    run_locally(p, plan, {("in", 0): records}, writer_for=lambda stage, pid: Writer())
    assert positions == commits


def test_arrow_batches_become_runs_of_records_per_task_with_their_headers_and_clocks() -> None:
    """What a Spark task's Python worker hands the task runner: each Arrow batch split into
    runs of one task's records, a carried clock on its own, headers decoded from the JSON
    column (a header without a value stays without), empty batches skipped."""
    import pyarrow as pa

    from framework.replay.job import _chunks, _decode_headers, _encode_headers
    from framework.replay.stage import Carry

    headers = [("origin", b"\x00\xffbin"), ("trace", None)]
    assert _decode_headers(_encode_headers(headers)) == headers  # type: ignore[arg-type]
    empty = pa.RecordBatch.from_pydict({"kind": pa.array([], pa.string()), "pid": pa.array([], pa.int64())})
    batch = pa.RecordBatch.from_pydict({
        "kind": ["rec", "rec", "clock", "rec"], "pid": [0, 0, 0, 1], "topic": ["t"] * 4,
        "offset": [7, 8, None, None], "key": [b"a", b"b", None, b"c"], "value": [b"1", b"2", b"clock", b"3"],
        "ts": [1, 2, 0, 3], "headers": [_encode_headers(headers), None, None, None]})
    runs = list(_chunks(iter([empty, batch])))
    assert [pid for pid, _ in runs] == [0, 0, 1]
    first, clock, last = (chunk for _, chunk in runs)
    assert isinstance(first, list) and [(r.key(), r.offset(), r.headers()) for r in first] == [
        (b"a", 7, list(headers)), (b"b", 8, None)]
    assert clock == Carry(b"clock")
    assert isinstance(last, list) and [(r.key(), r.value()) for r in last] == [(b"c", b"3")]


def test_rows_shuffled_between_stages_of_plain_rdd_jobs_become_runs_of_records_per_task() -> None:
    """A later stage of a plain RDD replay gets the earlier stage's rows sorted by task and merge
    key: each task's records in runs with their headers, offsets counting its input from 0 (as
    ``run_locally``), and its carried clock on its own."""
    from framework.replay.job import _shuffled_chunks
    from framework.replay.stage import Carry, Row

    def pair(row: Row) -> tuple[tuple[int, ...], tuple[object, ...]]:
        return (row.pid, row.k1, row.k2, row.k3), tuple(row)

    rows = [Row("next", 0, 5, 1, 0, "t", 0, b"a", b"1", 10, [("h", b"v")], None),
            Row("next", 0, 5, 2, 0, "t", 0, b"b", b"2", 11, None, None),
            Row("clock", 0, 2**62, 0, 0, None, 0, None, b"clock", 0, None, None),
            Row("next", 1, 5, 1, 1, "t", 1, b"c", b"3", 12, None, None)]
    runs = list(_shuffled_chunks(iter([pair(r) for r in rows]), SimpleNamespace(add=lambda n: None)))  # type: ignore[arg-type]
    assert [pid for pid, _ in runs] == [0, 0, 1]
    first, clock, last = (chunk for _, chunk in runs)
    assert isinstance(first, list) and [(r.topic(), r.key(), r.offset(), r.timestamp()[1], r.headers())
                                        for r in first] == [("t", b"a", 0, 10, [("h", b"v")]), ("t", b"b", 1, 11, None)]
    assert clock == Carry(b"clock")
    assert isinstance(last, list) and [(r.key(), r.offset()) for r in last] == [(b"c", 0)]


@pytest.mark.parametrize(("asked", "records", "archive", "reader"), [
    ("auto", SMALL_RANGE, False, "librdkafka"), ("auto", SMALL_RANGE + 1, False, "spark"),
    ("auto", 0, True, "spark"), ("spark", 10, False, "spark"), ("librdkafka", SMALL_RANGE * 2, False, "librdkafka")])
def test_the_automatic_reader_reads_a_small_range_of_topics_in_the_tasks(asked: str, records: int, archive: bool,
                                                                        reader: str) -> None:
    """``--reader auto``: the tasks read a range of at most ``SMALL_RANGE`` records themselves,
    Spark's source a larger one and an archive; a reader named is the one used."""
    ranges = {"a": {0: [5, 5 + records // 2]}, "b": {3: [0, records - records // 2]}}
    assert choose_reader(asked, ranges, archive) == reader


def _confs(cmd: list[str]) -> list[str]:
    return [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--conf"]


@pytest.mark.parametrize("master", ["local[*]", "local[2]", "local[2,3]"])
def test_a_local_replay_compiles_with_c1_unless_told_otherwise(master: str, tmp_path) -> None:
    def cmd(*confs: str) -> list[str]:
        return command(tmp_path / "plan.json", tmp_path / "deps.zip", [], master=master, confs=list(confs), name="x")

    assert _driver_options(cmd())[:1] == [LOCAL_JIT.partition("=")[2]]
    own = "spark.driver.extraJavaOptions=-Xss4m"
    assert _driver_options(cmd(own)) == ["-Xss4m", QUIET]  # the command's own, and the log configuration


def _driver_options(cmd: list[str]) -> list[str]:
    [options] = [c.partition("=")[2] for c in _confs(cmd) if c.startswith("spark.driver.extraJavaOptions=")] or [""]
    return options.split()


QUIET = f"-Dlog4j.configurationFile={LOG_CONFIG}"


def test_a_cluster_replay_keeps_the_jvms_own_compilers(tmp_path) -> None:
    cmd = command(tmp_path / "plan.json", tmp_path / "deps.zip", [], master="spark://127.0.0.1:7077", confs=[],
                  name="x")
    assert _driver_options(cmd) == [QUIET]


@pytest.mark.parametrize("master", ["local[*]", "spark://127.0.0.1:7077"])
def test_the_driver_logs_sparks_errors_only_unless_verbose(master: str, tmp_path) -> None:
    """The driver's JVM logs through the framework's log4j configuration (ERROR and up), with
    the command's own JVM options too; not with ``--verbose``, nor where a command names its
    own log4j configuration, nor for a driver that runs on the cluster (the file is not there)."""
    def cmd(*confs: str, verbose: bool = False) -> list[str]:
        return command(tmp_path / "plan.json", tmp_path / "deps.zip", [], master=master, confs=list(confs), name="x",
                       verbose=verbose)

    assert "rootLogger.level = error" in LOG_CONFIG.read_text()
    assert QUIET in _driver_options(cmd()) and QUIET not in _driver_options(cmd(verbose=True))
    assert not any(c.startswith("spark.log.level=") for c in _confs(cmd()) + _confs(cmd(verbose=True)))
    theirs = "spark.driver.extraJavaOptions=-Dlog4j.configurationFile=/etc/mine.properties"
    assert _driver_options(cmd(theirs)) == ["-Dlog4j.configurationFile=/etc/mine.properties"]
    assert QUIET not in _driver_options(cmd("spark.submit.deployMode=cluster"))


def _pipe(data: bytes) -> IO[bytes]:
    """The reading end of a pipe that held ``data`` and was closed (as a JVM's output is)."""
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    return os.fdopen(read, "rb")


def test_the_jvms_incubator_warning_is_not_relayed_and_everything_else_is() -> None:
    """``launch.relay`` drops the JVM's ``JVM_NOISE`` lines from stderr, wherever the pipe's
    chunks cut them, and copies every other byte as it came; the job's exit code ends it."""
    said = (b"WARNING: Using incubator modules: jdk.incubator.vector\nerror: a real one\n"
            b"WARNING: something else\nWARN")
    for drop, shown in ((JVM_NOISE, said.split(b"\n", 1)[1]), ((), said)):
        to_out, to_err = io.BytesIO(), io.BytesIO()
        with _pipe(said) as err, _pipe(f"[replay] done\n{EXIT_MARK} 0\n".encode()) as out:
            assert relay(out, err, to_out, to_err, drop=drop) == 0
        assert (to_out.getvalue(), to_err.getvalue()) == (b"[replay] done\n", shown)
    cut = io.BytesIO()
    dropping = _Dropping(cut, JVM_NOISE)
    for chunk in (b"WARNING: Using incu", b"bator modules: jdk.incubator.vector\nWARNING: U", b"sing it\n", b"ok"):
        dropping.write(chunk)
    dropping.close()
    assert cut.getvalue() == b"WARNING: Using it\nok"


@pytest.mark.parametrize("master", ["local[2]", "spark://127.0.0.1:7077"])
def test_the_driver_jvm_writes_its_class_archive_once_and_maps_it_after(master: str, tmp_path) -> None:
    archive = ClassArchive(tmp_path / "k.jsa", tmp_path / "k.jsa.7.tmp")

    def driver(*confs: str) -> list[str]:
        cmd = command(tmp_path / "plan.json", tmp_path / "deps.zip", [], master=master, confs=list(confs), name="x",
                      archive=archive)
        return [c.partition("=")[2] for c in _confs(cmd) if c.startswith("spark.driver.extraJavaOptions=")]

    [options] = driver()
    assert f"-XX:ArchiveClassesAtExit={archive.writing}" in options.split()
    assert ("-XX:TieredStopAtLevel=1" in options.split()) == master.startswith("local")
    archive.writing.write_bytes(b"written")
    archive.keep(True)
    assert archive.path.read_bytes() == b"written" and not archive.writing.exists()
    [options] = driver()
    assert f"-XX:SharedArchiveFile={archive.path}" in options.split()
    # the command's own options, with the log configuration only
    assert driver("spark.driver.extraJavaOptions=-Xss4m") == [f"-Xss4m -Dlog4j.configurationFile={LOG_CONFIG}"]
    assert not any("Archive" in o for o in driver("spark.submit.deployMode=cluster"))  # the driver runs elsewhere


def test_the_code_is_zipped_once_until_a_file_in_it_changes(tmp_path) -> None:
    (tmp_path / "schemas").mkdir()
    schema = tmp_path / "schemas" / "x.avsc"
    schema.write_text('"string"')
    into = tmp_path / "deps"
    first = package("framework.demos:x", into, tmp_path)
    made = first.stat().st_mtime_ns
    assert package("framework.demos:x", into, tmp_path) == first and first.stat().st_mtime_ns >= made
    with zipfile.ZipFile(first) as z:
        names = set(z.namelist())
    assert {"framework/__init__.py", "framework/__init__.pyc", "schemas/x.avsc"} <= names
    schema.write_text('"bytes"')
    second = package("framework.demos:x", into, tmp_path)
    assert second != first and sorted(into.iterdir()) == sorted([first, second])  # the other goes after 30 days


def test_what_was_not_used_for_its_days_is_removed(tmp_path) -> None:
    old_run, new_run, old_zip, kept = (tmp_path / n for n in ("0123456789", "abcdefabcd", "deps-1.zip", "deps-2.zip"))
    old_run.mkdir()
    (old_run / "plan.json").write_text("{}")
    new_run.mkdir()
    for f in (old_zip, kept):
        f.write_bytes(b"z")
    for f in (old_run, old_zip, kept):
        os.utime(f, (0, 0))
    remove_unused(tmp_path, days=1, named="[0-9a-f]{10}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["abcdefabcd", "deps-1.zip", "deps-2.zip"]
    remove_unused(tmp_path, days=30, keep=kept)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["abcdefabcd", "deps-2.zip"]


def test_a_failed_run_leaves_no_class_archive_and_a_new_one_leaves_other_keys_until_unused_for_14_days(
        tmp_path) -> None:
    other, unused, stale, running = (tmp_path / n for n in ("other.jsa", "unused.jsa", "k.jsa.5.tmp", "k.jsa.6.tmp"))
    for f in (other, unused, stale, running):
        f.write_bytes(b"x")
    os.utime(unused, (0, time.time() - 15 * 86_400))  # no run used it for 15 days
    os.utime(stale, (0, 0))  # left by a run killed long ago
    failed = ClassArchive(tmp_path / "k.jsa", tmp_path / "k.jsa.7.tmp")
    failed.writing.write_bytes(b"half")
    failed.keep(False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.jsa.6.tmp", "other.jsa"]
    done = ClassArchive(tmp_path / "k.jsa", tmp_path / "k.jsa.8.tmp")
    done.writing.write_bytes(b"whole")
    done.keep(True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.jsa", "k.jsa.6.tmp", "other.jsa"]


def test_of_two_runs_writing_one_archive_the_last_rename_wins_whole_and_a_run_using_it_keeps_it(tmp_path) -> None:
    first, second = (ClassArchive(tmp_path / "k.jsa", tmp_path / f"k.jsa.{pid}.tmp") for pid in (7, 8))
    first.writing.write_bytes(b"first")
    second.writing.write_bytes(b"second")
    first.keep(True)
    second.keep(True)
    assert [p.name for p in tmp_path.iterdir()] == ["k.jsa"] and first.path.read_bytes() == b"second"
    os.utime(first.path, (0, time.time() - 13 * 86_400))
    using = ClassArchive(tmp_path / "k.jsa", tmp_path / "k.jsa.9.tmp")
    assert f"-XX:SharedArchiveFile={using.path}" in using.options()
    using.keep(True)
    assert time.time() - using.path.stat().st_mtime < 86_400  # used: its 14 days start again


def _pyspark(root: Path, version: str = "4.2.0") -> Path:
    """An installation of pyspark as ``fw replay`` sees one: its package directory, Spark's
    jars inside."""
    (root / "jars").mkdir(parents=True)
    (root / "bin").mkdir()
    (root / "bin" / "spark-submit").write_text("#!/bin/sh\n")
    for name in ("spark-core_2.13.jar", "spark-sql_2.13.jar"):
        (root / "jars" / name).write_bytes(name.encode() + version.encode())
    return root


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache of its own (``FW_HOME``) and a Java (``JAVA_HOME``) for the class archive."""
    (tmp_path / "java" / "bin").mkdir(parents=True)
    (tmp_path / "java" / "bin" / "java").write_text("#!/bin/sh\n")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "java"))
    monkeypatch.setenv("FW_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(submit, "spark_version", lambda: "4.2.0")
    return tmp_path


def _launch(monkeypatch: pytest.MonkeyPatch, installed: Path) -> Path:
    monkeypatch.setattr(submit, "spark_home", lambda: installed)
    return submit.spark_launch_home()


def test_two_virtualenvs_with_the_same_spark_share_one_class_archive(machine: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Two installations of one pyspark are each their own files (their own modification
    times), which Java would not accept for one archive; both launch Spark from one set of
    jars, and so name one archive, each with its own scripts."""
    one, two = _pyspark(machine / "venv-1" / "pyspark"), _pyspark(machine / "venv-2" / "pyspark")
    os.utime(two / "jars" / "spark-sql_2.13.jar", (0, 0))
    connector = [machine / "spark-sql-kafka.jar"]
    connector[0].write_bytes(b"kafka")
    homes = [_launch(monkeypatch, installed) for installed in (one, two)]
    assert homes[0] != homes[1]
    assert [(h / "bin").resolve() for h in homes] == [one / "bin", two / "bin"]
    assert (homes[0] / "jars").resolve() == (homes[1] / "jars").resolve()
    archives = [submit.class_archive(connector, h) for h in homes]
    assert archives[0] is not None and archives[1] is not None and archives[0].path == archives[1].path
    own = submit.class_archive(connector, one)  # the installation's own jars: other files, another archive
    assert own is not None and own.path != archives[0].path
    assert _launch(monkeypatch, one) == homes[0]  # made once


@pytest.mark.parametrize("change", ["java", "spark", "connector"])
def test_another_java_spark_or_connector_names_another_class_archive(change: str, machine: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    connector = machine / "spark-sql-kafka.jar"
    connector.write_bytes(b"kafka")
    before = submit.class_archive([connector], _launch(monkeypatch, _pyspark(machine / "venv" / "pyspark")))
    if change == "java":
        os.utime(machine / "java" / "bin" / "java", (0, 0))  # another build in its place
        home = _launch(monkeypatch, machine / "venv" / "pyspark")
    elif change == "spark":
        monkeypatch.setattr(submit, "spark_version", lambda: "4.2.1")
        home = _launch(monkeypatch, _pyspark(machine / "other" / "pyspark", "4.2.1"))
    else:
        home = _launch(monkeypatch, machine / "venv" / "pyspark")
        connector.write_bytes(b"kafka 2")
    after = submit.class_archive([connector], home)
    assert before is not None and after is not None and after.path != before.path


def test_a_shared_spark_unused_for_14_days_is_removed_and_made_again_when_needed(
        machine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = _launch(monkeypatch, _pyspark(machine / "old" / "pyspark", "4.1.0"))
    for made in (old, (old / "jars").resolve()):
        os.utime(made, (0, time.time() - 15 * 86_400))
    current = _launch(monkeypatch, _pyspark(machine / "venv" / "pyspark"))
    assert sorted(p.name for p in current.parent.iterdir()) == [current.name]
    assert [p.name for p in (current / "jars").resolve().parent.iterdir()] == [(current / "jars").resolve().name]
    shutil.rmtree((current / "jars").resolve())
    assert sorted(p.name for p in (_launch(monkeypatch, machine / "venv" / "pyspark") / "jars").iterdir()) == [
        "spark-core_2.13.jar", "spark-sql_2.13.jar"]


@pytest.mark.parametrize("master", ["local[*]", "local[1]", "local[2,3]"])
def test_a_local_replays_workers_start_from_the_daemon_that_imports_the_installed_pyspark(master: str,
                                                                                            tmp_path) -> None:
    def confs(*own: str) -> list[str]:
        return _confs(command(tmp_path / "plan.json", tmp_path / "deps.zip", [], master=master, confs=list(own),
                              name="x"))

    ours = [f"spark.python.daemon.module={LOCAL_DAEMON.stem}", f"spark.executorEnv.PYTHONPATH={LOCAL_DAEMON.parent}"]
    assert all(c in confs() for c in ours) and LOCAL_DAEMON.is_file()
    for own in ("spark.executorEnv.PYTHONPATH=/opt/lib", "spark.python.daemon.module=pyspark.daemon",
                "spark.python.use.daemon=false"):
        assert not any(c in confs(own) for c in ours) and own in confs(own)
    cluster = command(tmp_path / "plan.json", tmp_path / "deps.zip", [], master="spark://127.0.0.1:7077", confs=[],
                      name="x")
    assert not any(c.startswith("spark.python.daemon.module") for c in _confs(cluster))


def _package(root: Path, name: str, version: str | None = None) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text("")
    if version:
        (root / name / "version.py").write_text(f"__version__ = '{version}'\n")


def _zip(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("pyspark/__init__.py", "")
    return str(path)


def test_the_daemon_drops_only_sparks_zips_of_the_installed_packages(tmp_path) -> None:
    site = tmp_path / "site-packages"
    _package(site, "pyspark")
    _package(site, "py4j", "0.10.9.9")
    lib = site / "pyspark" / "python" / "lib"
    own, py4j = _zip(lib / "pyspark.zip"), _zip(lib / "py4j-0.10.9.9-src.zip")
    older_py4j = _zip(lib / "py4j-0.10.9.7-src.zip")
    elsewhere = _zip(tmp_path / "spark-home" / "python" / "lib" / "pyspark.zip")
    assert _installed_copies([own, py4j, str(site)]) == [own, py4j]
    assert _installed_copies([older_py4j, str(site)]) == []  # another py4j than the one installed
    assert _installed_copies([elsewhere, str(site)]) == []  # a Spark of its own: not the installed package
    assert _installed_copies([own, py4j]) == []  # no pyspark installed: Spark's zips are all there is


def test_the_driver_and_the_daemon_import_the_installed_pyspark_and_a_path_they_cannot_read_stays(
        tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    site = tmp_path / "site-packages"
    _package(site, "pyspark")
    _package(site, "py4j", "0.10.9.9")
    own = _zip(site / "pyspark" / "python" / "lib" / "pyspark.zip")
    path = [str(tmp_path / "deps.zip"), own, str(site)]
    prefer_installed(path)
    assert path == [str(tmp_path / "deps.zip"), str(site)]  # changed in place: it is sys.path
    odd: list[str] = [own, None, str(site)]  # type: ignore[list-item]
    prefer_installed(odd)
    assert odd == [own, None, str(site)]
    assert capsys.readouterr().err.startswith("fw_local_daemon: pyspark from Spark's zip (")


class _Spark:
    """What ``_Progress`` asks of the SparkContext: its conf and a status tracker (one stage, 1 of 4
    tasks done)."""

    def getConf(self) -> dict[str, str]:  # pyspark's name
        return {}

    def statusTracker(self) -> SimpleNamespace:  # pyspark's name
        return SimpleNamespace(getActiveStageIds=lambda: [0],
                               getStageInfo=lambda _: SimpleNamespace(numCompletedTasks=1, numTasks=4))


@pytest.mark.parametrize("shown", ["terminal", "lines"])
def test_progress_refreshes_one_line_in_place_on_a_terminal_and_prints_lines_otherwise(
        shown: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from framework.replay.job import _Progress

    monkeypatch.setenv("FW_REPLAY_PROGRESS", shown)
    progress = _Progress(_Spark(), "stage 0", total=5_000)  # type: ignore[arg-type]
    progress.counts = {"0:0:0": 700, "0:1:0": 300, "0:1:1": 500}  # task 1 retried: its latest attempt counts
    line = progress.line(2.0)
    assert line == ("[replay] stage 0: 1,200 of 5,000 records (24%), 3,800 remaining, 600 records/s, "
                    "about 6 s left, Spark tasks 1/4 done, 2 s")
    progress._show(line)
    progress._show(line)
    progress.sock.close()
    progress.stop()
    out = capsys.readouterr().out
    if shown == "terminal":
        assert out == f"\r{line}\x1b[K\r{line}\x1b[K\r\x1b[K"
    else:
        assert out == f"{line}\n{line}\n"


def test_the_end_of_a_stage_wakes_the_progress_thread_waiting_for_a_report() -> None:
    """``stop`` does not wait for the thread's wait for a task's report to run out: it wakes
    it (here the wait would never end)."""
    from framework.replay.job import _Progress

    progress = _Progress(_Spark(), "stage 0", total=10)  # type: ignore[arg-type]
    progress.sock.settimeout(None)
    progress.start()
    progress.stop()
    assert not progress.is_alive()


def test_progress_of_a_stage_of_unknown_size_says_what_it_read() -> None:
    from framework.replay.job import _Progress

    progress = _Progress(_Spark(), "stage 1")  # type: ignore[arg-type]
    progress.counts = {"1:0:0": 10}
    progress.sock.close()
    assert progress.line(5.0) == "[replay] stage 1: 10 records read, 2 records/s, Spark tasks 1/4 done, 5 s"


def test_the_command_tells_the_job_whether_its_output_is_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FW_REPLAY_PROGRESS", raising=False)
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    assert submit.environment()["FW_REPLAY_PROGRESS"] == "terminal"
    monkeypatch.setattr("sys.stdout.isatty", lambda: False)
    assert submit.environment()["FW_REPLAY_PROGRESS"] == "lines"
    monkeypatch.setenv("FW_REPLAY_PROGRESS", "terminal")  # the user's own choice stays
    assert submit.environment()["FW_REPLAY_PROGRESS"] == "terminal"


def test_the_schemas_of_a_py_files_zip_are_unpacked_once_per_set_and_shared(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Python worker of a replay looks for the schemas shipped in its py-files zip: they
    share one directory per set of schemas instead of leaving one of their own each, and a
    changed schema gets a directory of its own."""
    from framework.replay.job import _unpack_schemas

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()

    def unpacked(name: str, text: str) -> Path:
        archive = tmp_path / name
        with zipfile.ZipFile(archive, "w") as z:
            z.writestr("schemas/a.avsc", text)
            z.writestr("framework/__init__.py", "")
        monkeypatch.setattr("sys.path", [str(archive)])
        monkeypatch.setenv("FW_SCHEMAS_DIR", "")  # none yet (and the one set below undone at the end)
        _unpack_schemas()
        return Path(os.environ["FW_SCHEMAS_DIR"])

    first = unpacked("one.zip", '{"type": "string"}')
    assert (first / "a.avsc").read_text() == '{"type": "string"}'
    assert unpacked("two.zip", '{"type": "string"}') == first
    changed = unpacked("three.zip", '{"type": "long"}')
    assert changed != first and (changed / "a.avsc").read_text() == '{"type": "long"}'
    assert sorted(p.name for p in (tmp_path / "tmp").iterdir()) == sorted([first.parent.name, changed.parent.name])
