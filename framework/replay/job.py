"""The Spark job of ``fw replay`` (and ``fw archive``, and ``fw savepoint create --master``:
``snapshot``): ``spark-submit job.py <plan.json> [mode]``.

Stage 0 reads the source ranges with Spark's Kafka batch source (committed records only,
headers included), or a Parquet archive, or (``--reader librdkafka``) gives each task only
its ranges and the task reads them itself; each stage runs its tasks with ``mapInArrow``
(``framework.replay.stage``), one partition number after the other within a Spark partition
(a replay whose tasks read their ranges and write no Parquet, of one stage or a small range,
runs them over plain RDDs instead, without Spark SQL: ``_plain_rdd``); its ``next`` rows are
shuffled by the framework's partitioner and sorted on their merge key for the next stage.
Nothing is collected to the driver but each task's counters (and the few keys an order check
refuses: ``check_order``; the order check of a small range reads and runs it in the driver). A Kafka backfill and a bootstrap write from the tasks themselves,
through ``ResumableWriter``: a retried or recomputed Spark task writes nothing twice.

This is the only module (with the rest of ``framework/replay`` it is shipped with) that
imports pyspark.
"""

from __future__ import annotations

import base64
import dataclasses
import gc
import hashlib
import itertools
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from framework.replay.daemon_path.fw_local_daemon import prefer_installed

# Spark puts its zip of pyspark first on the driver's path, and Python compiles every module it
# imports from a zip again in every process: the installed copy (the same code, its bytecode
# compiled at install) when the zip is that package's (fw_local_daemon's docstring).
prefer_installed(sys.path)

from pyspark import RDD, SparkConf, SparkContext, StorageLevel  # after the path's fix
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from framework.config import Config
from framework.engine.record import Record
from framework.errors import FrameworkError, PipelineError
from framework.replay.order import (
    SHOWN,
    OrderCheck,
    origin_names,
    planned_checks,
    refusal,
    upstream,
)
from framework.replay.plan import ReplayPlan, definition_of, summary
from framework.replay.stage import Carry, Row, StageTask, quiet_tasks

if TYPE_CHECKING:
    import pyarrow as pa

# The rows a stage returns, as Arrow types. pyarrow is imported where Arrow batches are made:
# a task over a plain RDD (``_plain_rdd``) makes none, and its Python worker starts 0.1 s
# sooner without it.
ROW_TYPES = [
    ("kind", "string"), ("pid", "int64"), ("k1", "int64"), ("k2", "int64"), ("k3", "int64"), ("topic", "string"),
    ("partition", "int64"), ("key", "binary"), ("value", "binary"), ("ts", "int64"), ("headers", "string"),
    ("text", "string"),
]
SPARK_SCHEMA = ("kind string, pid long, k1 long, k2 long, k3 long, topic string, partition long, key binary, "
                "value binary, ts long, headers string, text string")
# Between the JVM and the Python workers, headers travel as one JSON string (Spark's
# ``to_json``: values in base64), null when a record has none: a nested array<struct> column
# costs Spark a walk of its vectors for every row it adds to an Arrow batch, headers or not.
KAFKA_HEADERS = "array<struct<key:string,value:binary>>"
_OUT_BATCH = 4_096
_TIMES = ("seconds", "began_ms", "ended_ms")  # a task's stats that are not counters


# -- executors -----------------------------------------------------------------------------

_READY: dict[str, Any] = {}


def _setup(plan_json: str) -> tuple[ReplayPlan, Any]:
    """Once per Python worker: the plan, the schemas shipped in the py-files, the pipeline."""
    if "plan" not in _READY:
        plan = ReplayPlan.from_json(plan_json)
        _READY["plan"], _READY["pipeline"] = plan, _pipeline(plan)
        # What is alive now (pyspark's, pandas' and pyarrow's modules, the pipeline) leaves
        # the garbage collector's walks: the records keep full collections running, and each
        # walked all of it again. A task took 4% less time (benchmarks/NOTES.md). The live
        # service does not do this: there it measured within the noise, W2 and W4 perhaps lower.
        gc.collect()
        gc.freeze()
    return _READY["plan"], _READY["pipeline"]


def _pipeline(plan: ReplayPlan) -> Any:
    """The plan's pipeline, imported here (the schemas shipped in the py-files unpacked first)
    and checked to be the one ``fw replay`` planned with."""
    _unpack_schemas()
    from framework.pipeline.loading import load_pipeline

    pipeline = load_pipeline(plan.target)
    if plan.definition and definition_of(pipeline) != plan.definition:
        raise PipelineError(
            f"{plan.target} imported on this executor is not the pipeline fw replay planned "
            f"({definition_of(pipeline).splitlines()[0]} here, {plan.definition.splitlines()[0]} there). Fix: "
            "give the executors what the pipeline reads from its environment "
            "(--conf spark.executorEnv.NAME=value)")
    return pipeline


def _unpack_schemas() -> None:
    """The ``schemas/`` shipped inside a py-files zip, extracted where ``load_schema`` looks: one
    directory in the temporary directory per set of schemas (named by their checksums), which
    every Python worker of every replay with the same schemas shares rather than leaving one of
    its own behind."""
    if os.environ.get("FW_SCHEMAS_DIR") and Path(os.environ["FW_SCHEMAS_DIR"]).is_dir():
        return
    for entry in sys.path:
        if entry.endswith(".zip") and os.path.isfile(entry):
            with zipfile.ZipFile(entry) as z:
                infos = sorted((i for i in z.infolist() if i.filename.startswith("schemas/")
                                and i.filename.endswith(".avsc")), key=lambda i: i.filename)
                if not infos:
                    continue
                digest = hashlib.sha256("".join(f"{i.filename}:{i.CRC}:{i.file_size};" for i in infos).encode())
                target = Path(tempfile.gettempdir()) / f"fw-schemas-{digest.hexdigest()[:16]}"
                if not target.is_dir():
                    part = Path(tempfile.mkdtemp(prefix=f"{target.name}.", dir=target.parent))
                    z.extractall(part, [i.filename for i in infos])
                    try:
                        part.rename(target)  # whole or not at all: a worker never reads a half-written one
                    except OSError:  # another worker's came first
                        shutil.rmtree(part, ignore_errors=True)
                os.environ["FW_SCHEMAS_DIR"] = str(target / "schemas")
                return


