"""A store one commit past its changelog's read_committed end waits for that commit's markers
instead of being taken for truncated and rebuilt (which would lose the commit's state)."""

from __future__ import annotations

from typing import Any

from framework.engine.runner import ChangelogInfo
from framework.runtime.restore import _await_markers

TOPIC = "svc-counts-changelog"


class Runner:
    """The store of task 0 continues at offset 120 (what its last commit wrote)."""

    def __init__(self, local_offset: int) -> None:
        self.local_offset = local_offset

    def ahead_of_changelog(self, partition: int, infos: dict[str, ChangelogInfo]) -> dict[str, int]:
        info = infos[TOPIC]
        return {TOPIC: self.local_offset} if self.local_offset > info.end else {}


class Reader:
    """The read_committed end reaches ``ends`` one query at a time; the log end is ``log_end``."""

    def __init__(self, ends: list[int], log_end: int) -> None:
        self.ends, self.log_end, self.asked = ends, log_end, 0

    def offsets(self, tp: Any, timeout_s: float) -> tuple[int, int]:
        self.asked += 1
        return 0, self.ends.pop(0) if len(self.ends) > 1 else self.ends[0]

    def high_watermark(self, tp: Any, timeout_s: float) -> int:
        return self.log_end


def _infos(end: int) -> dict[str, ChangelogInfo]:
    return {TOPIC: ChangelogInfo("id-1", 0, end)}


def test_the_end_is_asked_again_until_the_commit_markers_are_in() -> None:
    reader = Reader([100, 100, 121], log_end=121)  # the commit's markers land on the third look
    infos = _infos(100)
    _await_markers(Runner(120), reader, 0, infos)  # type: ignore[arg-type]
    assert infos[TOPIC].end == 121 and infos[TOPIC].incarnation == "id-1"
    assert reader.asked == 3


def test_state_past_the_log_end_is_not_waited_for() -> None:
    """The log itself ends before the local offset: truncated, for the restore plan to rebuild."""
    reader = Reader([100], log_end=110)
    infos = _infos(100)
    _await_markers(Runner(120), reader, 0, infos)  # type: ignore[arg-type]
    assert infos[TOPIC].end == 100 and reader.asked == 0
