"""The store-partition contract, over MemoryBackend and RocksDBBackend (real RocksDB in tmp_path),
plus what only a durable backend can show: reopen, crash durability, locking, drop."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from framework.engine.globals import open_copy
from framework.errors import StateError
from framework.state.base import StoreBackend, StorePartition, partition_path
from framework.state.memory import MemoryBackend
from framework.state.rocksdb import RocksDBBackend, RocksDBPartition

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["memory", "rocksdb"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreBackend]:
    if request.param == "memory":
        yield MemoryBackend()
        return
    rocks = RocksDBBackend(tmp_path / "state")
    yield rocks
    rocks.close_all()


@pytest.fixture
def part(backend: StoreBackend) -> StorePartition:
    return backend.open("svc", "counts", 0)


@pytest.fixture
def rocks(tmp_path: Path) -> Iterator[RocksDBBackend]:
    b = RocksDBBackend(tmp_path / "state")
    yield b
    b.close_all()


def run_child(root: Path, body: str, *, piped: bool = False) -> subprocess.Popen[str]:
    """Start a Python process that has ``backend = RocksDBBackend(root)`` and runs ``body``.

    ``piped``: the child's stdin and stdout are pipes to this process."""
    code = "from pathlib import Path\nfrom framework.state.rocksdb import RocksDBBackend\n"
    code += f"backend = RocksDBBackend(Path({str(root)!r}))\n" + textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    pipe = subprocess.PIPE if piped else None
    return subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, env=env, text=True, stdin=pipe, stdout=pipe
    )


# --- the contract, both backends -------------------------------------------------------------


def test_get_put_delete_via_write_batch(part: StorePartition) -> None:
    assert part.get(b"a") is None
    part.write_batch({b"a": b"1", b"b": b"2", b"": b"empty key", b"z": b""}, None)
    assert part.get(b"a") == b"1"
    assert part.get(b"b") == b"2"
    assert part.get(b"") == b"empty key"
    assert part.get(b"z") == b""  # an empty value is a value, not a delete
    part.write_batch({b"a": None, b"b": b"22", b"never-there": None}, None)
    assert part.get(b"a") is None
    assert part.get(b"b") == b"22"
    assert part.get(b"never-there") is None
    # A user key equal to the meta key lives in user space and does not touch the offset.
    part.write_batch({b"changelog_offset": b"user data"}, None)
    assert part.get(b"changelog_offset") == b"user data"
    assert part.changelog_offset() is None


KEYS = [
    b"", b"\x00", b"\x00\x00", b"\x00\x01", b"\x01", b"a", b"a\x00", b"a\xff", b"ab", b"b",
    b"changelog_offset", b"\x7f", b"\x80", b"\xfe\xff", b"\xff", b"\xff\x00", b"\xff\xff",
    b"\xff\xff\xff",
]  # fmt: skip


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (b"", None),
        (b"", b"\x00"),  # only the empty key
        (b"\x00", b"\x00\x01"),  # inclusive start, exclusive end
        (b"a", b"b"),
        (b"a", b"a"),  # empty: start == end
        (b"b", b"a"),  # empty: start > end
        (b"a\x00", b"a\xff\x00"),
        (b"\x80", None),
        (b"\xff", b"\xff\xff"),
        (b"\xff\xff", None),
        (b"\xff\xff\xff\xff", None),  # after the last key
        (b"", b""),
        (b"0", b"1"),  # nothing stored in between
    ],
)
def test_iter_range_bounds(part: StorePartition, start: bytes, end: bytes | None) -> None:
    part.write_batch({k: b"v" + k for k in reversed(KEYS)}, 1)
    got = list(part.iter_range(start, end))
    want = [(k, b"v" + k) for k in sorted(KEYS) if k >= start and (end is None or k < end)]
    assert got == want


def test_iter_range_matches_a_sorted_dict_under_random_batches(part: StorePartition) -> None:
    rng = random.Random(7)
    model: dict[bytes, bytes] = {}
    alphabet = [b"\x00", b"\x01", b"a", b"\x7f", b"\x80", b"\xff"]
    for _ in range(60):
        changes: dict[bytes, bytes | None] = {}
        for _ in range(rng.randint(0, 12)):
            key = b"".join(rng.choices(alphabet, k=rng.randint(0, 3)))
            changes[key] = None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 5))
        part.write_batch(changes, None)
        for k, v in changes.items():
            if v is None:
                model.pop(k, None)
            else:
                model[k] = v
        start = b"".join(rng.choices(alphabet, k=rng.randint(0, 2)))
        end = rng.choice([None, b"".join(rng.choices(alphabet, k=rng.randint(0, 2)))])
        want = sorted((k, v) for k, v in model.items() if k >= start and (end is None or k < end))
        assert list(part.iter_range(start, end)) == want
        assert part.approximate_size() == len(model)
    assert list(part.iter_range(b"", None)) == sorted(model.items())