def _kafka_settings(plan: ReplayPlan) -> dict[str, Any]:
    """The cluster, with the security settings of this machine's environment (never the plan)."""
    security = dict(Config.load().kafka.security)
    return {"bootstrap.servers": plan.bootstrap_servers, **security}


class _Reporter:
    """A task's records read so far, sent to the driver's progress listener at most once a
    second (UDP: a lost report costs nothing but a stale progress line)."""

    def __init__(self, address: tuple[str, int] | None, stage: int) -> None:
        import socket

        from pyspark import TaskContext

        context = TaskContext.get()
        self.address, self.read, self.last = address, 0, 0.0
        self.id = f"{stage}:{context.partitionId() if context else 0}:{context.attemptNumber() if context else 0}"
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM) if address else None

    def add(self, n: int) -> None:
        self.read += n
        now = time.monotonic()
        if self.sock is not None and self.address is not None and now - self.last >= 1.0:
            self.last = now
            try:
                self.sock.sendto(f"{self.id} {self.read}".encode(), self.address)
            except OSError:
                pass


def _chunks(batches: Iterator[pa.RecordBatch], report: _Reporter | None = None
            ) -> Iterator[tuple[int, list[Record] | Carry]]:
    """The input as ``(task, records)`` runs, one per task within each Arrow batch (the input
    is sorted by task), and ``(task, clock)``; records of a repartition topic take their
    position as offset."""
    counter = itertools.count()
    for b in batches:
        if b.num_rows == 0:
            continue
        if report is not None:
            report.add(b.num_rows)
        cols = b.to_pydict()
        pids, kinds = cols["pid"], cols["kind"]
        start = 0
        for end in _runs(pids if "clock" not in kinds else list(zip(pids, kinds))):
            pid = pids[start]
            if kinds[start] == "clock":  # a task's clock: one per upstream task, after its records
                for clock in cols["value"][start:end]:
                    yield pid, Carry(clock)
            else:
                yield pid, [Record(t, pid, next(counter) if o is None else o, k, v, ts,
                                   _decode_headers(h) if h else None)
                            for t, o, k, v, ts, h in zip(cols["topic"][start:end], cols["offset"][start:end],
                                                         cols["key"][start:end], cols["value"][start:end],
                                                         cols["ts"][start:end], cols["headers"][start:end])]
            start = end


def _read_ranges(tasks: Iterator[tuple[int, str]], plan: ReplayPlan, report: _Reporter
                 ) -> Iterator[tuple[int, list[Any]]]:
    """``--reader librdkafka``: the input is ``(task, its source ranges as JSON)``; the task
    reads them itself through the framework's Kafka client (``read_range``), and hands the
    messages on as the live service's consumer does."""
    from framework.kafka.clients import read_range
    from framework.replay.stage import merge_streams

    settings = _kafka_settings(plan)
    group = plan.marker_group  # assigned, never joined: nothing is committed by a reader
    for pid, ranges in tasks:
        streams = {topic: read_range(settings, group, topic, pid, start, end, batch=plan.batch_size)
                   for topic, (start, end) in json.loads(ranges).items()}
        for run in merge_streams(streams, plan.batch_size):
            report.add(len(run))
            yield pid, run


def _global_reader(plan: ReplayPlan) -> Any:
    """How a task reads a global table's partition range: through the framework's Kafka
    client, whatever ``--reader`` stage 0 uses (every task that joins it reads it whole)."""
    from framework.kafka.clients import read_range

    settings = _kafka_settings(plan)

    def read(topic: str, partition: int, start: int, end: int) -> Iterator[list[Any]]:
        return read_range(settings, plan.marker_group, topic, partition, start, end, batch=plan.batch_size)

    return read


def _range_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[int, str]]:
    """The ``(task, ranges)`` rows of ``_range_frame``'s Arrow batches."""
    for b in batches:
        yield from zip(b.column("pid").to_pylist(), b.column("ranges").to_pylist())


def _runs(keys: list[Any]) -> list[int]:
    """Where each run of equal keys ends (usually one run: a batch of one task's records).
    The one-run check first: walking every batch pairwise cost 0.6 µs a record (measured,
    W1 records), 7% of a task's Python time."""
    if keys[0] == keys[-1] and len(set(keys)) == 1:
        return [len(keys)]
    return [i for i in range(1, len(keys)) if keys[i] != keys[i - 1]] + [len(keys)]


def _decode_headers(text: str) -> list[tuple[str, bytes]]:
    # a header without a value stays None, as the live consumer hands it to the runner
    return [(h["key"], None if h.get("value") is None else base64.b64decode(h["value"]))  # type: ignore[misc]
            for h in json.loads(text)]


def _encode_headers(headers: list[tuple[str, bytes | None]]) -> str:
    return json.dumps([{"key": k} if v is None else {"key": k, "value": base64.b64encode(v).decode()}
                       for k, v in headers])


_TOPIC, _KEY, _VALUE, _TS, _HEADERS = (Row._fields.index(f) for f in ("topic", "key", "value", "ts", "headers"))


def _arrow_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([(name, getattr(pa, kind)()) for name, kind in ROW_TYPES])


def _batch(rows: list[Row], schema: pa.Schema) -> pa.RecordBatch:
    import pyarrow as pa

    columns: list[Any] = list(zip(*rows))
    if any(columns[_HEADERS]):
        columns[_HEADERS] = [_encode_headers(h) if h else None for h in columns[_HEADERS]]
    return pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, schema)], schema=schema)


