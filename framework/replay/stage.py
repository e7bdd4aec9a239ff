"""One task of one replay stage: the records of one partition number through the same task
runner as the live service, over in-memory state. No Spark here: the job (``job.py``) feeds
records in and ships the rows out, and tests drive it directly.

Rows out (``Row``), one shape for every kind:

- ``next``: a record for the next stage's repartition topic, with its sort key
  ``(watermark the upstream task had sent, upstream task, sequence)``: merged on that key, the
  upstream tasks' records keep their own order and the downstream watermark advances as
  smoothly as it can (so windows fire, and their state goes, while the job runs);
- ``out``: an output record (parquet backfill; a Kafka backfill writes them itself);
- ``clock``: the task clock handed to the next stage, which merges it into its own (the time
  store is one entry per task, written by the last stage);
- ``stats``: the task's counters and times, as JSON.
"""

from __future__ import annotations

import heapq
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

from framework.engine.calls import CallLoop
from framework.engine.partitioner import partition_for
from framework.engine.record import Record
from framework.engine.runner import TaskRunner
from framework.engine.task import CLOCK_KEY
from framework.errors import PipelineError
from framework.kafka.clients import KafkaOutput
from framework.kafka.writer import ResumableWriter
from framework.pipeline import steps as S
from framework.pipeline.definition import TIME_STORE, Pipeline
from framework.replay.order import check_arrivals, origin_names, planned_checks
from framework.replay.plan import (
    ReplayPlan,
    input_stages,
    output_topics,
    store_stages,
    stores_of_stage,
)
from framework.state.memory import MemoryBackend
from framework.time.clock import WATERMARK_HEADER
from framework.time.watermarks import MAX_WATERMARK, NO_WATERMARK

Headers = list[tuple[str, bytes]] | None


class Row(NamedTuple):
    kind: str
    pid: int
    k1: int
    k2: int
    k3: int
    topic: str | None
    partition: int | None
    key: bytes | None
    value: bytes | None
    ts: int
    headers: Headers
    text: str | None


@dataclass(frozen=True, slots=True)
class Carry:
    """The previous stage's task clock for this partition (encoded)."""

    clock: bytes


class StageOutput:
    """The runner's ``Output`` in a replay task: repartition records become ``next`` rows,
    everything the service would write to its output topics is collected for the writer."""

    def __init__(self, next_topics: Iterable[str], outputs: dict[str, str], partitions: int, upstream: int) -> None:
        self.partitions, self.upstream = partitions, upstream
        self.outputs = outputs  # output topic -> the topic the backfill writes it to
        self.sent = {t: NO_WATERMARK for t in next_topics}  # the last watermark sent per next topic
        self.rows: list[Row] = []
        self.out: list[tuple[str, int | None, bytes | None, bytes | None, int, Headers]] = []
        self.seq = 0
        # where outputs go: written at once (``sink``, a Kafka backfill), kept for ``take_out``
        # (``keep``, a Parquet backfill), or dropped; ``count`` of those written or kept
        self.sink: Callable[..., None] | None = None
        self.keep = False
        self._count = 0
        # ``direct``: the producer whose ``produce`` the steps that write outputs call themselves
        # (``route``), and whose counts per topic are the outputs'. Set before the task starts
        # when every output is written (an attempt with nothing committed before it): a call of
        # this class in between cost 0.15 µs per output, about 2% of a W1 or W2 task.
        self.direct: KafkaOutput | None = None

    def route(self, topic: str) -> tuple[Callable[..., None], str] | None:
        if self.direct is None or topic not in self.outputs:
            return None
        return self.direct.produce, self.outputs[topic]

    @property
    def count(self) -> int:
        """Outputs written or kept so far."""
        if self.direct is not None:
            return sum(self.direct.produced.get(t, 0) for t in self.outputs.values())
        return self._count

    def produce(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int,
                headers: Any = None, partition: int | None = None) -> None:
        sent = self.sent.get(topic)
        if sent is None:
            renamed = self.outputs.get(topic)
            if renamed is None:
                raise PipelineError(f"a replay task wrote to {topic!r}, which is neither an output nor a repartition "
                                    "topic of a later stage")
            if self.sink is not None:
                self.sink(renamed, key, value, timestamp, headers, partition)
                self._count += 1
            elif self.keep:
                self.out.append((renamed, partition, key, value, timestamp, list(headers) if headers else None))
                self._count += 1
            return
        if partition is None:
            partition = partition_for(key, self.partitions) if key is not None else self.seq % self.partitions
        hdrs = list(headers) if headers else None
        if key is None and value is None and hdrs:
            for name, raw in hdrs:
                if name == WATERMARK_HEADER:
                    what = raw.decode().rpartition(":")[2]
                    if what != "idle" and int(what) > sent:
                        self.sent[topic] = int(what)
        self.rows.append(Row("next", partition, sent, self.upstream, self.seq, topic, partition, key, value,
                             timestamp, hdrs, None))
        self.seq += 1

    def produce_changelog(self, topic: str, partition: int, key: bytes, value: bytes | None, headers: Any) -> None:
        raise PipelineError("a replay task does not checkpoint")

    def take_rows(self) -> list[Row]:
        rows, self.rows = self.rows, []
        return rows

    def take_out(self) -> list[tuple[str, int | None, bytes | None, bytes | None, int, Headers]]:
        out, self.out = self.out, []
        return out


