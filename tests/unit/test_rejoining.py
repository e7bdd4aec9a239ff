"""A member whose partitions the group took away (its session timed out) is not ready until
the group assigns it partitions again (or none: then it has joined, holding nothing)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from framework.runtime.assignment import Assignment


def _assignment() -> Assignment:
    quiet: Any = SimpleNamespace(tasks={}, pending=set(), held=None, stop=lambda p: None, cancel=lambda p: None,
                                 start=lambda ps: None, disturb=lambda why: None, break_interval=lambda why, said=False: None)
    return Assignment("0", quiet, quiet, quiet, quiet, quiet, None, recovering=lambda: False, publish=lambda: None,
                      timeout_s=30.0)


def test_a_member_that_lost_its_partitions_is_rejoining_until_the_next_assignment() -> None:
    a = _assignment()
    assert (a.has_assignment, a.rejoining) == (False, False)  # starting
    a.on_assign([("in", 0), ("in", 1)])
    assert (a.has_assignment, a.rejoining) == (True, False)
    a.on_lost([("in", 0), ("in", 1)])
    assert (a.has_assignment, a.rejoining) == (False, True)
    a.on_assign([])  # joined again, with nothing to hold: running
    assert (a.has_assignment, a.rejoining) == (True, False)
