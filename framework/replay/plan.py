"""What a replay runs: the stages of a pipeline, the contract it is checked against, and the
plan ``fw replay`` hands to the Spark job. Pure data and pure functions: no Spark, no Kafka.

**Stages.** A live task reads its sources and its repartition topics at once; a replay reads
history once, so it runs in stages: stage 0 processes the source topics, stage ``k`` the
repartition topics whose ``key_by`` is fed by stage ``k - 1``. Between stages the records of a
repartition topic go through a Spark shuffle by the framework's own partitioner, each
upstream task's records in their order, merged by the upstream watermark they were written
under (one of the orders live processing can produce, and one that lets windows fire while
the job runs). Every stateful step belongs to one stage.

**The contract** (docs/replay.md). A step sees its records in the order live processing would
when they come from one partition of one topic. When a key's records come from several (after
a repartition, or from several sources), live processing interleaves them by timing:
event-time results are still reproduced exactly (when no record is late at its source), but
order-sensitive steps — rolling aggregates, process functions, count windows — are not, except
their final values when order-insensitive. Whether a key's records do come from several is a
question of the data, answered on the range replayed (``framework.replay.order``). Processing
time and idleness depend on the wall clock and cannot be reproduced at all: ``check_contract``
names those steps from the pipeline alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from framework.errors import PipelineError
from framework.pipeline import steps as S
from framework.pipeline.definition import TIME_STORE, Pipeline


def input_stages(pipeline: Pipeline) -> dict[str, int]:
    """The stage of every input topic: 0 for sources, 1 + the stage feeding a ``key_by`` for
    its repartition topic."""
    stages = {s.topic.name: 0 for s in pipeline.sources()}
    for step in pipeline.steps.values():  # topological order
        if isinstance(step, S.KeyBy):
            fed = {stages[t] for t in pipeline.step_inputs(step.name)}
            stages[pipeline.repartition_topic(step.name)] = 1 + max(fed)
    return stages


def store_stages(pipeline: Pipeline) -> dict[str, int]:
    """The stage whose records reach each stateful step's store (the time store: every stage)."""
    stages = input_stages(pipeline)
    out: dict[str, int] = {}
    for step in pipeline.stateful_steps():
        fed = {stages[t] for t in pipeline.step_inputs(step.name)}
        if len(fed) > 1:
            inputs = sorted(pipeline.step_inputs(step.name))
            raise PipelineError(
                f"step {step.name!r} reads topics of several replay stages ({inputs}): "
                "a replay processes each repartition hop after the one before it, so it cannot replay this pipeline. "
                "Fix: re-key both inputs of the step (key_by) so they cross the same number of repartition topics")
        out[step.name] = fed.pop()
    return out


def stage_topics(pipeline: Pipeline) -> list[list[str]]:
    """The input topics of each stage, stage 0 first."""
    stages = input_stages(pipeline)
    out: list[list[str]] = [[] for _ in range(max(stages.values(), default=0) + 1)]
    for topic, stage in stages.items():
        out[stage].append(topic)
    return out


@dataclass(frozen=True)
class ContractIssue:
    step: str
    reason: str

    def __str__(self) -> str:
        return f"step {self.step!r}: {self.reason}"


def check_contract(pipeline: Pipeline) -> list[ContractIssue]:
    """The steps whose results a replay cannot reproduce whatever the records, with the reason
    (empty: all can). The order-sensitive steps fed by several partitions are not here: the
    data decides those (``framework.replay.order``)."""
    issues: list[ContractIssue] = []
    for src in pipeline.sources():
        if src.watermarks is not None and src.watermarks.idle_timeout_ms is not None:
            issues.append(ContractIssue(src.name, "its idle timeout depends on the wall clock of live processing"))
    for step in pipeline.steps.values():
        if isinstance(step, S.WindowStep) and getattr(step.windows, "clock", "event") == "processing":
            issues.append(ContractIssue(step.name, "processing-time windows fire on the wall clock"))
        if isinstance(step, S.AsyncStep) and not step.ordered:
            issues.append(ContractIssue(step.name, "an unordered async step emits as its calls complete"))
        if isinstance(step, S.GlobalTableJoin) and not step.by_event_time:
            issues.append(ContractIssue(step.name, f"it joins the latest row of global table {step.table!r}, which "
                                                   "depends on when the table's updates arrived"))
    return issues


