"""Where a task's warm copies go: the members after its owner in the ring of ring keys."""

from __future__ import annotations

from framework.runtime.standby import standby_tasks


def test_two_members_copy_each_other() -> None:
    owners = {"a": {0, 1}, "b": {2, 3}}
    assert standby_tasks(owners, "a", 1) == {2, 3}
    assert standby_tasks(owners, "b", 1) == {0, 1}


def test_one_replica_goes_to_the_next_member_of_the_ring() -> None:
    owners = {"c": {4, 5}, "a": {0, 1}, "b": {2, 3}}  # ring a -> b -> c -> a
    assert standby_tasks(owners, "a", 1) == {4, 5}
    assert standby_tasks(owners, "b", 1) == {0, 1}
    assert standby_tasks(owners, "c", 1) == {2, 3}


def test_replicas_beyond_the_other_members_give_every_member_every_task() -> None:
    owners = {"a": {0}, "b": {1}, "c": {2}}
    for me, runs in owners.items():
        assert standby_tasks(owners, me, 5) == {0, 1, 2} - runs


def test_a_member_without_tasks_still_takes_copies() -> None:
    owners = {"a": {0, 1, 2}, "b": set()}
    assert standby_tasks(owners, "b", 1) == {0, 1, 2}
    assert standby_tasks(owners, "a", 1) == set()


def test_no_copies_without_replicas_or_outside_the_group() -> None:
    owners = {"a": {0}, "b": {1}}
    assert standby_tasks(owners, "a", 0) == set()
    assert standby_tasks(owners, "z", 1) == set()
    assert standby_tasks({"a": {0}}, "a", 1) == set()