def merge_clocks(earlier: dict[str, Any] | None, mine: dict[str, Any], my_topics: set[str]) -> dict[str, Any]:
    """One task clock from the stages': each input as the stage that read it left it, each
    step's watermark the highest any stage reached."""
    if not earlier:
        return mine
    inputs = {t: s for t, s in earlier["inputs"].items() if t not in my_topics}
    inputs.update({t: s for t, s in mine["inputs"].items() if t in my_topics})
    steps = dict(earlier["steps"])
    for step, wm in mine["steps"].items():
        steps[step] = max(wm, steps.get(step, NO_WATERMARK))
    return {"inputs": inputs, "steps": steps}


class InjectedFault(RuntimeError):
    """What ``FW_REPLAY_FAULT`` raises in a test: the Spark task's attempt fails."""


GlobalRead = Callable[[str, int, int, int], Iterable[list[Any]]]
"""``(topic, partition, start, end)`` -> the records of a global table's partition range, in lists."""


class StageTask:
    """Runs the records of partition ``pid`` of stage ``stage``. ``writer``: the task's
    transactional writer (a Kafka backfill, whose outputs it writes, or a bootstrap, whose
    state it writes); ``keep_outputs``: outputs become ``out`` rows (a parquet backfill)."""

    def __init__(self, pipeline: Pipeline, plan: ReplayPlan, stage: int, pid: int,
                 writer: ResumableWriter | None = None, keep_outputs: bool = False,
                 fail_after: int | None = None, hold_after: int | None = None,
                 global_reader: GlobalRead | None = None) -> None:
        self.pipeline, self.plan, self.stage, self.pid = pipeline, plan, stage, pid
        self.writer, self.keep_outputs = writer, keep_outputs
        self.fail_after = fail_after  # a test's injected fault: raise once this many outputs were written
        self.hold_after = hold_after  # a test's: stop for good once this many were (and are committed)
        self.write_outputs = writer is not None and plan.output == "topic"
        stages = input_stages(pipeline)
        self.my_topics = {t for t, s in stages.items() if s == stage}
        self.last = stage == len(plan.stages) - 1
        next_topics = [t for t, s in stages.items() if s == stage + 1]
        outputs = {t: plan.renamed(t) for t in output_topics(pipeline)}
        self.output = StageOutput(next_topics, outputs, plan.partitions, pid)
        self.output.keep = keep_outputs
        # async steps' calls on an event loop thread of the task, as live; a batch's calls all
        # complete before its outputs are taken (and committed), so a retried task writes nothing twice
        self.runner = TaskRunner(pipeline, MemoryBackend(), self.output, partitions=plan.partitions,
                                 now_ms=lambda: 0, calls=CallLoop() if pipeline.async_steps() else None)
        self.global_reader = global_reader
        self.task: Any = None  # started by ``run``, once it knows where the outputs go
        self.carried: dict[str, Any] | None = None
        self.counts = {"read": 0, "outputs": 0, "state_entries": 0}

    def run(self, chunks: Iterable[list[Record] | Carry]) -> Iterator[Row]:
        """Process everything (records in the order they come, in lists of any length, and
        the previous stage's clock), yielding rows as batches finish; the last rows are the
        clock (or, at a bootstrap, nothing: the state went to the changelogs) and the stats
        (the counters, the seconds it took, and when it began and ended: epoch ms)."""
        started, began = time.monotonic(), time.time_ns() // 1_000_000
        done = 0
        skip = self.writer.resume() if self.writer is not None else 0
        since_commit, committed_at = 0, time.monotonic()
        output = self.output
        if self.write_outputs and skip == 0:
            assert self.writer is not None
            output.direct = self.writer.output
        self._read_global_tables()
        self.task = self.runner.start(self.pid)
        for batch in _batches(chunks, self.plan.batch_size, self._carry, skip):
            # a batch an earlier attempt committed (batches end where commits fall) writes nothing
            if self.write_outputs:
                assert self.writer is not None
                output.sink = self.writer.produce if done + len(batch) > skip else None
            self.runner.process(batch)
            self.runner.settle()
            self.runner.end_batch()
            done += len(batch)
            since_commit += len(batch)
            yield from output.take_rows()
            yield from self._outputs()
            if self.writer is not None and done > skip and (
                    since_commit >= self.plan.commit_every
                    or time.monotonic() - committed_at >= self.plan.commit_interval_s):
                self.writer.commit(done)
                since_commit, committed_at = 0, time.monotonic()
            if self.hold_after is not None and output.count >= self.hold_after and (
                    self.writer is None or since_commit == 0):  # a writer's: once they are committed
                _hold(f"stage {self.stage} task {self.pid} holds after {output.count} outputs ({done} records)")
        self.counts["read"], self.counts["outputs"] = done, output.count
        yield from self._finish(done, skip)
        metrics = {**self.runner.metrics(), **self.counts, "seconds": round(time.monotonic() - started, 3),
                   "began_ms": began, "ended_ms": time.time_ns() // 1_000_000}
        yield Row("stats", self.pid, self.stage, 0, 0, None, None, None, None, 0, None, json.dumps(metrics))

    def _read_global_tables(self) -> None:
        """The global tables this stage's joins read, whole (their planned ranges), before
        anything is processed: as a live member reads them at start."""
        tables = self.runner.globals
        joins = {s.table for s in self.pipeline.steps.values() if isinstance(s, S.GlobalTableJoin)
                 and store_stages(self.pipeline)[s.name] == self.stage}
        for name in joins:
            table = tables.tables[name]
            topic = table.step.topic.name
            parts = self.plan.global_ranges.get(topic, {})
            table.set_partitions(len(parts))
            for p, (start, end) in sorted(parts.items()):
                if self.global_reader is None:
                    raise PipelineError(f"global table {name!r}: this replay has no reader of {topic!r}")
                for batch in self.global_reader(topic, p, start, end):
                    self.runner.apply_global(batch)

    def _carry(self, item: Carry) -> None:
        self.carried = self.runner.codec.decode(item.clock)

    def _outputs(self) -> Iterator[Row]:
        """After a batch: its outputs as ``out`` rows (a Parquet backfill); a Kafka backfill
        wrote them while the batch ran."""
        if self.fail_after is not None and self.output.count >= self.fail_after:
            raise InjectedFault(f"fault injected into stage {self.stage} task {self.pid} after "
                                f"{self.output.count} outputs")
        for topic, partition, key, value, ts, headers in self.output.take_out():
            yield Row("out", self.pid, 0, 0, 0, topic, partition, key, value, ts, headers, None)

    def _finish(self, done: int, skip: int) -> Iterator[Row]:
        """The task clock goes on (or into the time store), the state into the changelogs."""
        time_store = self.task.stores.get(TIME_STORE)
        if time_store is not None:
            clock = merge_clocks(self.carried, self.task.time.snapshot(), self.my_topics)
            time_store.put(CLOCK_KEY, clock)
            if not self.last:
                encoded = self.runner.codec.encode(clock)
                yield Row("clock", self.pid, MAX_WATERMARK, 0, 0, None, self.pid, None, encoded, 0, None, None)
        if self.writer is None:
            return
        complete = done + 1  # the marker once the state is in: nothing is left for a new attempt
        if self.plan.bootstrap and complete > skip:
            self._write_state()
        if complete > skip:
            self.writer.commit(complete)

    def _write_state(self) -> None:
        assert self.writer is not None
        encode, dump = self.runner.codec.encode, self.runner.dump(self.pid)
        for store in stores_of_stage(self.pipeline, self.stage, self.last):
            if self.pipeline.table_source(store) is not None:
                continue  # restored from its own topic up to the offsets the handover commits
            topic = self.pipeline.changelog_topic(store)
            for key, value in dump[store].items():
                self.writer.produce(topic, key, encode(value), 0, None, self.pid)
                self.counts["state_entries"] += 1

    def close(self) -> None:
        self.runner.close()
        if self.writer is not None:
            self.writer.close()


def _hold(what: str) -> None:
    """``FW_REPLAY_HOLD``'s stop, for a test that kills the job while a task is under way."""
    import sys
    import threading

    print(f"[replay] injected hold: {what}", file=sys.stderr, flush=True)
    threading.Event().wait()


def _batches(chunks: Iterable[list[Record] | Carry], size: int, carry: Any, cut: int = 0) -> Iterator[list[Record]]:
    """Records in batches of ``size`` whatever lists they came in, one of them ending at
    record ``cut`` (where an earlier run's writes end: the batches after it write, those
    before it do not, whatever batch size that run had); a carried clock is handed to
    ``carry``, not processed."""
    batch: list[Record] = []
    done = 0
    for chunk in chunks:
        if type(chunk) is Carry:
            carry(chunk)
            continue
        batch.extend(chunk)  # type: ignore[arg-type]
        while len(batch) >= (n := cut - done if done < cut < done + size else size):
            yield batch[:n]
            del batch[:n]
            done += n
    if batch:
        yield batch


def chunked(items: Iterable[Record | Carry]) -> Iterator[list[Record] | Carry]:
    """One item after the other as ``StageTask.run`` takes them: runs of records, and clocks."""
    run: list[Record] = []
    for item in items:
        if type(item) is Carry:
            if run:
                yield run
                run = []
            yield item
        else:
            run.append(item)  # type: ignore[arg-type]
    if run:
        yield run


def run_locally(pipeline: Pipeline, plan: ReplayPlan, sources: dict[tuple[str, int], list[Record]],
                writer_for: Any = None, keep_outputs: bool = True,
                global_records: dict[tuple[str, int], list[Record]] | None = None, *,
                read_global: Any = None, check_only: bool = False) -> dict[str, list[Row]]:
    """The whole replay without Spark, stage after stage, in this process: what the Spark job
    does, for tests and small replays. ``sources``: each source partition's records in offset
    order (``global_records``: each global table partition's, from its first offset; or
    ``read_global(topic, partition, start, end)`` reads them). Returns the rows of every stage
    by kind. The plan's order checks (``framework.replay.order``) refuse as the job's do,
    before a writer writes anything. ``check_only``: only the checks, without writers: the
    stages up to the last checked step's, and nothing after."""
    held = global_records or {}

    def read_held(topic: str, p: int, start: int, end: int) -> Iterator[list[Record]]:
        yield held.get((topic, p), [])[start:end]

    checks, names = planned_checks(plan), origin_names(plan.stages)
    if checks and writer_for is not None:  # decided by a pass that writes nothing, as on Spark
        run_locally(pipeline, plan, sources, global_records=global_records, read_global=read_global, check_only=True)
    check_arrivals(checks, 0, ((p, r.key(), t, p) for (t, p), rs in sources.items() for r in rs), names)
    stages = len(plan.stages) if not check_only else max((c.stage for c in checks), default=0)
    read_global = read_global or read_held
    by_task: dict[int, dict[str, list[Record]]] = {}
    for (topic, p), records in sources.items():
        by_task.setdefault(p, {})[topic] = records
    inputs: dict[int, list[Record | Carry]] = {p: list(merge_sources(t)) for p, t in by_task.items()}
    everything: dict[str, list[Row]] = {"out": [], "stats": []}
    for stage in range(stages):
        nexts: list[Row] = []
        for pid in sorted(inputs):
            task = StageTask(pipeline, plan, stage, pid, writer_for(stage, pid) if writer_for and not check_only
                             else None, keep_outputs and not check_only, global_reader=read_global)
            try:
                with quiet_tasks(check_only):
                    for row in task.run(chunked(inputs[pid])):
                        (nexts if row.kind in ("next", "clock") else everything[row.kind]).append(row)
            finally:
                task.close()
        check_arrivals(checks, stage + 1, ((r.pid, r.key, r.topic or "", r.k2) for r in nexts if r.kind == "next"),
                       names)
        inputs = {}
        for row in sorted(nexts, key=lambda r: (r.pid, r.k1, r.k2, r.k3)):
            mine = inputs.setdefault(row.pid, [])
            mine.append(Carry(row.value or b"") if row.kind == "clock" else
                        Record(row.topic or "", row.pid, len(mine), row.key, row.value, row.ts, row.headers))
    return everything


@contextmanager
def quiet_tasks(on: bool = True) -> Iterator[None]:
    """The tasks' own lines (a dead letter's) unsaid while ``on``: a pass that only checks the
    order (``check_only``, a dry Spark stage) runs records through the steps the replay proper
    runs them through again, and that says them, once."""
    task_log = logging.getLogger("framework.task")
    was = task_log.disabled
    task_log.disabled = was or on
    try:
        yield
    finally:
        task_log.disabled = was


def merge_sources(by_topic: dict[str, list[Record]]) -> list[Record]:
    """``merge_streams`` of lists in memory (the TestDriver's and ``run_locally``'s sources)."""
    return [r for run in merge_streams({t: iter([rs]) for t, rs in by_topic.items()}) for r in run]


def merge_streams(by_topic: dict[str, Iterator[list[Any]]], size: int = 5_000) -> Iterator[list[Any]]:
    """One task's records of several source topics, each given in offset order as a stream
    of lists, in one order live processing could read them in: merged by the largest
    timestamp seen so far in each (then topic, then offset), so that their watermarks
    advance together. Lists of up to ``size`` come out; one topic's pass through as they are."""
    if len(by_topic) == 1:
        yield from next(iter(by_topic.values()))
        return

    def keyed(index: int, runs: Iterator[list[Any]]) -> Iterator[tuple[tuple[int, int, int], Any]]:
        highest = NO_WATERMARK
        for run in runs:
            for r in run:
                highest = max(highest, r.timestamp()[1])
                yield (highest, index, r.offset()), r

    merged = heapq.merge(*(keyed(i, by_topic[t]) for i, t in enumerate(sorted(by_topic))), key=lambda kr: kr[0])
    out: list[Any] = []
    for _, r in merged:
        out.append(r)
        if len(out) >= size:
            yield out
            out = []
    if out:
        yield out