@dataclass
class ReplayPlan:
    """Everything the Spark job needs, as JSON (``fw replay`` writes it, the job reads it).

    ``ranges``: per source topic, per partition, ``[start, end)`` offsets. ``output``:
    ``"topic"``, ``"parquet:<path>"`` or ``"none"``. Connection settings that are secrets never
    go into the plan: the job reads them from the environment (``FW_KAFKA_SECURITY__*``). The
    tasks' writers produce as the live service does: with its producer settings, refusing
    what a topic would refuse (``limits``: the timestamps each topic written accepts).
    """

    target: str
    service: str
    run_id: str
    bootstrap_servers: str
    partitions: int
    ranges: dict[str, dict[int, list[int]]]
    stages: list[list[str]]
    output: str = "none"
    output_suffix: str = ""
    bootstrap: bool = False
    archive: str | None = None
    batch_size: int = 5_000
    commit_every: int = 1_000_000
    commit_interval_s: float = 30.0  # and at least this often: the writer's transaction times out after 600 s
    allow_nondeterministic: bool = False
    # the order-sensitive steps whose input the job checks before it writes (none with
    # --allow-nondeterministic): ``framework.replay.order.OrderCheck`` as dicts
    order_checks: list[dict[str, Any]] = field(default_factory=list)
    changelogs: list[str] = field(default_factory=list)  # the service's, created anew by a bootstrap
    definition: str = ""  # the pipeline as fw replay imported it: executors must import the same
    reader: str = "spark"  # how stage 0 reads the topics: "spark" (its Kafka source) or "librdkafka" (the tasks)
    producer: dict[str, str] = field(default_factory=dict)  # the service's kafka.producer settings (no secrets)
    limits: dict[str, list[int | None]] = field(default_factory=dict)  # topic -> [before, after] ms it accepts
    backfill: dict[str, Any] | None = None  # a backfill's ledger record (framework.replay.ledger), as JSON data
    resumed: bool = False  # the backfill continues a failed run (a bootstrap keeps its changelogs)
    # per global table topic, per partition, [start, end): read whole by every task that joins it
    global_ranges: dict[str, dict[int, list[int]]] = field(default_factory=dict)
    # fw savepoint create --master (``snapshot``): the savepoint's ``path``, its ``stores`` (store ->
    # the topic it is restored from, whose ``ranges`` are read) and the ``tables`` among them
    savepoint: dict[str, Any] | None = None
    command_started: float = 0.0  # when fw replay began (time.time()): the done line's "command seconds"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ReplayPlan:
        data = json.loads(text)
        data["ranges"] = {t: {int(p): r for p, r in parts.items()} for t, parts in data["ranges"].items()}
        data["global_ranges"] = {t: {int(p): r for p, r in parts.items()}
                                 for t, parts in data.get("global_ranges", {}).items()}
        return cls(**data)

    def save(self, path: Path) -> None:
        path.write_text(self.to_json())

    def renamed(self, topic: str) -> str:
        """The topic a backfill writes ``topic``'s records to."""
        return f"{topic}{self.output_suffix}"

    @property
    def marker_group(self) -> str:
        """The consumer group of the task writers' progress markers: the backfill's (the same
        across its runs), else this run's."""
        if self.backfill:
            return backfill_group(self.service, self.backfill["id"])
        return f"{self.service}-replay-{self.run_id}"

    @property
    def reads_in_tasks(self) -> bool:
        """Stage 0's tasks read their source ranges themselves (``--reader librdkafka``)."""
        return self.reader == "librdkafka" and not self.archive

    @property
    def records(self) -> int:
        return range_records(self.ranges)

    @property
    def small(self) -> bool:
        """A range of at most ``SMALL_RANGE`` records (``choose_reader``)."""
        return self.records <= SMALL_RANGE


# A replay of this many records or fewer is mostly Spark's start-up (docs/replay.md, "How long a
# small replay takes"). ``--reader auto`` reads such a range in the tasks (``choose_reader``), and
# its stages run as plain RDD jobs, without Spark SQL's session and planning (``job._plain_rdd``).
SMALL_RANGE = 100_000


def range_records(ranges: Mapping[str, Mapping[int, list[int]]]) -> int:
    """How many offsets ``ranges`` (per topic, per partition, ``[start, end)``) span."""
    return sum(end - start for parts in ranges.values() for start, end in parts.values())


def choose_reader(asked: str, ranges: Mapping[str, Mapping[int, list[int]]], archive: bool) -> str:
    """The reader of stage 0 for ``fw replay --reader asked``: ``auto`` is ``librdkafka`` for
    a range of topics of at most ``SMALL_RANGE`` records (a warm 4,000-record replay ended
    4-5 s sooner: no Spark SQL session, benchmarks/NOTES.md), else ``spark`` (an archive is
    always read by Spark)."""
    if asked != "auto":
        return asked
    return "librdkafka" if range_records(ranges) <= SMALL_RANGE and not archive else "spark"


def backfill_group(service: str, backfill: str) -> str:
    """The consumer group holding a backfill's per-task progress markers."""
    return f"{service}-backfill-{backfill}"


def stores_of_stage(pipeline: Pipeline, stage: int, last: bool) -> list[str]:
    """The stores a stage's tasks write at a bootstrap: its stateful steps', and the time
    store from the last stage (which has merged every stage's clock)."""
    names = [name for name, s in store_stages(pipeline).items() if s == stage]
    if last and TIME_STORE in pipeline.store_names():
        names.append(TIME_STORE)
    return names


def output_topics(pipeline: Pipeline) -> list[str]:
    """What a backfill writes: the sinks, the late topics and the dead-letter topic."""
    names = [t.name for t in pipeline.sink_topics()] + [pipeline.dead_letter.name]
    return list(dict.fromkeys(names))


def definition_of(pipeline: Pipeline) -> str:
    """What executors check the pipeline they import against: its name, steps and topics
    (a pipeline that reads the environment can differ on a cluster's executors)."""
    topics = sorted(pipeline.input_topics()) + sorted(t.name for t in pipeline.sink_topics())
    steps = [f"  {s.kind:<10} {s.name}" + (f" <- {', '.join(s.parents)}" if s.parents else "")
             for s in pipeline.steps.values()]
    return "\n".join([f"pipeline {pipeline.name}", *steps, "  topics " + ", ".join(topics)])


def summary(counts: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in counts.items())
