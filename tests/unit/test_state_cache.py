"""The per-checkpoint write cache (``CachedPartition``) over both store backends, and the typed
keyed state views built on it (``ValueState``, ``ListState``, ``MapState``)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from framework.state.base import StorePartition
from framework.state.cache import CachedPartition, decode_value, encode_value
from framework.state.keys import keyed, prefix_end, split_keyed, state_prefix
from framework.state.memory import MemoryBackend
from framework.state.rocksdb import RocksDBBackend
from framework.state.views import KeyScope, ListState, MapState, ValueState
from tests.present import present


@pytest.fixture(params=["memory", "rocksdb"])
def backend_part(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StorePartition]:
    if request.param == "memory":
        yield MemoryBackend().open("svc", "store", 0)
        return
    rocks = RocksDBBackend(tmp_path / "state")
    yield rocks.open("svc", "store", 0)
    rocks.close_all()


@pytest.fixture
def cache(backend_part: StorePartition) -> CachedPartition:
    return CachedPartition(backend_part)


def backend_items(part: StorePartition) -> dict[bytes, object]:
    return {k: decode_value(v) for k, v in part.iter_range(b"", None)}


# --- CachedPartition ---------------------------------------------------------------------------


def test_reads_see_own_writes_before_commit(cache: CachedPartition) -> None:
    cache.put(b"k1", {"n": 1})
    cache.put(b"k2", [1, 2])
    assert cache.get(b"k1") == {"n": 1}
    assert cache.get(b"k2") == [1, 2]
    cache.put(b"k1", 5)
    assert cache.get(b"k1") == 5


def test_get_of_a_missing_key_returns_the_default(cache: CachedPartition) -> None:
    assert cache.get(b"nope") is None
    assert cache.get(b"nope", 7) == 7


def test_a_stored_none_is_a_value_not_a_missing_key(cache: CachedPartition) -> None:
    cache.put(b"k", None)
    assert cache.get(b"k", "default") is None
    cache.commit(None)
    assert cache.get(b"k", "default") is None


def test_reads_fall_through_to_committed_backend_values(cache: CachedPartition) -> None:
    cache.backend.write_batch({b"k": encode_value("committed")}, 3)
    assert cache.get(b"k") == "committed"


def test_delete_hides_a_backend_value(cache: CachedPartition) -> None:
    cache.backend.write_batch({b"k": encode_value(1), b"other": encode_value(2)}, 1)
    cache.delete(b"k")
    assert cache.get(b"k") is None
    assert cache.get(b"k", "gone") == "gone"
    assert list(cache.iter_range(b"", None)) == [(b"other", 2)]
    assert cache.backend.get(b"k") is not None  # still there until the commit
    cache.commit(2)
    assert cache.backend.get(b"k") is None
    assert cache.get(b"k") is None


def test_delete_then_put_again_revives_the_key(cache: CachedPartition) -> None:
    cache.backend.write_batch({b"k": encode_value(1)}, 1)
    cache.delete(b"k")
    cache.put(b"k", 2)
    assert cache.get(b"k") == 2
    cache.commit(2)
    assert decode_value(present(cache.backend.get(b"k"))) == 2


def test_nothing_reaches_the_backend_before_commit(cache: CachedPartition) -> None:
    backend = cache.backend
    backend.write_batch({b"old": encode_value("x")}, 10)
    for i in range(50):
        cache.put(b"k%02d" % i, i)
    cache.delete(b"old")
    cache.changes()  # computing the changes for the changelog writes nothing either
    assert backend_items(backend) == {b"old": "x"}
    assert backend.changelog_offset() == 10
    assert all(backend.get(b"k%02d" % i) is None for i in range(50))
    assert cache.dirty


def test_commit_writes_data_and_changelog_offset_together(cache: CachedPartition) -> None:
    cache.put(b"a", 1)
    cache.put(b"b", "two")
    cache.commit(42)
    assert backend_items(cache.backend) == {b"a": 1, b"b": "two"}
    assert cache.backend.changelog_offset() == 42
    assert not cache.dirty
    assert cache.changes() == {}
    assert cache.get(b"a") == 1  # now read from the backend


def test_commit_without_an_offset_keeps_the_previous_offset(cache: CachedPartition) -> None:
    cache.put(b"a", 1)
    cache.commit(7)
    cache.put(b"b", 2)
    cache.commit(None)
    assert cache.backend.changelog_offset() == 7
    assert backend_items(cache.backend) == {b"a": 1, b"b": 2}


def test_commit_of_an_empty_cache_with_an_offset_records_the_offset(cache: CachedPartition) -> None:
    cache.commit(5)
    assert cache.backend.changelog_offset() == 5
    assert backend_items(cache.backend) == {}


def test_commit_is_durable_across_reopening_a_rocksdb_partition(tmp_path: Path) -> None:
    rocks = RocksDBBackend(tmp_path / "state")
    cache = CachedPartition(rocks.open("svc", "store", 3))
    cache.put(b"a", {"x": 1})
    cache.delete(b"nothing")
    cache.commit(17)
    rocks.close_all()
    again = RocksDBBackend(tmp_path / "state")
    part = again.open("svc", "store", 3)
    assert backend_items(part) == {b"a": {"x": 1}}
    assert part.changelog_offset() == 17
    again.close_all()


def test_discard_forgets_every_uncommitted_write(cache: CachedPartition) -> None:
    cache.backend.write_batch({b"kept": encode_value(1)}, 4)
    cache.put(b"new", 2)
    cache.put(b"kept", 99)
    cache.delete(b"kept")
    cache.changes()
    cache.discard()
    assert not cache.dirty
    assert cache.get(b"new") is None
    assert cache.get(b"kept") == 1
    assert cache.changes() == {}
    cache.commit(None)  # nothing left to write
    assert backend_items(cache.backend) == {b"kept": 1}
    assert cache.backend.changelog_offset() == 4


def test_changes_are_bytes_with_none_for_deletes(cache: CachedPartition) -> None:
    cache.put(b"a", [1, 2])
    cache.delete(b"b")
    changes = cache.changes()
    assert set(changes) == {b"a", b"b"}
    assert decode_value(present(changes[b"a"])) == [1, 2]
    assert changes[b"b"] is None


def test_changes_are_stable_across_calls_until_commit(cache: CachedPartition) -> None:
    value = {"n": [1]}
    cache.put(b"a", value)
    cache.delete(b"d")
    first = cache.changes()
    snapshot = dict(first)
    value["n"].append(2)  # the cached object changes after the changelog was produced
    second = cache.changes()
    assert second == snapshot  # the WriteBatch equals what went to the changelog
    cache.commit(1)
    assert decode_value(present(cache.backend.get(b"a"))) == {"n": [1]}
    cache.put(b"b", 3)
    assert set(cache.changes()) == {b"b"}  # a new checkpoint's changes


def test_a_write_after_changes_is_kept_for_the_next_checkpoint(cache: CachedPartition) -> None:
    """The changelog got ``changes()``; a later write is not in it, so the commit must not write
    it either, and must not lose it: it belongs to the next checkpoint."""
    cache.put(b"a", 1)
    first = dict(cache.changes())
    cache.put(b"b", 2)
    cache.put(b"a", 10)
    assert cache.changes() == first  # stable until commit
    assert (cache.get(b"a"), cache.get(b"b")) == (10, 2)  # reads see every write
    assert list(cache.iter_range(b"", None)) == [(b"a", 10), (b"b", 2)]
    cache.commit(1)
    assert backend_items(cache.backend) == {b"a": 1}  # exactly what the changelog got
    assert cache.dirty
    assert (cache.get(b"a"), cache.get(b"b")) == (10, 2)
    assert {k: decode_value(present(v)) for k, v in cache.changes().items()} == {b"a": 10, b"b": 2}
    cache.commit(2)
    assert backend_items(cache.backend) == {b"a": 10, b"b": 2}
    assert not cache.dirty


def test_changes_of_an_empty_cache_do_not_swallow_later_writes(cache: CachedPartition) -> None:
    assert cache.changes() == {}
    cache.put(b"k", "v")
    cache.commit(1)
    cache.commit(2)
    assert backend_items(cache.backend) == {b"k": "v"}


def test_a_key_created_and_deleted_within_one_interval_leaves_no_tombstone(cache: CachedPartition) -> None:
    """A timer or window that lives and dies between two checkpoints writes nothing at all."""
    cache.put(b"short-lived", 1)
    cache.delete(b"short-lived")
    assert cache.get(b"short-lived") is None
    assert cache.changes() == {}


def test_deleting_a_key_that_exists_elsewhere_still_writes_a_tombstone(cache: CachedPartition) -> None:
    cache.put(b"committed", 1)
    cache.put(b"in-snapshot", 2)
    cache.commit(1)
    cache.put(b"in-snapshot", 3)
    cache.changes()  # handed to the changelog, not yet committed
    cache.put(b"committed", 10)
    cache.delete(b"committed")  # written this interval, but the backend has it
    cache.put(b"in-snapshot", 4)
    cache.delete(b"in-snapshot")  # written this interval, but the pending changelog has it
    cache.commit(2)
    assert backend_items(cache.backend) == {b"committed": 1, b"in-snapshot": 3}
    assert cache.changes() == {b"committed": None, b"in-snapshot": None}
    cache.commit(3)
    assert backend_items(cache.backend) == {}


def test_a_key_found_missing_before_the_commit_that_wrote_it_still_gets_its_tombstone(
        cache: CachedPartition) -> None:
    """Misses are remembered only until the next commit: after it the backend holds the key."""
    assert cache.get(b"k") is None  # a miss, remembered
    cache.put(b"k", 1)
    cache.commit(1)
    cache.put(b"k", 2)
    cache.delete(b"k")
    assert cache.changes() == {b"k": None}
    cache.commit(2)
    assert backend_items(cache.backend) == {}


def test_discard_forgets_in_place_changes_to_committed_values(cache: CachedPartition) -> None:
    """Committed values are kept as objects for later reads; an aborted interval that changed
    one in place (as a step does before putting it again) must not leave the change behind."""
    cache.put(b"k", [1])
    cache.commit(1)
    value = cache.get(b"k")
    value.append(2)
    cache.put(b"k", value)
    cache.discard()
    assert cache.get(b"k") == [1]
    assert backend_items(cache.backend) == {b"k": [1]}


def test_a_new_key_put_and_deleted_within_one_interval_leaves_no_tombstone(cache: CachedPartition) -> None:
    cache.put(b"committed", 1)
    cache.commit(1)
    cache.put_new(b"timer", 1)
    cache.delete(b"timer")
    assert cache.get(b"committed") == 1
    assert cache.changes() == {}


def test_size_counts_committed_and_new_cached_keys(cache: CachedPartition) -> None:
    cache.put(b"a", 1)
    cache.put(b"b", 2)
    assert cache.size() == 2
    cache.commit(1)
    assert cache.size() == 2
    cache.put(b"c", 3)
    assert cache.size() == 3


@pytest.mark.parametrize(("start", "end"), [(b"", None), (b"b", b"d"), (b"c", None), (b"", b"c"),
                                            (b"d", b"d"), (b"e", b"a")])
def test_iter_range_respects_its_bounds(cache: CachedPartition, start: bytes, end: bytes | None) -> None:
    cache.backend.write_batch({k: encode_value(k.decode()) for k in [b"a", b"c", b"e"]}, 1)
    for k in [b"b", b"d", b"f"]:
        cache.put(k, k.decode())
    got = [k for k, _ in cache.iter_range(start, end)]
    everything = [b"a", b"b", b"c", b"d", b"e", b"f"]
    assert got == [k for k in everything if k >= start and (end is None or k < end)]


def test_iter_range_merges_cache_and_backend_in_order_with_cache_winning(cache: CachedPartition) -> None:
    cache.backend.write_batch({b"a": encode_value("A0"), b"c": encode_value("C0"),
                               b"e": encode_value("E0")}, 1)
    cache.put(b"c", "C1")    # overrides the backend
    cache.delete(b"e")       # hides the backend
    cache.put(b"b", "B1")    # new, between backend keys
    cache.put(b"z", "Z1")    # new, after every backend key
    cache.delete(b"y")       # delete of a key that never existed
    assert list(cache.iter_range(b"", None)) == [(b"a", "A0"), (b"b", "B1"), (b"c", "C1"), (b"z", "Z1")]


@pytest.mark.parametrize("seed", range(6))
def test_iter_range_and_get_match_a_dict_model_under_random_operations(cache: CachedPartition,
                                                                       seed: int) -> None:
    """Random puts/deletes/commits/discards against a dict model: the merged view is always the
    model, in ascending key order, over random ranges; the backend holds only committed state."""
    rng = random.Random(seed)
    keyspace = [bytes(rng.choice(b"ab\x00\xff") for _ in range(rng.randrange(0, 4))) for _ in range(40)]
    keyspace = sorted(set(keyspace))
    committed: dict[bytes, int] = {}
    model: dict[bytes, int] = {}
    snapshot: dict[bytes, int] | None = None  # the model when changes() was taken
    offset = 0
    for step in range(400):
        op = rng.random()
        key = rng.choice(keyspace)
        if op < 0.5:
            if key in model or rng.random() < 0.5:
                cache.put(key, step)
            else:
                cache.put_new(key, step)  # what a timer does: it knows the store holds none
            model[key] = step
        elif op < 0.8:
            model.pop(key, None)
            cache.delete(key)
        elif op < 0.9:
            offset += 1
            cache.commit(offset)
            committed = dict(model) if snapshot is None else snapshot
            snapshot = None
            assert cache.backend.changelog_offset() == offset
        elif op < 0.95:
            cache.discard()
            model = dict(committed)
            snapshot = None
        else:
            cache.changes()  # as a checkpoint's step 1 would; changes nothing visible
            if snapshot is None:
                snapshot = dict(model)
        if step % 10 == 0:
            assert backend_items(cache.backend) == committed
        lo, hi = sorted([rng.choice(keyspace), rng.choice(keyspace)])
        end = None if rng.random() < 0.3 else hi
        expected = sorted((k, v) for k, v in model.items() if k >= lo and (end is None or k < end))
        assert list(cache.iter_range(lo, end)) == expected
        probe = rng.choice(keyspace)
        assert cache.get(probe, "missing") == model.get(probe, "missing")
    assert list(cache.iter_range(b"", None)) == sorted(model.items())


def test_iter_range_tolerates_writes_while_iterating(cache: CachedPartition) -> None:
    cache.backend.write_batch({b"a": encode_value(1), b"b": encode_value(2)}, 1)
    cache.put(b"c", 3)
    seen = []
    for k, v in cache.iter_range(b"", None):
        seen.append((k, v))
        cache.delete(k)
    assert seen == [(b"a", 1), (b"b", 2), (b"c", 3)]
    assert list(cache.iter_range(b"", None)) == []


# --- key layout --------------------------------------------------------------------------------


def test_keyed_keys_of_prefix_related_record_keys_do_not_share_a_prefix() -> None:
    p = state_prefix("m")
    a, ab = keyed(p, b"a"), keyed(p, b"ab")
    assert not ab.startswith(a) and not a.startswith(ab)
    assert split_keyed(p, a + b"suffix") == (b"a", b"suffix")
    assert split_keyed(p, ab) == (b"ab", b"")


def test_prefix_end_bounds_every_key_with_the_prefix() -> None:
    assert prefix_end(b"ab") == b"ac"
    assert prefix_end(b"a\xff") == b"b"
    assert prefix_end(b"\xff\xff") is None
    rng = random.Random(3)
    for _ in range(200):
        prefix = rng.randbytes(rng.randrange(1, 5))
        end = prefix_end(prefix)
        tail = rng.randbytes(rng.randrange(0, 5))
        assert end is None or prefix + tail < end
        assert end is None or not end.startswith(prefix)


# --- typed views -------------------------------------------------------------------------------


@pytest.fixture
def scope() -> KeyScope:
    return KeyScope()


def test_value_state_is_isolated_per_key(cache: CachedPartition, scope: KeyScope) -> None:
    state: ValueState[int] = ValueState(cache, scope, "v", default=0)
    scope.key = b"a"
    state.set(1)
    scope.key = b"ab"
    assert state.get() == 0
    state.set(2)
    scope.key = b"a"
    assert state.get() == 1
    state.clear()
    assert state.get() == 0
    scope.key = b"ab"
    assert state.get() == 2


def test_value_states_with_different_names_are_isolated(cache: CachedPartition, scope: KeyScope) -> None:
    one: ValueState[str] = ValueState(cache, scope, "n")
    two: ValueState[str] = ValueState(cache, scope, "nn")
    scope.key = b"k"
    one.set("one")
    assert two.get() is None
    two.set("two")
    assert (one.get(), two.get()) == ("one", "two")


def test_value_state_mutable_default_is_not_shared_between_keys(cache: CachedPartition,
                                                                scope: KeyScope) -> None:
    seen: ValueState[list[int]] = ValueState(cache, scope, "seen", default=[])
    scope.key = b"a"
    items = seen.get()
    items.append(1)
    seen.set(items)
    scope.key = b"b"
    assert seen.get() == []
    scope.key = b"a"
    assert seen.get() == [1]


def test_value_state_survives_commit(cache: CachedPartition, scope: KeyScope) -> None:
    state: ValueState[dict[str, int]] = ValueState(cache, scope, "v")
    scope.key = b"a"
    state.set({"x": 1})
    cache.commit(1)
    assert state.get() == {"x": 1}
    state.clear()
    cache.commit(2)
    assert state.get() is None
    assert backend_items(cache.backend) == {}


def test_list_state_is_isolated_per_key(cache: CachedPartition, scope: KeyScope) -> None:
    lst: ListState[int] = ListState(cache, scope, "l")
    scope.key = b"a"
    assert lst.get() == []
    lst.add(1)
    lst.add(2)
    scope.key = b"ab"
    lst.add(10)
    cache.commit(1)
    lst.add(11)
    assert lst.get() == [10, 11]
    scope.key = b"a"
    assert lst.get() == [1, 2]
    lst.update([5, 6, 7])
    assert lst.get() == [5, 6, 7]
    lst.update([])
    assert lst.get() == []
    scope.key = b"ab"
    lst.clear()
    assert lst.get() == []


def test_list_state_get_returns_a_copy(cache: CachedPartition, scope: KeyScope) -> None:
    lst: ListState[int] = ListState(cache, scope, "l")
    scope.key = b"k"
    lst.add(1)
    lst.get().append(2)
    assert lst.get() == [1]


def test_map_state_is_isolated_per_key(cache: CachedPartition, scope: KeyScope) -> None:
    m: MapState[int] = MapState(cache, scope, "m")
    scope.key = b"a"
    m.put("x", 1)
    m.put(b"y", 2)
    scope.key = b"ab"
    assert m.get("x") is None
    assert not m.contains("x")
    m.put("x", 10)
    scope.key = b"a"
    assert m.get("x") == 1 and m.get(b"x") == 1
    assert m.contains("y")
    m.remove("x")
    assert not m.contains("x")
    assert m.get("x", -1) == -1
    scope.key = b"ab"
    assert m.get("x") == 10


def test_map_state_contains_a_none_value(cache: CachedPartition, scope: KeyScope) -> None:
    m: MapState[None] = MapState(cache, scope, "m")
    scope.key = b"k"
    m.put("n", None)
    assert m.contains("n")


def test_map_state_items_of_prefix_related_keys_are_isolated(cache: CachedPartition,
                                                             scope: KeyScope) -> None:
    """Record keys b"a" and b"ab" (one a byte prefix of the other), committed and cached."""
    m: MapState[str] = MapState(cache, scope, "m")
    scope.key = b"a"
    m.put("b", "a/b")
    m.put("x", "a/x")
    scope.key = b"ab"
    m.put("", "ab/")
    m.put("c", "ab/c")
    scope.key = b""
    m.put("aab", "empty/aab")
    cache.commit(1)
    scope.key = b"a"
    m.put("c", "a/c")  # cached, not committed
    scope.key = b"abc"
    m.put("a", "abc/a")
    scope.key = b"a"
    assert list(m.items()) == [(b"b", "a/b"), (b"c", "a/c"), (b"x", "a/x")]
    assert list(m.keys()) == [b"b", b"c", b"x"]
    scope.key = b"ab"
    assert list(m.items()) == [(b"", "ab/"), (b"c", "ab/c")]
    scope.key = b""
    assert list(m.items()) == [(b"aab", "empty/aab")]
    scope.key = b"abc"
    assert list(m.items()) == [(b"a", "abc/a")]


def test_map_state_items_range_is_half_open_and_ascending(cache: CachedPartition,
                                                          scope: KeyScope) -> None:
    m: MapState[int] = MapState(cache, scope, "m")
    scope.key = b"k"
    for i, mk in enumerate([b"d", b"a", b"c\xff", b"b", b"c", b"\xff\xff"]):
        m.put(mk, i)
    scope.key = b"k2"
    m.put(b"b", 100)  # another key's entry inside the same byte range
    scope.key = b"k"
    assert [k for k, _ in m.items()] == [b"a", b"b", b"c", b"c\xff", b"d", b"\xff\xff"]
    assert [k for k, _ in m.items("b", "d")] == [b"b", b"c", b"c\xff"]
    assert [k for k, _ in m.items(b"c")] == [b"c", b"c\xff", b"d", b"\xff\xff"]
    assert [k for k, _ in m.items(end=b"c")] == [b"a", b"b"]
    assert list(m.items("x", "x")) == []


def test_map_state_of_a_key_ending_in_0xff_stays_isolated(cache: CachedPartition,
                                                         scope: KeyScope) -> None:
    m: MapState[int] = MapState(cache, scope, "m")
    scope.key = b"\xff"
    m.put(b"\xff", 1)
    scope.key = b"\xff\xff"
    m.put(b"", 2)
    scope.key = b"\xff"
    assert list(m.items()) == [(b"\xff", 1)]


def test_map_state_clear_removes_only_the_current_keys_entries(cache: CachedPartition,
                                                               scope: KeyScope) -> None:
    m: MapState[int] = MapState(cache, scope, "m")
    v: ValueState[int] = ValueState(cache, scope, "v")
    scope.key = b"a"
    m.put("x", 1)
    m.put("y", 2)
    v.set(5)
    scope.key = b"ab"
    m.put("x", 3)
    cache.commit(1)
    scope.key = b"a"
    m.put("z", 4)  # one cached entry as well
    m.clear()
    assert list(m.items()) == []
    assert v.get() == 5
    scope.key = b"ab"
    assert list(m.items()) == [(b"x", 3)]
    cache.commit(2)
    scope.key = b"a"
    assert list(m.items()) == []
    assert len(backend_items(cache.backend)) == 2  # ab's map entry and a's value
