"""Reading a store partition's RocksDB files without owning them (``fw state``).

A partition is opened read-only: nothing is written (no recovery flush, no new log or
manifest), so a stopped member finds its state exactly as it left it. RocksDB's read-only
mode does not take the database's LOCK, so it would also open a partition a running member
holds and read a view that keeps changing under it; ``lock_holder`` tells that case apart
first, and the caller refuses it.
"""

from __future__ import annotations

import fcntl
import os
import struct
from collections.abc import Iterator
from pathlib import Path

from rocksdict import AccessType, Options, Rdict, ReadOptions

from framework.errors import StateError
from framework.state.rocksdb.backend import CHANGELOG_ID_KEY, FORMAT_KEY, META_CF, OFFSET_KEY

# struct flock on Linux (x86-64, arm64): l_type, l_whence (short), l_start, l_len (off_t),
# l_pid (pid_t), padded to 8 bytes.
_FLOCK = struct.Struct("hhqqi4x")


def lock_holder(path: Path) -> int | None:
    """The pid of the process that holds the RocksDB LOCK of the database at ``path`` (-1:
    held, by an unknown process), or None when nobody holds it or it cannot be told.

    RocksDB locks ``LOCK`` with a POSIX record lock. The question is asked with F_OFD_GETLK,
    which takes no lock itself. Never call this from a process that has the database open:
    closing any descriptor of a file drops every POSIX lock the process holds on it.
    """
    getlk = getattr(fcntl, "F_OFD_GETLK", None)  # Linux only; elsewhere the question is not asked
    lock_file = path / "LOCK"
    if getlk is None or not lock_file.exists():
        return None
    fd = os.open(lock_file, os.O_RDONLY)
    try:
        answer = fcntl.fcntl(fd, getlk, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0))
    except OSError:
        return None
    finally:
        os.close(fd)
    kind, _, _, _, pid = _FLOCK.unpack(answer)
    if kind == fcntl.F_UNLCK:
        return None
    return pid if pid > 0 else -1


class ReadOnlyPartition:
    """A store partition's data and meta, read-only: ``get``, ``iter_range`` and the
    changelog offset, topic id and state format it reflects (``framework.state.base``)."""

    def __init__(self, path: Path, label: str) -> None:
        self.path = path
        holder = lock_holder(path)
        if holder is not None:
            who = f"process {holder}" if holder > 0 else "another process"
            raise StateError(f"state store {label} at {path} is open in {who}, a running member of the service: "
                             "stop it first (its local copy changes while it runs), or read the committed state "
                             "from the changelog with --source changelog")
        opts = Options(raw_mode=True)
        try:
            self._db = Rdict(str(path), opts, column_families={META_CF: opts},
                             access_type=AccessType.read_only(False))
        except Exception as exc:  # rocksdict raises a bare Exception with RocksDB's status text
            raise StateError(f"cannot open state store {label} at {path} read-only: {exc}") from exc
        meta = self._db.get_column_family(META_CF)
        raw_offset, raw_id, raw_format = meta.get(OFFSET_KEY), meta.get(CHANGELOG_ID_KEY), meta.get(FORMAT_KEY)
        self.changelog_offset = None if raw_offset is None else int.from_bytes(raw_offset, "big", signed=True)
        self.changelog_id = None if raw_id is None else bytes(raw_id).decode()
        self.state_format = None if raw_format is None else int(raw_format)

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self._db.get(key)
        return value

    def iter_range(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """Pairs with ``start <= key < end`` (``end=None``: to the last key), ascending."""
        opts = ReadOptions()
        if end is not None:
            opts.set_iterate_upper_bound(end)
        it = self._db.iter(opts)
        it.seek(start)
        while it.valid():
            yield it.key(), it.value()
            it.next()
        it.status()  # raises if iteration stopped on an I/O or corruption error, not at the end

    def close(self) -> None:
        self._db.close()
