"""Replays against live runs: run ``fw replay`` as users do, wait until a live service has
processed everything, read what it committed, and compare by the contract of docs/replay.md."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from framework.pipeline import Pipeline
from framework.pipeline import steps as S
from framework.replay.order import order_checks
from framework.replay.plan import check_contract, input_stages, output_topics
from framework.serde.values import ValueCodec
from framework.time.clock import WATERMARK_HEADER
from framework.time.watermarks import NO_WATERMARK
from tests.integration.harness import ROOT, Record, committed_offsets, end_offsets, read_topics


def fw_replay(args: list[str], env: dict[str, str], timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    """``fw replay ...`` (or any ``fw`` command) in a subprocess, as a user runs it."""
    full = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "framework.cli", *args], env=full, cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout_s, check=False)


def caught_up(bootstrap: str, pipeline: Pipeline) -> Callable[[], bool]:
    """For ``wait_until``: the service's group has committed past the last record of every
    source partition (as it is now) and then of every repartition partition. A repartition
    topic is complete only once the sources are committed (their offsets commit in the
    transaction that wrote the repartitioned records), so it is read at that point, not
    when the wait starts, when it may be empty."""
    sources = [s.topic.name for s in pipeline.sources()]
    internal = [t for t in pipeline.input_topics() if t not in sources]
    source_ends = _last_offsets(bootstrap, sources)

    def done() -> bool:
        return _committed_past(bootstrap, pipeline.name, source_ends) and (
            not internal or _committed_past(bootstrap, pipeline.name, _last_offsets(bootstrap, internal)))

    return done


def _last_offsets(bootstrap: str, topics: list[str]) -> dict[str, dict[int, int]]:
    """Each partition's last record offset (partitions without records left out)."""
    last: dict[str, dict[int, int]] = {}
    for topic, records in read_topics(bootstrap, topics).items():
        for r in records:
            last.setdefault(topic, {})[r.partition] = max(last.get(topic, {}).get(r.partition, -1), r.offset)
    return last


def _committed_past(bootstrap: str, group: str, last: dict[str, dict[int, int]]) -> bool:
    for topic, ends in last.items():
        committed = committed_offsets(bootstrap, group, topic)
        if any(committed.get(p, 0) <= offset for p, offset in ends.items()):
            return False
    return True


def _is_control(r: Record) -> bool:
    return r.key is None and r.value is None and WATERMARK_HEADER in r.headers


@dataclass
class Results:
    """What a run committed: every output topic's records, and each changelog's latest values."""

    outputs: dict[str, list[Record]]
    state: dict[str, dict[tuple[int, bytes], Any]]  # store -> (partition, key) -> value


def _blank_clock(value: Any) -> bool:
    """A task clock in which nothing has happened (no watermark, no step time): what a task
    that never saw a record starts from, whether or not it was written down."""
    if not (isinstance(value, dict) and set(value) == {"inputs", "steps"}):
        return False
    times = [v for i in value["inputs"].values() for k, v in i.items() if k in ("wm", "gen")]
    return all(t == NO_WATERMARK for t in times + list(value["steps"].values()))


def output_ends(bootstrap: str, pipeline: Pipeline) -> dict[str, dict[int, int]]:
    """Where each output topic ends now: ``results(..., since=)`` reads what comes after."""
    return {t: end_offsets(bootstrap, t) for t in output_topics(pipeline)}


def parquet_outputs(path: Path, pipeline: Pipeline) -> dict[str, list[Record]]:
    """The outputs a ``--output parquet:PATH`` replay wrote, by topic, as ``results`` reads
    them from Kafka (the row's place in its file stands for the offset)."""
    import pyarrow.dataset as ds

    table = ds.dataset(path, format="parquet", partitioning="hive").to_table()
    out: dict[str, list[Record]] = {t: [] for t in output_topics(pipeline)}
    for i, row in enumerate(table.to_pylist()):
        headers = {h["key"]: h["value"] for h in row["headers"] or []}
        partition = -1 if row["partition"] is None else row["partition"]
        out[row["topic"]].append(Record(partition, i, row["key"], row["value"], headers))
    return out


def results(bootstrap: str, pipeline: Pipeline, suffix: str = "",
            since: dict[str, dict[int, int]] | None = None) -> Results:
    """The outputs (of topics ``t + suffix``, from the offsets ``since`` on when given) and the
    state in the changelogs; outputs are keyed by the pipeline's own topic names. A table read
    from its own topic has no changelog (the live service rebuilds it from the topic, the same
    after a bootstrap as before): what it held shows in the joins' outputs."""
    changelogs = {store: pipeline.changelog_topic(store) for store in pipeline.changelogged_stores()}
    read = read_topics(bootstrap, [f"{t}{suffix}" for t in output_topics(pipeline)] + list(changelogs.values()))
    outputs = {t: [r for r in read[f"{t}{suffix}"]
                   if not _is_control(r) and r.offset >= (since or {}).get(t, {}).get(r.partition, 0)]
               for t in output_topics(pipeline)}
    codec = ValueCodec(pipeline.types)
    state: dict[str, dict[tuple[int, bytes], Any]] = {}
    for store in changelogs:
        latest: dict[tuple[int, bytes], bytes | None] = {}
        for r in sorted(read[changelogs[store]], key=lambda r: (r.partition, r.offset)):
            latest[(r.partition, r.key or b"")] = r.value
        decoded = {pk: codec.decode(v) for pk, v in latest.items() if v is not None}
        decoded = {pk: v for pk, v in decoded.items() if not _blank_clock(v)}
        # a store's meta entries (its signature) where it holds nothing: as good as a fresh store
        holding = {p for p, key in decoded if not key.startswith(b"\x00")}
        state[store] = {(p, key): v for (p, key), v in decoded.items() if p in holding or not key.startswith(b"\x00")}
    return Results(outputs, state)


