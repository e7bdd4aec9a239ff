"""What a backfill does given the ledger (``framework.replay.ledger.decide``), and where a
continued task's batches fall (a batch ends where the earlier run's writes ended)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from framework.engine.record import Record
from framework.errors import ConfigError
from framework.replay.ledger import Backfill, backfill_id, decide
from framework.replay.stage import _batches

RANGES = {"numbers": {0: [0, 100], 1: [0, 80]}}


def _bf(ranges: dict = RANGES, destination: tuple[str, ...] = ("sums-bf",), asked: tuple[str, str] = ("earliest", "latest"),
        state: str = "running") -> Backfill:
    return Backfill(id=backfill_id("pipeline", ranges, None, destination, 4, False), target="m:p", pipeline="h1",
                    destination=list(destination), ranges=ranges, asked=list(asked), state=state,
                    started="2026-11-27T04:00:00Z")


def test_a_new_backfill_runs() -> None:
    assert decide([], _bf(), again=False).action == "run"


def test_the_same_backfill_complete_writes_nothing_and_incomplete_continues() -> None:
    done = replace(_bf(), state="complete")
    assert decide([done], _bf(), again=False).action == "done"
    assert decide([_bf()], _bf(), again=False).action == "continue"


def test_the_same_request_whose_latest_moved_on_continues_the_range_the_failed_run_planned() -> None:
    failed = _bf()
    later = _bf({"numbers": {0: [0, 150], 1: [0, 90]}})
    assert later.id != failed.id
    decision = decide([failed], later, again=False)
    assert (decision.action, decision.backfill.ranges) == ("continue", RANGES)


def test_another_range_overlapping_a_backfill_into_the_same_topics_is_refused() -> None:
    earlier = replace(_bf(), state="complete")
    other = _bf({"numbers": {0: [50, 120]}}, asked=("numbers:0:50", "numbers:0:120"))
    with pytest.raises(ConfigError, match=r"sums-bf already holds the outputs of backfill \w+ \(m:p over "
                                          r"numbers\[0\]@0..100, numbers\[1\]@0..80; complete\), whose range "
                                          r"overlaps this one \(numbers\[0\]@50..120\)"):
        decide([earlier], other, again=False)


def test_a_disjoint_range_or_another_destination_runs() -> None:
    earlier = replace(_bf(), state="complete")
    later = _bf({"numbers": {0: [100, 120], 1: [80, 90]}}, asked=("committed", "latest"))
    assert decide([earlier], later, again=False).action == "run"
    assert decide([earlier], _bf(destination=("sums-bf2",)), again=False).action == "run"


def test_again_runs_only_into_a_destination_that_holds_nothing_and_forgets_what_was_there() -> None:
    earlier = replace(_bf(), state="complete")
    with pytest.raises(ConfigError, match="--again writes a new copy of the backfill, .*: sums-bf holds records"):
        decide([earlier], _bf(), again=True, occupied=["sums-bf"])
    with pytest.raises(ConfigError, match=": sums-bf, counts-bf hold records"):
        decide([earlier], _bf(destination=("sums-bf", "counts-bf", "seen-bf")), again=True,
               occupied=["sums-bf", "counts-bf"])
    decision = decide([earlier], _bf(), again=True)
    assert (decision.action, decision.forget) == ("run", [earlier])


def test_a_continued_tasks_batches_end_where_the_earlier_run_committed() -> None:
    records = [Record("t", 0, i, None, None, 0, None) for i in range(23)]
    sizes = [len(b) for b in _batches([records[:7], records[7:]], 5, lambda _: None, cut=12)]
    assert sizes == [5, 5, 2, 5, 5, 1]
    assert [len(b) for b in _batches([records], 5, lambda _: None)] == [5, 5, 5, 5, 3]
