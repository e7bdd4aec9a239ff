"""The part of the replay contract the data decides: does any key reach an order-sensitive
step from more than one upstream partition? Pure data and pure functions: the Spark job
(``job.py``) and ``run_locally`` (``stage.py``) find the keys, this module says which steps
to look at and what to tell the user.

An order-sensitive step (rolling aggregate, process or co-process function, count window,
a table, a join with a table's latest value)
that reads a repartition topic, or several source topics, sees a key's records in the order
live processing would when all of them come from ONE upstream partition: one task of the
stage before (for a repartition topic) or one partition of one source topic. Then a replay
reproduces it exactly. When a key's records come from several, live processing interleaves
them by timing, and the replay refuses unless ``--allow-nondeterministic``. Whether that
happens depends on the records (a source keyed by the step's key: never), so it is decided
on the range being replayed, before anything is written.

An *arrival* is one record on its way to the step: the task it reaches (``pid``), its key,
the topic it arrives on and its ``origin`` (the upstream task that wrote it to a
repartition topic; the partition itself for a source topic).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from framework.errors import PipelineError
from framework.pipeline import steps as S
from framework.pipeline.definition import Pipeline
from framework.replay.plan import ReplayPlan, input_stages
from framework.windows.definitions import CountWindows, GlobalWindows

ORDER_SENSITIVE = (S.Aggregate, S.Process, S.CoProcess)
SHOWN = 3  # keys an error names at most


@dataclass(frozen=True)
class OrderCheck:
    """An order-sensitive step whose records may come from several upstream partitions:
    ``what`` it is, the ``stage`` it runs in and the input ``topics`` it reads."""

    step: str
    what: str
    stage: int
    topics: list[str]
    fix: str = "key the input by the step's key before it is written"  # the refusal's first way out


def order_sensitive(step: S.Step) -> str | None:
    """What makes ``step`` order-sensitive, in words (None: it is not)."""
    if isinstance(step, S.TableJoin) and not step.by_event_time:
        return "a join with a table's latest value"
    if isinstance(step, S.Table):
        return "a table"
    if isinstance(step, ORDER_SENSITIVE):
        return {"aggregate": "a rolling aggregate", "process": "a process function",
                "co_process": "a co-process function"}.get(step.kind, step.kind)
    if isinstance(step, S.WindowStep) and isinstance(step.windows, (CountWindows, GlobalWindows)):
        return "a count window"
    return None


def order_checks(pipeline: Pipeline) -> list[OrderCheck]:
    """The order-sensitive steps reading a repartition topic or several source topics: the
    data decides whether a replay reproduces them."""
    stages = input_stages(pipeline)
    checks = []
    for step in pipeline.steps.values():
        what = order_sensitive(step)
        if what is None or _joined_table(pipeline, step):
            continue
        inputs = sorted(pipeline.step_inputs(step.name))
        if any(stages[t] > 0 for t in inputs) or len(inputs) > 1:
            check = OrderCheck(step.name, what, max(stages[t] for t in inputs), inputs)
            if isinstance(step, S.Table) and any(isinstance(pipeline.steps[p], S.TableTableJoin) for p in step.parents):
                # two tables' join, read as its stream of changes: no keying of the inputs helps
                check = replace(check, fix="join streams with the joined table instead of reading its changes "
                                           "(to_stream), whose corrections depend on the order the two sides' "
                                           "updates arrive in")
            checks.append(check)
    return checks


def _joined_table(pipeline: Pipeline, step: S.Step) -> bool:
    """A table two tables' join keeps, read only as a table: its versions are the same
    whatever the order of the two sides' updates (``build_table_table_join``). Its stream of
    changes (``to_stream``) is not: the corrections an update arriving out of order makes
    depend on that order."""
    return (isinstance(step, S.Table) and any(isinstance(pipeline.steps[p], S.TableTableJoin) for p in step.parents)
            and all(isinstance(pipeline.steps[c], (S.TableJoin, S.TableTableJoin)) for c in pipeline.children[step.name]))


def planned_checks(plan: ReplayPlan) -> list[OrderCheck]:
    """The checks a plan carries (``ReplayPlan.order_checks``)."""
    return [OrderCheck(**c) for c in plan.order_checks]


Mixed = tuple[bytes, list[str]]  # a key and the upstream partitions it came from, as text


def mixed_keys(arrivals: Iterable[tuple[int, bytes | None, str, int]], origin_name: dict[str, str],
               limit: int = SHOWN) -> list[Mixed]:
    """Up to ``limit`` keys that reach a task from more than one upstream partition, from
    ``(pid, key, topic, origin)`` arrivals (records without a key, the watermarks a
    repartition topic carries among them, are not a key's). In memory: ``run_locally``'s
    check; the Spark job aggregates the same on the cluster."""
    seen: dict[tuple[int, bytes], set[tuple[str, int]]] = {}
    for pid, key, topic, origin in arrivals:
        if key is not None:
            seen.setdefault((pid, key), set()).add((topic, origin))
    mixed = sorted((key, pid) for (pid, key), origins in seen.items() if len(origins) > 1)[:limit]
    return [(key, upstream(seen[(pid, key)], origin_name)) for key, pid in mixed]


def check_arrivals(checks: list[OrderCheck], stage: int, arrivals: Iterable[tuple[int, bytes | None, str, int]],
                   origin_name: dict[str, str]) -> None:
    """Raises ``refusal`` for the first of ``checks`` of ``stage`` that ``arrivals`` (that
    stage's input, in memory) show a key of from several upstream partitions."""
    mine = [c for c in checks if c.stage == stage]
    if not mine:
        return
    every = list(arrivals)
    for check in mine:
        mixed = mixed_keys((a for a in every if a[2] in check.topics), origin_name)
        if mixed:
            raise refusal(check, mixed)


def upstream(origins: Iterable[tuple[str, int]], origin_name: dict[str, str]) -> list[str]:
    """Upstream partitions as ``topic[partition]``: a repartition topic's origin is a task
    of the stage before, named by that stage's topics (``origin_name``)."""
    return [f"{origin_name.get(topic, topic)}[{p}]" for topic, p in sorted(set(origins))]


def origin_names(stages: Sequence[Sequence[str]]) -> dict[str, str]:
    """For each repartition topic of a plan's ``stages``, the name its origins go by: the
    topics the stage before reads (a task there reads that partition of each)."""
    return {t: "+".join(stages[k - 1]) for k in range(1, len(stages)) for t in stages[k]}


def printable(key: bytes) -> str:
    """A key as people read it: its bytes as text when they are UTF-8 without control
    characters (a repartition topic's keys are JSON: ``"ann"``), else as a bytes literal."""
    try:
        text = key.decode()
    except UnicodeDecodeError:
        return repr(key)
    return text if text.isprintable() else repr(key)


def refusal(check: OrderCheck, mixed: list[Mixed]) -> PipelineError:
    """The one-line error of a replay that found keys of ``check``'s step coming from
    several upstream partitions."""
    keys = "; ".join(f"key {printable(k)} from {', '.join(origins)}" for k, origins in mixed)
    return PipelineError(
        f"step {check.step!r} ({check.what}) receives records of one key from several upstream partitions "
        f"({keys}): live processing interleaves them by timing, so a replay cannot reproduce its intermediate "
        f"outputs. Fix: {check.fix}, or pass --allow-nondeterministic to replay it anyway (what it reproduces: "
        "docs/replay.md)")