def _run_tasks(plan: ReplayPlan, pipeline: Any, stage: int,
               chunks: Iterator[tuple[int, list[Record] | Carry]]) -> Iterator[Row]:
    """Each task's rows, the tasks one after the other (``chunks`` come sorted by task)."""
    for pid, group in itertools.groupby(chunks, key=lambda chunk: chunk[0]):
        task = StageTask(pipeline, plan, stage, pid, _writer(plan, stage, pid), plan.output.startswith("parquet"),
                         _injected_fault(stage, pid), _injected_fault(stage, pid, "FW_REPLAY_HOLD"),
                         _global_reader(plan) if plan.global_ranges else None)
        try:
            yield from task.run(chunk for _, chunk in group)
        finally:
            task.close()


def stage_function(plan_json: str, stage: int, progress: tuple[str, int] | None = None, dry: bool = False) -> Any:
    """The ``mapInArrow`` function of ``stage``: its input is sorted by partition number.
    ``progress``: where the driver listens for the tasks' record counts (UDP). ``dry``: the
    tasks write nothing (no outputs, no state), for the order check (``check_order``)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        plan, pipeline = _setup(plan_json)
        if dry:  # a copy: the worker's cached plan is the run's
            plan = dataclasses.replace(plan, output="none", bootstrap=False)
        schema = _arrow_schema()
        report = _Reporter(progress, stage)
        chunks = (_read_ranges(_range_rows(batches), plan, report) if stage == 0 and plan.reads_in_tasks
                  else _chunks(batches, report))
        rows: list[Row] = []
        with quiet_tasks(dry):
            for row in _run_tasks(plan, pipeline, stage, chunks):
                rows.append(row)
                if len(rows) >= _OUT_BATCH:
                    yield _batch(rows, schema)
                    rows = []
        if rows:
            yield _batch(rows, schema)

    return run


def rdd_function(plan_json: str, stage: int, progress: tuple[str, int] | None = None) -> Any:
    """The function of ``stage`` in a replay of plain RDD jobs (``_plain_rdd``): its input is
    stage 0's ``(task, ranges)``, one task per Spark partition, or a later stage's
    ``(merge key, row)`` pairs, sorted (``_next_rdd``); its output the tasks' rows as tuples:
    ``next`` and ``clock`` rows for the next stage, and each task's ``stats``."""

    def run(items: Iterator[Any]) -> Iterator[tuple[Any, ...]]:
        plan, pipeline = _setup(plan_json)
        report = _Reporter(progress, stage)
        chunks = _read_ranges(items, plan, report) if stage == 0 else _shuffled_chunks(items, report)
        for row in _run_tasks(plan, pipeline, stage, chunks):
            if row.kind == "out":  # kept for Parquet only, which a plain RDD replay does not write
                raise PipelineError(f"a replay task of stage {stage} returned an output row")
            yield tuple(row)

    return run


def _shuffled_chunks(pairs: Iterator[tuple[Any, tuple[Any, ...]]], report: _Reporter
                     ) -> Iterator[tuple[int, list[Record] | Carry]]:
    """``_chunks`` of the previous stage's rows as ``_next_rdd`` hands them on: ``(task,
    records)`` runs and ``(task, clock)``; a record takes its position in its task's input as
    offset (as ``stage.run_locally`` gives it)."""
    for pid, group in itertools.groupby(pairs, key=lambda pair: pair[0][0]):
        counter = itertools.count()
        run: list[Record] = []
        for _, row in group:
            if row[0] == "clock":
                yield from _flushed(pid, run, report)
                run = []
                yield pid, Carry(row[_VALUE])
                continue
            run.append(Record(row[_TOPIC], pid, next(counter), row[_KEY], row[_VALUE], row[_TS], row[_HEADERS]))
            if len(run) >= _OUT_BATCH:
                yield from _flushed(pid, run, report)
                run = []
        yield from _flushed(pid, run, report)


def _flushed(pid: int, run: list[Record], report: _Reporter) -> Iterator[tuple[int, list[Record]]]:
    if run:
        report.add(len(run))
        yield pid, run


def _injected_fault(stage: int, pid: int, name: str = "FW_REPLAY_FAULT") -> int | None:
    """``FW_REPLAY_FAULT=<stage>:<task>:<outputs>[,...]``, for tests: the first attempt of
    that task fails after writing that many outputs (with ``local[N,F]`` or
    spark.task.maxFailures > 1, Spark runs it again). ``FW_REPLAY_HOLD``, the same form: the
    task stops there, once those outputs are committed, until the job is killed."""
    spec = os.environ.get(name, "")
    if not spec:
        return None
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is not None and context.attemptNumber() > 0:
        return None
    for fault in spec.split(","):
        s, p, n = (int(x) for x in fault.split(":"))
        if (s, p) == (stage, pid):
            return n
    return None


def _writer(plan: ReplayPlan, stage: int, pid: int) -> Any:
    if plan.output != "topic" and not plan.bootstrap:
        return None
    from framework.kafka.writer import ResumableWriter

    return ResumableWriter(_kafka_settings(plan), f"{plan.marker_group}-{stage}-{pid}",
                           plan.marker_group, (plan.stages[stage][0], pid),
                           producer=plan.producer, limits={t: (b, a) for t, (b, a) in plan.limits.items()})


# -- the driver ----------------------------------------------------------------------------


