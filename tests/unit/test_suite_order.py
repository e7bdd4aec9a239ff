"""The suite's order (tests/integration/conftest.py): each of the longest modules heads one
share of the collection as pytest-xdist's worksteal deals it out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.integration.conftest import LONG_FIRST, spread_long_modules


@dataclass(frozen=True)
class Item:
    path: Path
    n: int


def _dealt(items: list[Item], workers: int) -> list[list[Item]]:
    """The shares worksteal's first schedule sends: in turn, the pending tests divided by the
    workers still to serve, from the front."""
    shares, pending = [], list(items)
    for i in range(workers):
        take = len(pending) // (workers - i)
        shares.append(pending[:take])
        del pending[:take]
    return shares


def _collection() -> list[Item]:
    names = ["test_a.py"] * 40 + [LONG_FIRST[2]] * 3 + [LONG_FIRST[0]] * 7 + ["test_b.py"] * 50 + \
        [LONG_FIRST[1], LONG_FIRST[3]]
    return [Item(Path("tests/integration") / name, n) for n, name in enumerate(names)]


def test_each_long_module_heads_a_share_of_its_own_and_nothing_is_lost() -> None:
    items = _collection()
    ordered = spread_long_modules(items, 4)
    assert sorted(i.n for i in ordered) == list(range(len(items)))
    shares = _dealt(ordered, 4)
    for share, module in zip(shares, LONG_FIRST, strict=True):
        size = sum(1 for i in items if i.path.name == module)
        assert {i.path.name for i in share[:size]} == {module}
        assert all(i.path.name not in LONG_FIRST for i in share[size:])
    rest = [i for i in ordered if i.path.name not in LONG_FIRST]
    assert rest == [i for i in items if i.path.name not in LONG_FIRST]  # in their order


def test_fewer_workers_than_long_modules_take_them_in_turn() -> None:
    items = _collection()
    shares = _dealt(spread_long_modules(items, 2), 2)
    heads = [[i.path.name for i in share if i.path.name in LONG_FIRST] for share in shares]
    assert heads == [[LONG_FIRST[0]] * 7 + [LONG_FIRST[2]] * 3, [LONG_FIRST[1], LONG_FIRST[3]]]
    assert [i.path.name for i in spread_long_modules(items, 1)][:12] == (
        [LONG_FIRST[0]] * 7 + [LONG_FIRST[1]] + [LONG_FIRST[2]] * 3 + [LONG_FIRST[3]])