def test_changelog_offset_only_updated_when_given(part: StorePartition) -> None:
    assert part.changelog_offset() is None
    part.write_batch({b"k": b"v"}, None)
    assert part.changelog_offset() is None
    part.write_batch({b"k": b"v2"}, 42)
    assert part.changelog_offset() == 42
    part.write_batch({b"k": None}, None)
    assert part.changelog_offset() == 42
    part.write_batch({}, 43)  # an offset alone (e.g. only tombstones of absent keys) counts
    assert part.changelog_offset() == 43
    part.write_batch({}, None)
    assert part.changelog_offset() == 43
    part.write_batch({b"x": b"1"}, 0)
    assert part.changelog_offset() == 0
    part.write_batch({}, 2**63 - 1)
    assert part.changelog_offset() == 2**63 - 1


def test_approximate_size(part: StorePartition) -> None:
    assert part.approximate_size() == 0
    part.write_batch({b"a": b"1", b"b": b"2", b"c": b"3"}, 1)
    assert part.approximate_size() == 3
    part.write_batch({b"a": b"x", b"b": b"y"}, 2)  # overwrites are not new keys
    assert part.approximate_size() == 3
    part.write_batch({b"a": None, b"nope": None, b"nada": None}, 3)  # absent-key tombstones
    assert part.approximate_size() == 2


def test_reading_during_iteration(part: StorePartition) -> None:
    part.write_batch({bytes([i]): bytes([i]) * 3 for i in range(50)}, 1)
    seen = []
    for key, value in part.iter_range(b"\x05", b"\x30"):
        assert part.get(key) == value
        assert part.get(b"\x00") == b"\x00\x00\x00"
        assert part.get(b"missing") is None
        inner = list(part.iter_range(key, None))  # nested iteration over the same partition
        assert inner[0] == (key, value)
        seen.append(key)
    assert seen == [bytes([i]) for i in range(5, 48)]


def test_open_twice_returns_the_same_partition(backend: StoreBackend) -> None:
    a = backend.open("svc", "s", 3)
    assert backend.open("svc", "s", 3) is a
    assert backend.open("svc", "s", 4) is not a
    assert backend.open("svc", "other", 3) is not a
    a.write_batch({b"k": b"v"}, 1)
    assert backend.open("svc", "other", 3).get(b"k") is None


def test_drop_removes_data(backend: StoreBackend) -> None:
    p = backend.open("svc", "s", 0)
    p.write_batch({b"k": b"v"}, 9)
    backend.drop("svc", "s", 0)
    backend.drop("svc", "s", 0)  # idempotent
    backend.drop("svc", "never-opened", 5)
    fresh = backend.open("svc", "s", 0)
    assert fresh.get(b"k") is None
    assert fresh.changelog_offset() is None
    assert list(fresh.iter_range(b"", None)) == []


# --- RocksDB only ---------------------------------------------------------------------------


def test_reopen_after_close_keeps_data_and_offset(tmp_path: Path) -> None:
    root = tmp_path / "state"
    b1 = RocksDBBackend(root)
    p1 = b1.open("svc", "s", 1)
    p1.write_batch({b"a": b"1", b"\xff": b"2", b"gone": b"x"}, 10)
    p1.write_batch({b"gone": None}, 11)
    p1.close()
    p1.close()  # idempotent
    with pytest.raises(StateError, match="closed"):
        p1.get(b"a")
    p2 = b1.open("svc", "s", 1)
    assert p2 is not p1
    assert p2.changelog_offset() == 11
    b1.close_all()

    b2 = RocksDBBackend(root)  # a new process would do the same
    p3 = b2.open("svc", "s", 1)
    assert list(p3.iter_range(b"", None)) == [(b"a", b"1"), (b"\xff", b"2")]
    assert p3.changelog_offset() == 11
    assert (root / "svc" / "s" / "1").is_dir()
    b2.close_all()


def test_close_ends_open_iterators_and_releases_the_lock(rocks: RocksDBBackend) -> None:
    p = rocks.open("svc", "s", 0)
    p.write_batch({bytes([i]): b"v" for i in range(10)}, 1)
    it = p.iter_range(b"", None)
    next(it)  # a RocksDB iterator now exists and would keep the DB open
    unstarted = p.iter_range(b"", None)
    p.close()
    assert list(it) == []
    assert list(unstarted) == []
    other = RocksDBBackend(rocks.root)  # the LOCK is free: another owner can open it
    assert other.open("svc", "s", 0).get(b"\x03") == b"v"
    other.close_all()