def _kafka_frame(spark: SparkSession, plan: ReplayPlan) -> DataFrame:
    """The plan's source ranges from Spark's Kafka batch source: committed records only,
    headers included, one Spark partition per Kafka partition; the cluster's security settings
    (this environment's, as the tasks') as the Java client takes them."""
    from framework.kafka.java import java_security

    starts = {t: {str(p): r[0] for p, r in parts.items()} for t, parts in plan.ranges.items()}
    ends = {t: {str(p): r[1] for p, r in parts.items()} for t, parts in plan.ranges.items()}
    security = java_security(Config.load().kafka.security, "Spark's Kafka source")
    return (spark.read.format("kafka").options(**{f"kafka.{k}": v for k, v in security.items()})
            .option("kafka.bootstrap.servers", plan.bootstrap_servers)
            .option("assign", json.dumps({t: sorted(parts) for t, parts in plan.ranges.items()}))
            .option("startingOffsets", json.dumps(starts)).option("endingOffsets", json.dumps(ends))
            .option("includeHeaders", "true").option("kafka.isolation.level", "read_committed").load())


def _range_frame(spark: SparkSession, plan: ReplayPlan) -> DataFrame:
    """``--reader librdkafka``: one row per task, in a Spark partition of its own, with its
    source ranges (``{topic: [start, end)}``) as JSON: the task reads them itself. Built in the
    JVM (``spark.range`` and literals): a frame of Python rows is a Python RDD, which starts
    Python workers of its own before the first task can run."""
    tasks = _task_ranges(plan)
    if not tasks:
        return spark.createDataFrame([], "pid long, ranges string")
    pids, ranges = zip(*tasks)
    row = (F.col("id") + 1).cast("int")  # spark.range's n rows in n partitions: row i alone in partition i
    return spark.range(0, len(pids), 1, len(pids)).select(
        F.element_at(F.array(*[F.lit(p) for p in pids]), row).cast("long").alias("pid"),
        F.element_at(F.array(*[F.lit(r) for r in ranges]), row).alias("ranges"))


def _task_ranges(plan: ReplayPlan) -> list[tuple[int, str]]:
    """Each task's source ranges (``{topic: [start, end)}``) as JSON, by task."""
    pids = sorted({p for parts in plan.ranges.values() for p in parts})
    return [(p, json.dumps({t: parts[p] for t, parts in sorted(plan.ranges.items()) if p in parts})) for p in pids]


def _plain_rdd(plan: ReplayPlan) -> bool:
    """Whether the replay runs as plain RDD jobs, without Spark SQL: its tasks read their own
    ranges (``--reader librdkafka``) and return nothing but their counters and the next stage's
    rows (they write to topics or nowhere, not to Parquet), and it has one stage or a small
    range (``ReplayPlan.small``). Spark SQL's session, and its planning of a frame and of its
    Arrow function, cost a replay 2.3 s before its first record (benchmarks/NOTES.md). Between
    stages the rows then go through Python's pickling and sorting instead of the JVM's, which
    a larger range leaves to Spark SQL."""
    return (plan.reads_in_tasks and not plan.output.startswith("parquet:")
            and (len(plan.stages) == 1 or plan.small))


