"""State and internal topics through the TestDriver: hostile bytes run nothing, values that
cannot be stored are refused with the fix, registered types work, a pipeline that gains a
source and a step keeps its state, a changed step's state is refused, and local state of a
recreated changelog is rebuilt, never merged."""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from framework import (
    JsonSerde,
    Pipeline,
    SessionWindows,
    StateError,
    Topic,
    TumblingWindows,
    WatermarkStrategy,
)
from framework.serde.values import ValueCodec
from framework.state.keys import keyed, state_prefix
from framework.testing import TestDriver


class _Shell:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def counts() -> Pipeline:
    p = Pipeline("safe")
    p.source(Topic("in")).key_by(lambda v: v["k"], name="by-k").count(name="counts").to(
        Topic("out", key_serde=JsonSerde()))
    return p


def test_a_crafted_repartition_record_goes_to_the_dead_letters_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    d = TestDriver(counts())
    d.pipe("in", {"k": "a"})
    d.append("safe-by-k-repartition", pickle.dumps(_Shell(marker)), key=b'"a"')
    d.run()
    d.pipe("in", {"k": "a"})
    assert not marker.exists()
    [dead] = d.dead_letters()
    headers = dict(dead.headers() or ())
    assert headers["fw.source.topic"] == b"safe-by-k-repartition"
    assert (headers["fw.source.partition"], headers["fw.source.offset"]) == (b"0", b"1")
    assert headers["fw.step"] == b"by-k" and headers["fw.error.type"] == b"ValueError"
    assert [r.value for r in d.output("out")] == [1, 2]


@pytest.mark.parametrize("lose_local_state", [False, True])
def test_a_crafted_changelog_record_stops_the_restore_naming_it(tmp_path: Path, lose_local_state: bool) -> None:
    marker = tmp_path / "pwned"
    d = TestDriver(counts(), auto_checkpoint=False)
    d.pipe("in", {"k": "a"})
    d.checkpoint()
    d.run()
    d.checkpoint()
    offset = len(d.topics.log("safe-counts-changelog")[0])
    key = keyed(state_prefix("acc"), b'"a"')
    d.append("safe-counts-changelog", pickle.dumps(_Shell(marker)), key=key, partition=0)
    with pytest.raises(StateError) as err:
        d.crash(lose_local_state=lose_local_state)
    assert f"safe-counts-changelog[0]@{offset}" in str(err.value)
    assert "Fix:" in str(err.value)
    assert not marker.exists()


class Opaque:
    def __init__(self, n: int) -> None:
        self.n = n


def test_a_state_value_that_cannot_be_stored_is_refused_naming_the_step_and_the_fix() -> None:
    p = Pipeline("opaque")
    p.source(Topic("in")).aggregate(lambda: Opaque(0), lambda acc, v: Opaque(acc.n + 1), result=lambda a: a.n,
                                    name="tally").to(Topic("out"))
    d = TestDriver(p)
    with pytest.raises(StateError, match="step 'tally'.*test_state_safety.Opaque.*types=\\[YourType\\]"):
        d.pipe("in", 1, key="k")
    assert d.output("out") == []  # nothing of the failed checkpoint is visible


def test_a_repartition_value_that_cannot_be_encoded_is_a_dead_letter_naming_the_fix() -> None:
    p = Pipeline("opaque")
    (p.source(Topic("in")).map(Opaque).key_by(lambda o: o.n, name="by-n")
     .map(lambda o: o.n).to(Topic("out", key_serde=JsonSerde())))
    d = TestDriver(p)
    d.pipe("in", 3, key="k")
    [dead] = d.dead_letters()
    message = dict(dead.headers() or ())["fw.error.message"].decode()
    assert "step 'by-n'" in message and "types=[...]" in message and "value_serde" in message


@dataclass(frozen=True)
class Tally:
    n: int
    last: str


def test_registered_types_live_in_state_and_cross_repartitions_across_crashes() -> None:
    p = Pipeline("typed", types=[Tally])
    (p.source(Topic("in")).map(lambda v: Tally(1, v)).key_by(lambda t: t.last[0], name="by-initial")
     .aggregate(lambda: Tally(0, ""), lambda acc, t: Tally(acc.n + t.n, t.last), result=lambda t: t.n,
                name="tallies")
     .to(Topic("out", key_serde=JsonSerde())))
    d = TestDriver(p, auto_checkpoint=False)
    for word in ["apple", "avocado", "banana"]:
        d.pipe("in", word, key=word)
        d.checkpoint()
    d.run()
    d.checkpoint()
    d.crash(lose_local_state=True)
    d.pipe("in", "apricot", key="apricot")
    for _ in range(3):
        d.run()
        d.checkpoint()
    assert d.state("tallies", "a") == Tally(3, "apricot")
    assert [(r.key, r.value) for r in d.output("out")] == [("a", 1), ("a", 2), ("b", 1), ("a", 3)]