def test_iteration_reads_a_snapshot_while_the_caller_writes(rocks: RocksDBBackend) -> None:
    p = rocks.open("svc", "s", 0)
    p.write_batch({b"a": b"1", b"b": b"2", b"c": b"3"}, 1)
    got = []
    for key, value in p.iter_range(b"", None):
        got.append((key, value))
        p.write_batch({b"b": None, b"c": b"new", b"bb": b"added"}, 2)
    assert got == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]
    assert list(p.iter_range(b"", None)) == [(b"a", b"1"), (b"bb", b"added"), (b"c", b"new")]


def test_approximate_size_of_a_large_store_is_an_estimate(rocks: RocksDBBackend) -> None:
    p = rocks.open("svc", "s", 0)
    p.write_batch({i.to_bytes(4, "big"): b"v" for i in range(30_000)}, 1)
    assert 15_000 <= p.approximate_size() <= 60_000


def test_data_and_offset_survive_sigkill_right_after_write_batch(tmp_path: Path) -> None:
    root = tmp_path / "state"
    child = run_child(
        root,
        """
        import os, signal
        p = backend.open("svc", "s", 2)
        p.write_batch({i.to_bytes(4, "big"): b"x" * 100 for i in range(5000)}, 5000)
        p.write_batch({(0).to_bytes(4, "big"): None, b"last": b"batch"}, 5002)
        os.kill(os.getpid(), signal.SIGKILL)  # no close, no flush, no atexit
        """,
    )
    assert child.wait(timeout=60) == -signal.SIGKILL
    b = RocksDBBackend(root)
    p = b.open("svc", "s", 2)
    assert p.changelog_offset() == 5002
    assert p.get(b"last") == b"batch"
    assert p.get((0).to_bytes(4, "big")) is None
    assert p.get((4999).to_bytes(4, "big")) == b"x" * 100
    assert p.approximate_size() == 5000
    b.close_all()


def test_partition_open_in_another_process_is_a_clear_state_error(tmp_path: Path) -> None:
    root = tmp_path / "state"
    child = run_child(
        root,
        """
        import sys
        p = backend.open("svc", "s", 7)
        p.write_batch({b"k": b"v"}, 1)
        print("ready", flush=True)
        sys.stdin.read()  # hold the partition until the parent closes our stdin
        backend.close_all()
        """,
        piped=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        b = RocksDBBackend(root)
        path = partition_path(root, "svc", "s", 7)
        with pytest.raises(StateError) as err:
            b.open("svc", "s", 7)
        message = str(err.value)
        assert str(path) in message
        assert "locked" in message
        assert "another process of the service probably owns this partition" in message
        with pytest.raises(StateError, match="locked"):
            b.drop("svc", "s", 7)  # never deletes files under a live owner
        assert (path / "CURRENT").exists()
    finally:
        assert child.stdin is not None
        child.stdin.close()
        assert child.wait(timeout=60) == 0
    p = b.open("svc", "s", 7)  # the owner is gone: now it opens, with the owner's data
    assert p.get(b"k") == b"v"
    b.close_all()


def test_two_backends_in_one_process_cannot_share_a_partition(rocks: RocksDBBackend) -> None:
    rocks.open("svc", "s", 0)
    with pytest.raises(StateError, match="is locked"):
        RocksDBBackend(rocks.root).open("svc", "s", 0)


def test_drop_deletes_the_directory_and_close_all_closes(rocks: RocksDBBackend) -> None:
    p = rocks.open("svc", "s", 0)
    q = rocks.open("svc", "s", 1)
    assert isinstance(p, RocksDBPartition)
    p.write_batch({b"k": b"v"}, 3)
    path = partition_path(rocks.root, "svc", "s", 0)
    assert path.is_dir()
    rocks.drop("svc", "s", 0)
    assert not path.exists()
    assert p.closed
    with pytest.raises(StateError):
        p.write_batch({b"k": b"v"}, 4)
    rocks.close_all()
    assert q.closed
    rocks.close_all()


def test_processes_sharing_a_state_directory_each_take_a_free_copy_of_a_global_table(tmp_path: Path) -> None:
    """``fw run --processes N`` children share ``state.dir``; each holds a whole copy of a
    global table. A copy held by another process (here: another backend) is skipped."""
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from framework.engine.globals import open_copy
        from framework.state.rocksdb import RocksDBBackend
        part = open_copy(RocksDBBackend({str(tmp_path)!r}), "svc", "products")
        print(part.path, flush=True)
        sys.stdin.read()  # holds the copy until told to go
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline()  # the other process holds copy 0
        mine = open_copy(RocksDBBackend(tmp_path), "svc", "products")
        assert isinstance(mine, RocksDBPartition) and "products@1" in str(mine.path)
        mine.close()
    finally:
        holder.communicate("")
    again = open_copy(RocksDBBackend(tmp_path), "svc", "products")  # the holder is gone: copy 0 is free
    assert isinstance(again, RocksDBPartition)
    assert "products@1" not in str(again.path) and "products" in str(again.path)
    again.close()