def _source_frame(spark: SparkSession, plan: ReplayPlan) -> DataFrame:
    """Stage 0's input, sorted by task and, within it, in an order live processing could read."""
    if plan.reads_in_tasks:
        return _range_frame(spark, plan)
    topics = sorted(plan.ranges)
    if plan.archive:
        df = spark.read.parquet(plan.archive)
    else:
        df = _kafka_frame(spark, plan)
    df = df.select(F.lit("rec").alias("kind"), F.col("partition").cast("long").alias("pid"), "topic",
                   F.col("offset").cast("long").alias("offset"), "key", "value",
                   F.unix_millis("timestamp").alias("ts"),
                   F.when(F.size("headers") > 0, F.to_json("headers")).alias("headers"))
    if len(topics) == 1 and not plan.archive:
        return df  # one Spark partition per Kafka partition, in offset order: no shuffle needed
    index = F.array_position(F.array(*[F.lit(t) for t in topics]), F.col("topic")).cast("long")
    running = F.max("ts").over(Window.partitionBy("topic", "pid").orderBy("offset")
                               .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    df = df.withColumn("k1", running).withColumn("k2", index).withColumn("k3", F.col("offset"))
    return df.repartition(plan.partitions, "pid").sortWithinPartitions("pid", "k1", "k2", "k3")


def _next_rdd(rows: RDD[tuple[Any, ...]], plan: ReplayPlan) -> RDD[tuple[Any, ...]]:
    """``_next_frame`` of a plain RDD replay: the ``next`` and ``clock`` rows keyed by their task
    and merge key, task ``p`` in Spark partition ``p``, sorted."""
    kept = rows.filter(lambda row: row[0] != "stats")
    return kept.keyBy(lambda row: row[1:5]).repartitionAndSortWithinPartitions(
        plan.partitions, partitionFunc=lambda key: key[0])


def _next_frame(result: DataFrame, plan: ReplayPlan) -> DataFrame:
    rows = result.where(F.col("kind").isin("next", "clock"))
    rows = rows.select(F.when(F.col("kind") == "clock", "clock").otherwise("rec").alias("kind"), "pid", "topic",
                       F.lit(None).cast("long").alias("offset"), "key", "value", "ts", "headers", "k1", "k2", "k3")
    return rows.repartition(plan.partitions, "pid").sortWithinPartitions("pid", "k1", "k2", "k3")


# How ``fw replay`` shows progress (``FW_REPLAY_PROGRESS``, set by the command, which knows
# whether its output is a terminal; the job's output is spark-submit's, the same): "terminal"
# refreshes one line in place each second; anything else prints a line a minute, for a log.
PROGRESS_ENV = "FW_REPLAY_PROGRESS"


class _Progress(threading.Thread):
    """While a stage runs: the records its tasks have read so far (each task reports its count
    over UDP, ``_Reporter``), those remaining of the source stage (the plan's ranges), the
    rate, the time left and its Spark tasks done. On a terminal one line refreshed in place
    each second, which ``stop`` clears for the stage's own line; otherwise a line a minute."""

    def __init__(self, sc: SparkContext, label: str, total: int | None = None) -> None:
        import socket

        super().__init__(daemon=True)
        self.tracker, self.label, self.done = sc.statusTracker(), label, threading.Event()
        self.terminal = os.environ.get(PROGRESS_ENV) == "terminal"
        self.every_s, self.started, self.total = (1.0 if self.terminal else 60.0), time.monotonic(), total
        host = sc.getConf().get("spark.driver.host", "127.0.0.1")
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("0.0.0.0", 0))
        self.sock.settimeout(0.5)
        self.address = (host, self.sock.getsockname()[1])
        self.counts: dict[str, int] = {}  # "stage:spark-partition:attempt" -> records read
        self.shown = False  # a line in place on the terminal, to clear

    def records(self) -> int:
        latest: dict[str, int] = {}
        for task in self.counts:  # a retried task: its latest attempt's count
            key, attempt = task.rsplit(":", 1)
            best = latest.get(key)
            if best is None or int(attempt) >= best:
                latest[key] = int(attempt)
        return sum(self.counts[f"{k}:{a}"] for k, a in latest.items())

    def run(self) -> None:
        last_line = time.monotonic()
        while not self.done.is_set():
            try:
                data, _ = self.sock.recvfrom(256)
                task, count = data.decode().split()
                self.counts[task] = max(self.counts.get(task, 0), int(count))
            except (OSError, ValueError):
                pass
            if time.monotonic() - last_line >= self.every_s and not self.done.is_set():  # none after the stage's line
                last_line = time.monotonic()
                self._show(self.line(last_line - self.started))
        self.sock.close()

    def line(self, seconds: float) -> str:
        """``[replay] stage 0: 1,200 of 5,000 records (24%), 3,800 remaining, 400 records/s,
        about 10 s left, Spark tasks 1/4 done, 3 s``."""
        n = self.records()
        tasks = [self.tracker.getStageInfo(sid) for sid in self.tracker.getActiveStageIds()]
        done = sum(t.numCompletedTasks for t in tasks if t is not None)
        total = sum(t.numTasks for t in tasks if t is not None)
        rate = n / seconds if seconds > 0 else 0.0
        if self.total:  # the source stage knows how much it reads: the plan's ranges
            remaining = max(self.total - n, 0)
            eta = f", about {remaining / rate:.0f} s left" if rate > 0 else ""
            read = (f"{n:,} of {self.total:,} records ({100 * n / self.total:.0f}%), {remaining:,} remaining, "
                    f"{int(rate):,} records/s{eta}")
        else:
            read = f"{n:,} records read, {int(rate):,} records/s"
        return f"[replay] {self.label}: {read}, Spark tasks {done}/{total} done, {seconds:.0f} s"

    def _show(self, text: str) -> None:
        if self.terminal:  # in place: back to the line's start, the line, the rest of the old one cleared
            sys.stdout.write(f"\r{text}\x1b[K")
            sys.stdout.flush()
            self.shown = True
        else:
            print(text, flush=True)

    def stop(self) -> None:
        """The stage is over: no more lines, and the one in place is cleared."""
        self.done.set()
        if self.ident is not None:  # started: its last line is out before this one's clearing
            try:  # an empty report wakes its wait for one (up to 0.5 s, which every stage's end waited)
                self.sock.sendto(b"", ("127.0.0.1", self.address[1]))
            except OSError:  # it has closed its socket: it is ending
                pass
            self.join(timeout=2.0)
        if self.shown:
            sys.stdout.write("\r\x1b[K")
            sys.stdout.flush()


def run_stage(sc: SparkContext, plan: ReplayPlan, stage: int, frame: DataFrame | RDD[Any] | None
              ) -> tuple[DataFrame | RDD[Any] | None, dict[str, Any]]:
    """Runs ``stage`` over ``frame`` (an RDD, or None for stage 0: a plain RDD replay,
    ``_rdd_stage``); returns its result (None when nothing reads it) and its totals."""
    started = time.monotonic()
    progress = _Progress(sc, f"stage {stage}", plan.records if stage == 0 else None)
    progress.start()
    result: DataFrame | RDD[Any] | None = None
    try:
        if frame is None or isinstance(frame, RDD):
            result, stats = _rdd_stage(sc, plan, stage, frame, progress.address)
        else:
            result = frame.mapInArrow(stage_function(plan.to_json(), stage, progress.address), SPARK_SCHEMA)
            if stage + 1 < len(plan.stages) or plan.output.startswith("parquet:"):
                # read again: by the next stage, or by the Parquet writer
                result = result.persist(StorageLevel.DISK_ONLY)
                stats = [json.loads(r.text) for r in result.where(F.col("kind") == "stats").select("text").collect()]
            else:  # only the tasks' counters come back (0.3 s less planning than a persisted frame)
                stats = [json.loads(r.text) for r in result.collect() if r.kind == "stats"]
                result = None
    finally:
        progress.stop()
    totals = _stage_totals(stats, started)
    print(f"[replay] stage {stage} ({', '.join(plan.stages[stage])}): {summary(totals)}", flush=True)
    if isinstance(result, DataFrame) and plan.output.startswith("parquet:"):
        outputs = result.where(F.col("kind") == "out").select(
            "topic", "partition", "key", "value", F.timestamp_millis("ts").alias("timestamp"),
            F.from_json("headers", KAFKA_HEADERS).alias("headers"))
        outputs.write.mode("append").partitionBy("topic").parquet(_staging(plan))
    return result, totals