# --- upgrades ---------------------------------------------------------------------------------

BOUNDED = WatermarkStrategy.bounded_out_of_orderness(0, timestamp="ts")


def windows_v1(extra: bool = False) -> Pipeline:
    """Per-key counts in 1 s windows; ``extra``: a new source and a new window step (whose
    clock is made first: the tasks compile the steps from the last one)."""
    p = Pipeline("upgrade")
    views = p.source(Topic("views"), watermarks=BOUNDED, name="views")
    views.key_by(lambda v: v["k"], name="by-k").window(TumblingWindows(1000)).count(name="per-second").to(
        Topic("counts", key_serde=JsonSerde()))
    if extra:
        clicks = p.source(Topic("clicks"), watermarks=BOUNDED, name="clicks")
        clicks.key_by(lambda v: v["k"], name="clicks-by-k").window(SessionWindows(500)).count(
            name="click-sessions").to(Topic("sessions", key_serde=JsonSerde()))
    return p


# Source partition 0 runs ahead of partition 1, so the windows' watermark (the minimum over
# both upstream tasks) is well behind the source's at the restart: records of partition 1
# are on time for the windows although behind partition 0's source watermark.
VIEWS = [(0, "a", 100), (1, "b", 300), (0, "a", 900), (0, "a", 4200), (0, "b", 5500), (1, "b", 1500),
         (1, "a", 2100), (1, "b", 2200), (1, "a", 6300), (0, "a", 7000)]


def pipe_views(d: TestDriver, rows: list[tuple[int, str, int]]) -> None:
    for partition, k, ts in rows:
        d.pipe("views", {"k": k, "ts": ts}, key=k, partition=partition)


def test_a_pipeline_with_a_source_and_a_step_added_continues_the_old_windows() -> None:
    straight = TestDriver(windows_v1(), partitions=2)
    pipe_views(straight, VIEWS)

    d = TestDriver(windows_v1(), partitions=2)
    pipe_views(d, VIEWS[:5])
    d.restart(windows_v1(extra=True))
    d.pipe("clicks", {"k": "a", "ts": 50}, key="a")
    pipe_views(d, VIEWS[5:])
    assert d.metrics().get("late_records.per-second", 0) == 0
    assert sorted((r.key, r.value["start"], r.value["value"]) for r in d.output("counts")) == sorted(
        (r.key, r.value["start"], r.value["value"]) for r in straight.output("counts"))
    assert d.watermark("per-second", partition=0) == straight.watermark("per-second", partition=0)


def test_a_step_whose_state_no_longer_fits_is_refused_at_start_naming_it() -> None:
    d = TestDriver(windows_v1(), partitions=2)
    pipe_views(d, VIEWS[:3])
    changed = Pipeline("upgrade")
    changed.source(Topic("views"), watermarks=BOUNDED, name="views").key_by(lambda v: v["k"], name="by-k").window(
        TumblingWindows(5000)).count(name="per-second").to(Topic("counts", key_serde=JsonSerde()))
    with pytest.raises(StateError, match="step 'per-second'.*TumblingWindows size_ms=5000.*"
                                         "TumblingWindows size_ms=1000.*Fix: give the changed step a new name"):
        d.restart(changed)


def test_a_recreated_changelog_replaces_the_local_state_instead_of_merging_into_it() -> None:
    d = TestDriver(counts(), auto_checkpoint=False)
    for k in "aab":
        d.pipe("in", {"k": k})
        d.run()
        d.checkpoint()
    d.run()
    d.checkpoint()
    assert (d.state("counts", "a"), d.state("counts", "b")) == (2, 1)
    # The changelog is deleted and created again with other content, longer than the old one.
    old_length = len(d.topics.log("safe-counts-changelog")[0])
    d.topics.delete("safe-counts-changelog")
    codec = ValueCodec()
    rows = [("c", 7), ("a", 40)] + [("d", n) for n in range(old_length)]
    for k, n in rows:
        d.append("safe-counts-changelog", codec.encode(n), key=keyed(state_prefix("acc"), f'"{k}"'.encode()))
    d.restart()
    assert [d.state("counts", k) for k in "abcd"] == [40, None, 7, old_length - 1]