def contract(pipeline: Pipeline, topic: str) -> str:
    """How replay outputs of ``topic`` compare with live ones: ``sequence`` (each key's outputs
    in order), ``multiset`` (each key's outputs, in any order) or ``final`` (each key's last)."""
    issues = {i.step for i in check_contract(pipeline)} | {c.step for c in order_checks(pipeline)}
    stages = input_stages(pipeline)
    writers = [s for s in pipeline.steps.values()
               if (isinstance(s, S.Sink) and s.topic.name == topic)
               or (isinstance(s, S.WindowStep) and s.late is not None and s.late.name == topic)]
    kinds = set()
    for step in writers:
        chain, todo = set(), [step.name]
        while todo:  # the steps on the way back to a source or a repartition
            name = todo.pop()
            chain.add(name)
            todo += [p for p in pipeline.steps[name].parents if not isinstance(pipeline.steps[p], S.KeyBy)]
        inputs = pipeline.step_inputs(step.name)
        if chain & issues:
            kinds.add("final")
        elif len(inputs) == 1 and all(stages[t] == 0 for t in inputs):
            kinds.add("sequence")
        else:
            kinds.add("multiset")
    return "final" if "final" in kinds else "multiset" if "multiset" in kinds else "sequence"


def _interleaved_buffers(pipeline: Pipeline) -> set[str]:
    """Window steps that keep their elements (apply, process) and read a repartition topic
    or several sources: their buffers hold the same elements as live, in the order of one
    interleaving of the upstream partitions (docs/replay.md)."""
    stages = input_stages(pipeline)
    out = set()
    for step in pipeline.steps.values():
        if isinstance(step, S.WindowStep):
            inputs = pipeline.step_inputs(step.name)
            if len(inputs) > 1 or any(stages[t] > 0 for t in inputs):
                out.add(step.name)
    return out


def _by_key(records: list[Record]) -> dict[bytes | None, list[bytes | None]]:
    out: dict[bytes | None, list[bytes | None]] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        out.setdefault(r.key, []).append(r.value)
    return out


def compare(pipeline: Pipeline, live: Results, replayed: Results) -> list[str]:
    """Every difference the contract does not allow, in words (empty: none)."""
    problems = []
    for topic, records in live.outputs.items():
        mine = replayed.outputs[topic]
        if topic == pipeline.dead_letter.name:
            def letters(rs: list[Record]) -> Counter[Any]:
                return Counter((r.key, r.value, r.headers.get("fw.step"), r.headers.get("fw.error.type"),
                                tuple(sorted((k, v) for k, v in r.headers.items() if not k.startswith("fw."))))
                               for r in rs)
            if letters(records) != letters(mine):
                problems.append(f"dead letters differ: live {letters(records)}, replay {letters(mine)}")
            continue
        kind = contract(pipeline, topic)
        a, b = _by_key(records), _by_key(mine)
        if kind == "sequence":
            same = a == b
        elif kind == "multiset":
            same = {k: Counter(v) for k, v in a.items()} == {k: Counter(v) for k, v in b.items()}
        else:
            same = {k: v[-1] for k, v in a.items()} == {k: v[-1] for k, v in b.items()}
        if not same:
            problems.append(f"{topic} ({kind}): live {len(records)} records {a}, replay {len(mine)} records {b}")
    buffers = _interleaved_buffers(pipeline)
    for store, entries in live.state.items():
        replayed_entries = replayed.state[store]
        for key in sorted(set(entries) | set(replayed_entries)):
            x, y = entries.get(key), replayed_entries.get(key)
            if store in buffers and isinstance(x, list) and isinstance(y, list):
                x, y = sorted(x, key=repr), sorted(y, key=repr)  # the same elements, in an interleaving's order
            if x != y:
                problems.append(f"store {store} key {key!r}: live {entries.get(key)}, "
                                f"replay {replayed_entries.get(key)}")
    return problems


def assert_same(pipeline: Pipeline, live: Results, replayed: Results) -> None:
    """``compare`` finds nothing; else every difference, in full."""
    problems = compare(pipeline, live, replayed)
    assert not problems, "\n".join(problems)