def _rdd_stage(sc: SparkContext, plan: ReplayPlan, stage: int, upstream: RDD[Any] | None,
               progress: tuple[str, int]) -> tuple[RDD[Any] | None, list[dict[str, Any]]]:
    """``stage`` of a plain RDD replay over ``upstream`` (``_next_rdd``; None: stage 0, a task
    per Spark partition with its ranges); returns the rows the next stage reads (kept on disk:
    read again, by the next stage's shuffle) or None after the last stage, and the tasks' stats."""
    if upstream is None:
        tasks = _task_ranges(plan)
        upstream = sc.parallelize(tasks, max(len(tasks), 1))
    rows = upstream.mapPartitions(rdd_function(plan.to_json(), stage, progress))
    if stage + 1 == len(plan.stages):
        return None, [json.loads(row[-1]) for row in rows.collect()]  # the last stage returns its stats only
    rows = rows.persist(StorageLevel.DISK_ONLY)
    return rows, [json.loads(row[-1]) for row in rows.filter(lambda row: row[0] == "stats").collect()]


# -- Parquet output: staged, then published ------------------------------------------------------
# The stages append their files under PATH/_fw_partial/<backfill> (Spark's and pyarrow's readers
# skip names that start with "_"); only when every stage is done do they move into
# PATH/topic=<name>/, each renamed <backfill>-<its name>. A run started again first deletes what a
# failed one left: its staging and any file it had moved already. Through Hadoop's FileSystem, so
# any path Spark writes to (a local directory, hdfs://, s3a://) works alike.


def _staging(plan: ReplayPlan) -> str:
    return f"{plan.output.removeprefix('parquet:').rstrip('/')}/_fw_partial/{_output_id(plan)}"


def _output_id(plan: ReplayPlan) -> str:
    return plan.backfill["id"] if plan.backfill else plan.run_id


def _filesystem(sc: SparkContext, path: str) -> tuple[Any, Any]:
    jvm: Any = sc._jvm  # type: ignore[attr-defined]
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    return hpath.getFileSystem(sc._jsc.hadoopConfiguration()), jvm  # type: ignore[attr-defined]


def _published(fs: Any, jvm: Any, root: str, prefix: str) -> list[Any]:
    """The files of ``prefix`` already moved into ``root/topic=*/``."""
    found: list[Any] = []
    base = jvm.org.apache.hadoop.fs.Path(root)
    if not fs.exists(base):
        return found
    for d in fs.listStatus(base):
        if d.isDirectory() and d.getPath().getName().startswith("topic="):
            found += [f.getPath() for f in fs.listStatus(d.getPath()) if f.getPath().getName().startswith(prefix)]
    return found


def prepare_parquet(sc: SparkContext, plan: ReplayPlan) -> None:
    """Before the stages: what an earlier, failed run of this output left goes."""
    root = plan.output.removeprefix("parquet:").rstrip("/")
    fs, jvm = _filesystem(sc, root)
    fs.delete(jvm.org.apache.hadoop.fs.Path(_staging(plan)), True)
    for f in _published(fs, jvm, root, f"{_output_id(plan)}-"):
        fs.delete(f, False)


def publish_parquet(sc: SparkContext, plan: ReplayPlan) -> int:
    """After the stages: the staged files into ``PATH/topic=<name>/``; returns how many."""
    root = plan.output.removeprefix("parquet:").rstrip("/")
    fs, jvm = _filesystem(sc, root)
    Path_ = jvm.org.apache.hadoop.fs.Path
    staging = Path_(_staging(plan))
    moved = 0
    if fs.exists(staging):
        for d in fs.listStatus(staging):
            name = d.getPath().getName()
            if not (d.isDirectory() and name.startswith("topic=")):
                continue
            target = Path_(f"{root}/{name}")
            fs.mkdirs(target)
            for f in fs.listStatus(d.getPath()):
                fname = f.getPath().getName()
                if fname.startswith((".", "_")):
                    continue  # checksums (moved with their file) and Spark's markers
                if not fs.rename(f.getPath(), Path_(target, f"{_output_id(plan)}-{fname}")):
                    raise FrameworkError(f"cannot move {f.getPath()} into {target}: the backfill's files stay in "
                                         f"{_staging(plan)}. Fix: check the permissions of {root} and run it again")
                moved += 1
        fs.delete(staging, True)
    partial = Path_(f"{root}/_fw_partial")
    if fs.exists(partial) and not fs.listStatus(partial):
        fs.delete(partial, True)
    return moved


def _stage_totals(stats: list[dict[str, Any]], started: float) -> dict[str, Any]:
    """A stage's counters summed over its tasks, its seconds and records/s, and the same
    while processing."""
    totals: dict[str, Any] = {}
    for s in stats:
        for k, v in s.items():
            if k not in _TIMES:
                totals[k] = totals.get(k, 0) + v
    seconds = time.monotonic() - started
    totals["seconds"] = round(seconds, 1)
    totals["records/s"] = int(totals.get("records", 0) / seconds) if seconds else 0
    # from the first task's start to the last one's end: the stage without Spark's own start
    # (its job, the Python workers, the tasks' launch), as a live service's rate is measured
    busy = (max(s["ended_ms"] for s in stats) - min(s["began_ms"] for s in stats)) / 1000 if stats else 0
    totals["processing seconds"] = round(busy, 1)
    totals["records/s while processing"] = int(totals.get("records", 0) / busy) if busy else 0
    return totals


def replay(sc: SparkContext, plan: ReplayPlan) -> dict[str, Any]:
    """Every stage, then (bootstrap) the handover offsets; returns the job's totals (its
    seconds from when Spark is ready: a replay that needs a Spark SQL session, every one but
    a plain RDD job, has it made before; ``command seconds`` from when ``fw replay`` began)."""
    spark = None if _plain_rdd(plan) else _session()  # an archive is read by Spark SQL: never plain
    started = time.monotonic()
    if plan.archive:
        assert spark is not None
        _archive_ranges(spark, plan)
    try:
        check_order(sc, spark, plan)  # before the bootstrap empties the changelogs
    except PipelineError:
        if plan.backfill and not plan.resumed:  # nothing written: the ledger forgets it, as if never asked
            from framework.replay.ledger import Backfill, forget

            forget(_kafka_settings(plan), plan.service, [Backfill.from_dict(plan.backfill)])
        raise
    if plan.bootstrap:
        from framework.replay.handover import prepare_bootstrap

        prepare_bootstrap(_kafka_settings(plan), plan)
    if plan.output.startswith("parquet:"):
        prepare_parquet(sc, plan)
    frame: DataFrame | RDD[Any] | None = None if spark is None else _source_frame(spark, plan)
    grand: dict[str, Any] = {"records read": plan.records}
    busy = 0.0
    for stage in range(len(plan.stages)):
        result, totals = run_stage(sc, plan, stage, frame)
        for k, name in (("outputs", "outputs written"), ("state_entries", "state entries"),
                        ("dead_letters", "dead letters")):
            grand[name] = grand.get(name, 0) + totals.get(k, 0)
        busy += totals["processing seconds"]
        if stage + 1 < len(plan.stages):
            assert result is not None  # persisted for this stage
            frame = _next_rdd(result, plan) if isinstance(result, RDD) else _next_frame(result, plan)
    if plan.output.startswith("parquet:"):
        publish_parquet(sc, plan)
    if plan.bootstrap:
        from framework.replay.handover import commit_handover

        commit_handover(_kafka_settings(plan), plan)
    if plan.backfill:
        from framework.replay.ledger import Backfill, completed

        completed(_kafka_settings(plan), plan.service, Backfill.from_dict(plan.backfill),
                  {"records read": plan.records, **{k: grand[k] for k in ("outputs written", "dead letters")}})
    seconds = time.monotonic() - started
    grand["seconds"] = round(seconds, 1)
    grand["records/s"] = int(plan.records / seconds) if seconds else 0
    grand["processing seconds"] = round(busy, 1)
    grand["records/s while processing"] = int(plan.records / busy) if busy else 0
    if plan.command_started:  # Spark's start and the command's own work before it included
        grand["command seconds"] = round(time.time() - plan.command_started, 1)
    return grand


# -- the order check (framework.replay.order) ----------------------------------------------


def check_order(sc: SparkContext, spark: SparkSession | None, plan: ReplayPlan) -> None:
    """Refuses the replay (``order.refusal``) when a key reaches one of the plan's checked
    steps from several upstream partitions, before anything is written: the stages before
    the last checked one run first without writers (their tasks' ``next`` rows kept on
    disk), and each checked step's input is aggregated by key on the cluster; only up to
    ``order.SHOWN`` offending keys come to the driver."""
    checks = planned_checks(plan)
    if not checks:
        return
    started = time.monotonic()
    if plan.small and not plan.archive:
        _check_in_driver(plan)
        print(f"[replay] checked the order of {', '.join(c.step for c in checks)}: each key from one upstream "
              f"partition ({plan.records:,} records read and run in the driver, {time.monotonic() - started:.1f} s)",
              flush=True)
        return
    spark = spark or _session()
    names = origin_names(plan.stages)
    _refuse_mixed(checks, 0, _source_arrivals(spark, plan), names)
    frame = None if not any(c.stage > 0 for c in checks) else _source_frame(spark, plan)
    kept: list[DataFrame] = []
    try:
        for stage in range(max(c.stage for c in checks)):
            assert frame is not None
            result = frame.mapInArrow(stage_function(plan.to_json(), stage, dry=True), SPARK_SCHEMA)
            result = result.persist(StorageLevel.DISK_ONLY)
            kept.append(result)
            arrivals = result.where(F.col("kind") == "next").select("pid", "key", "topic",
                                                                    F.col("k2").alias("origin"))
            _refuse_mixed(checks, stage + 1, arrivals, names)
            frame = _next_frame(result, plan)
    finally:
        for result in kept:
            result.unpersist()
    print(f"[replay] checked the order of {', '.join(c.step for c in checks)}: each key from one upstream "
          f"partition ({time.monotonic() - started:.1f} s)", flush=True)


def _check_in_driver(plan: ReplayPlan) -> None:
    """``check_order`` of a small range (``ReplayPlan.small``) in the driver's own process: the
    source ranges read with the framework's Kafka client (a thread per partition) and the stages
    before the last checked step run over them without writers (``stage.run_locally``). Its cost
    is the records', where a Spark job of its own cost seconds of planning and task start-up
    whatever the range (benchmarks/NOTES.md, "The order check of a small range")."""
    from concurrent.futures import ThreadPoolExecutor

    from framework.kafka.clients import read_range
    from framework.replay.stage import run_locally

    pipeline = _pipeline(plan)  # not ``_setup``'s: what the stage functions pickle must not hold it
    settings = _kafka_settings(plan)
    parts = [(t, p, start, end) for t, ranges in sorted(plan.ranges.items()) for p, (start, end) in ranges.items()]

    def read(part: tuple[str, int, int, int]) -> list[Any]:
        topic, p, start, end = part
        return [m for run in read_range(settings, plan.marker_group, topic, p, start, end, batch=plan.batch_size)
                for m in run]

    with ThreadPoolExecutor(max(1, min(len(parts), 8))) as pool:  # librdkafka waits without the GIL
        sources = {(t, p): records for (t, p, _, _), records in zip(parts, pool.map(read, parts), strict=True)}
    dry = dataclasses.replace(plan, output="none", bootstrap=False)
    run_locally(pipeline, dry, sources, read_global=_global_reader(plan), check_only=True)


def _refuse_mixed(checks: list[OrderCheck], stage: int, arrivals: DataFrame | None, names: dict[str, str]) -> None:
    """``order.check_arrivals`` on the cluster: ``arrivals`` are stage ``stage``'s input as
    ``(pid, key, topic, origin)`` rows."""
    for check in (c for c in checks if c.stage == stage):
        assert arrivals is not None
        rows = (arrivals.where(F.col("topic").isin(check.topics) & F.col("key").isNotNull())
                .groupBy("pid", "key").agg(F.collect_set(F.struct("topic", "origin")).alias("origins"))
                .where(F.size("origins") > 1).orderBy("key", "pid").limit(SHOWN).collect())
        if rows:
            raise refusal(check, [(bytes(r.key), upstream([(o.topic, o.origin) for o in r.origins], names))
                                  for r in rows])


def _source_arrivals(spark: SparkSession, plan: ReplayPlan) -> DataFrame | None:
    """Stage 0's input as arrivals (a source partition is its own origin), None when no
    step of stage 0 is checked: read by Spark (its Kafka source, an archive) or, with
    ``--reader librdkafka``, by tasks reading their own ranges (``_keys_function``)."""
    if not any(c.stage == 0 for c in planned_checks(plan)):
        return None
    if plan.reads_in_tasks:
        return _range_frame(spark, plan).mapInArrow(_keys_function(plan.to_json()),
                                                    "pid long, key binary, topic string, origin long")
    df = spark.read.parquet(plan.archive) if plan.archive else _kafka_frame(spark, plan)
    return df.select(F.col("partition").cast("long").alias("pid"), "key", "topic",
                     F.col("partition").cast("long").alias("origin"))


def _keys_function(plan_json: str) -> Any:
    """The ``mapInArrow`` function that reads each task's source ranges (``_range_frame``
    rows) with the framework's Kafka client and returns their arrivals."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        from framework.kafka.clients import read_range

        plan, _ = _setup(plan_json)
        settings, group = _kafka_settings(plan), f"{plan.service}-replay-{plan.run_id}"
        for pid, ranges in _range_rows(batches):
            for topic, (start, end) in json.loads(ranges).items():
                for run in read_range(settings, group, topic, pid, start, end, batch=plan.batch_size):
                    yield pa.RecordBatch.from_pydict({"pid": [pid] * len(run), "key": [m.key() for m in run],
                                                      "topic": [topic] * len(run), "origin": [pid] * len(run)})

    return run


def _archive_ranges(spark: SparkSession, plan: ReplayPlan) -> None:
    """An archive's ranges are what it holds (its handover point, at a bootstrap)."""
    assert plan.archive is not None
    found = spark.read.parquet(plan.archive).groupBy("topic", "partition").agg(
        F.min("offset").alias("first"), F.max("offset").alias("last")).collect()
    plan.ranges = {}
    for r in found:
        plan.ranges.setdefault(r.topic, {})[int(r.partition)] = [int(r.first), int(r.last) + 1]


def archive(spark: SparkSession, plan: ReplayPlan) -> int:
    """``fw archive``: the source ranges as Parquet with Kafka's columns."""
    df = _kafka_frame(spark, plan).select("topic", "partition", "offset", "key", "value", "timestamp", "headers")
    path = plan.output.removeprefix("parquet:")
    df.write.mode("errorifexists").parquet(path)
    return plan.records


def _framework_reason(text: str) -> str | None:
    """The message of the framework error that failed a Spark task, from Spark's report."""
    import re

    found = re.search(r"framework\.errors\.(\w+): (.+)", text)
    return f"{found.group(2).strip()} ({found.group(1)} in a Spark task)" if found else None


def main(argv: list[str]) -> int:
    plan = ReplayPlan.from_json(Path(argv[1]).read_text())
    mode = argv[2] if len(argv) > 2 else "replay"
    # the context alone: Spark SQL's session is made when a step needs it (``_session``)
    sc = SparkContext.getOrCreate(SparkConf().setAppName(f"fw {mode} {plan.service}"))
    ui = f"Spark UI: {sc.uiWebUrl}  " if sc.uiWebUrl else ""  # none with spark.ui.enabled=false
    print(f"[replay] {ui}master: {sc.master}", flush=True)
    code: int | None = None
    try:
        code = _job(sc, plan, mode)
        return code
    finally:
        if code is not None:  # a job that raised is waited for to the JVM's end: its traceback comes last
            _said(code)
        _stop(sc)


def _job(sc: SparkContext, plan: ReplayPlan, mode: str) -> int:
    """The replay or the archive, its summary or its error printed; returns the exit code."""
    try:
        if mode == "archive":
            n = archive(_session(), plan)
            print(f"[replay] archived {n:,} records to {plan.output.removeprefix('parquet:')}", flush=True)
        elif mode == "savepoint":
            from framework.replay.snapshot import savepoint_stores

            counts = savepoint_stores(_session(), plan, _setup, _kafka_settings)["counts"]
            entries = sum(n for parts in counts.values() for n in parts.values())
            print(f"[replay] savepoint: {entries:,} entries of {len(counts)} stores written", flush=True)
        else:
            totals = replay(sc, plan)
            print(f"[replay] done: {summary(totals)}", flush=True)
    except FrameworkError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    except Exception as exc:  # a Spark task failed for good: say why in one line when it was ours
        reason = _framework_reason(str(exc))
        if reason is None:
            raise
        print(f"error: {reason}", file=sys.stderr, flush=True)
        return 1
    return 0


def _said(code: int) -> None:
    """``fw replay`` may stop waiting here (``framework.replay.launch``): the job is over, its
    outputs committed, its summary printed; what is left is Spark's stop and the JVM's exit."""
    mark = os.environ.get("FW_REPLAY_EXIT_MARK")
    if mark:
        print(f"{mark} {code}", flush=True)


def _session() -> SparkSession:
    """Spark SQL's session over the running context (0.6 s to make): ``fw archive`` and every
    replay but one of plain RDD jobs (``_plain_rdd``) make it before they start."""
    return SparkSession.builder.getOrCreate()


def _stop(sc: SparkContext) -> None:
    """``sc.stop()``, but pyspark's accumulator server (a daemon thread serving the
    Python workers' updates, which checks for its shutdown once a second) is left to end with
    this process: its shutdown held up the end of every job by 0.85-1 s, after everything was
    done (benchmarks/NOTES.md)."""
    sc._accumulatorServer = None  # type: ignore[assignment]
    sc.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
