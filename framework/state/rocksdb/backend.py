"""RocksDB store backend: one RocksDB instance per store partition, via rocksdict.

This is the only module that imports rocksdict. Each partition lives in
``partition_path(root, service, store, partition)`` and holds two column families:

- ``default``: the user's keys and values, raw bytes, bytewise (memcmp) order;
- ``__meta__``: ``b"changelog_offset"`` -> 8-byte big-endian signed offset;
  ``b"changelog_id"`` -> the changelog's topic id (UTF-8) and ``b"format"`` -> the state
  format (ASCII decimal), written together.

The offset is written in the same ``WriteBatch`` as the data it reflects (a rocksdict
``WriteBatch`` spans column families via ``put(..., column_family=handle)``), so both are
durable together or not at all. Keeping it in its own column family means user key space
is untouched: any bytes are a valid key and ``iter_range`` never has to skip metadata.
"""

from __future__ import annotations

import shutil
import threading
import weakref
from collections.abc import Generator, Iterator, Mapping
from pathlib import Path

from rocksdict import (
    BlockBasedOptions,
    Cache,
    ColumnFamily,
    DBCompressionType,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteBufferManager,
)

from framework.errors import StateError, StoreLocked
from framework.state.base import STATE_FORMAT, partition_path

META_CF = "__meta__"
OFFSET_KEY = b"changelog_offset"
CHANGELOG_ID_KEY = b"changelog_id"
FORMAT_KEY = b"format"

# Below this estimated size approximate_size() counts keys exactly: RocksDB's estimate counts
# every memtable entry (overwrites too) minus tombstones (even of keys that never existed), so
# it is far off for small stores, where an exact count is cheap and bounded-state tests want it.
_EXACT_COUNT_BELOW = 10_000
_EXACT_COUNT_CAP = 100_000  # the estimate can be low (tombstones): never scan without bound

# Memory, per backend (one backend per process). A task's state store sees small, frequent
# batches (one per checkpoint) and many point lookups; a process hosts many small partitions.
_BLOCK_CACHE_BYTES = 64 << 20  # shared by all partitions, so it follows the hot ones
_WRITE_BUFFER_BYTES = 8 << 20  # per memtable: moderate, cheap to flush, small WAL to replay
_ALL_MEMTABLES_BYTES = 128 << 20  # cap over all partitions, however many are open


def _is_lock_error(exc: BaseException) -> bool:
    # rocksdict raises a bare Exception carrying RocksDB's status text: "While lock file:
    # <dir>/LOCK: Resource temporarily unavailable" (another process) or "lock hold by current
    # process" (same process, another handle).
    return "lock" in str(exc).lower()


def _locked(path: Path, label: str, exc: BaseException) -> StoreLocked:
    return StoreLocked(
        f"state store {label} at {path} is locked: another process of the service probably "
        f"owns this partition (or another backend in this process has it open); stop it or "
        f"let the group rebalance move the partition, then retry. RocksDB said: {exc}"
    )


class RocksDBPartition:
    """A ``StorePartition`` over one RocksDB instance. One task owns it; other threads may
    only ``read_chunk`` (live queries), which ``close`` waits for."""

    __slots__ = ("_changelog_id", "_closing", "_db", "_format", "_meta_cf", "_offset", "_path", "_scans")

    def __init__(self, path: Path, options: Options, label: str = "partition") -> None:
        self._path = path
        try:
            db = Rdict(str(path), options, column_families={META_CF: options})
        except Exception as exc:
            if _is_lock_error(exc):
                raise _locked(path, label, exc) from exc
            raise StateError(f"cannot open state store {label} at {path}: {exc}") from exc
        self._db: Rdict | None = db
        self._meta_cf: ColumnFamily | None = db.get_column_family_handle(META_CF)
        # Cached: write_batch is the only writer, so memory and disk never disagree.
        meta = db.get_column_family(META_CF)
        raw = meta.get(OFFSET_KEY)
        self._offset: int | None = None if raw is None else int.from_bytes(raw, "big", signed=True)
        raw_id, raw_format = meta.get(CHANGELOG_ID_KEY), meta.get(FORMAT_KEY)
        self._changelog_id: str | None = None if raw_id is None else raw_id.decode()
        self._format: int | None = None if raw_format is None else int(raw_format)
        # Live iter_range generators: each holds a RocksDB iterator, which keeps the DB (and its
        # LOCK) alive after Rdict.close(); close() ends them so the partition really closes.
        self._scans: weakref.WeakSet[Generator[tuple[bytes, bytes], None, None]] = (
            weakref.WeakSet()
        )
        # Held by a reader of another thread for one chunk, and by close: no iterator of that
        # thread outlives the chunk, so none keeps the database (and its LOCK) open past close.
        self._closing = threading.Lock()

    @property
    def path(self) -> Path:
        return self._path

    @property
    def closed(self) -> bool:
        return self._db is None

    def _live(self) -> Rdict:
        if self._db is None:
            raise StateError(f"state store partition at {self._path} is closed")
        return self._db

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self._live().get(key)
        return value

    def iter_range(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        scan = self._scan(self._live(), start, end)
        self._scans.add(scan)
        return scan

    def _scan(
        self, db: Rdict, start: bytes, end: bytes | None
    ) -> Generator[tuple[bytes, bytes], None, None]:
        if end is not None and start >= end:
            return
        opts = ReadOptions()
        if end is not None:
            # RocksDB stops at the bound itself, without stepping over tombstones beyond it.
            opts.set_iterate_upper_bound(end)
        # The iterator reads an implicit snapshot taken here: callers may get() (and even
        # write) while iterating; they see the range as it was when iteration started.
        it = db.iter(opts)
        it.seek(start)
        while it.valid():
            yield it.key(), it.value()
            it.next()
        it.status()  # raises if iteration stopped on an I/O or corruption error, not at the end

    def read_chunk(self, start: bytes, end: bytes | None, n: int) -> list[tuple[bytes, bytes]]:
        """Up to ``n`` pairs from ``start`` (``iter_range``'s order), for a thread other than
        the owner's: committed data only (the owner's write cache is not here), read while
        ``close`` waits. A ``StateError`` when the partition was closed (its task moved)."""
        with self._closing:
            db = self._live()
            out: list[tuple[bytes, bytes]] = []
            scan = self._scan(db, start, end)
            try:
                for pair in scan:
                    out.append(pair)
                    if len(out) >= n:
                        break
            finally:
                scan.close()
            return out

    def write_batch(
        self, changes: Mapping[bytes, bytes | None], changelog_offset: int | None,
        changelog_id: str | None = None,
    ) -> None:
        db = self._live()
        batch = WriteBatch(raw_mode=True)
        for key, value in changes.items():
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        if changelog_offset is not None:
            batch.put(OFFSET_KEY, changelog_offset.to_bytes(8, "big", signed=True), self._meta_cf)
        if changelog_id is not None:
            batch.put(CHANGELOG_ID_KEY, changelog_id.encode(), self._meta_cf)
            batch.put(FORMAT_KEY, str(STATE_FORMAT).encode(), self._meta_cf)
        if batch.is_empty():
            return
        try:
            # Default write options: the batch goes to the WAL (write(2) before returning), so
            # it survives the process being killed; no fsync per batch, so not an OS crash.
            # That is the changelog's job: a partition lost with its machine is restored.
            db.write(batch)
        except Exception as exc:
            raise StateError(f"cannot write state store partition at {self._path}: {exc}") from exc
        if changelog_offset is not None:
            self._offset = changelog_offset
        if changelog_id is not None:
            self._changelog_id, self._format = changelog_id, STATE_FORMAT

    def changelog_offset(self) -> int | None:
        self._live()
        return self._offset

    def changelog_id(self) -> str | None:
        self._live()
        return self._changelog_id

    def state_format(self) -> int | None:
        self._live()
        return self._format

    def approximate_size(self) -> int:
        db = self._live()
        estimate = db.property_int_value("rocksdb.estimate-num-keys") or 0
        if estimate >= _EXACT_COUNT_BELOW:
            return estimate
        count = 0
        for _ in self._scan(db, b"", None):
            count += 1
            if count >= _EXACT_COUNT_CAP:
                break
        return count

    def estimated_entries(self) -> int:
        """RocksDB's own estimate of the number of keys (no scan: for metrics)."""
        return self._live().property_int_value("rocksdb.estimate-num-keys") or 0

    def size_bytes(self) -> int:
        """Bytes the store holds, from RocksDB's own estimates: live data in SST files plus
        the memtables (for metrics)."""
        db = self._live()
        return sum(db.property_int_value(name) or 0
                   for name in ("rocksdb.estimate-live-data-size", "rocksdb.cur-size-all-mem-tables"))

    def close(self) -> None:
        """Flush and release the DB and its LOCK; idempotent. Open ``iter_range``s end."""
        with self._closing:
            self._close()

    def _close(self) -> None:
        db = self._db
        if db is None:
            return
        for scan in list(self._scans):
            scan.close()
        self._scans.clear()
        # Drop every handle first: any live one keeps RocksDB open after Rdict.close().
        self._db = None
        self._meta_cf = None
        try:
            db.close()
        except Exception as exc:
            raise StateError(f"cannot close state store partition at {self._path}: {exc}") from exc


class RocksDBBackend:
    """A ``StoreBackend`` keeping partitions under ``root``; one per process.

    ``open`` returns the same partition object until it is closed. Partitions share one
    block cache and one memtable budget, so memory stays bounded however many are open.
    """

    def __init__(self, root: Path) -> None:
        self._root = Path(root)
        self._cache = Cache(_BLOCK_CACHE_BYTES)
        # allow_stall=False: over budget RocksDB flushes the biggest memtables early
        # rather than blocking writers (a blocked task would miss its poll deadline).
        self._memtables = WriteBufferManager(_ALL_MEMTABLES_BYTES, False)
        self._parts: dict[tuple[str, str, int], RocksDBPartition] = {}
        self._lock = threading.Lock()

    @property
    def root(self) -> Path:
        return self._root

    def _options(self) -> Options:
        opts = Options(raw_mode=True)  # bytes in, bytes out, bytewise comparator
        opts.create_if_missing(True)
        opts.create_missing_column_families(True)
        # Flush data and meta column families together: the meta CF gets one tiny entry per
        # batch and would otherwise pin every WAL file until max_total_wal_size forced it out.
        opts.set_atomic_flush(True)
        opts.set_max_total_wal_size(64 << 20)
        opts.set_write_buffer_size(_WRITE_BUFFER_BYTES)
        opts.set_max_write_buffer_number(2)  # one filling while one flushes
        opts.set_write_buffer_manager(self._memtables)
        # LZ4 (linked into rocksdict's RocksDB): cheap on CPU, state values compress well.
        opts.set_compression_type(DBCompressionType.lz4())
        # Two cores: background flush/compaction must not starve the task threads.
        opts.set_max_background_jobs(2)
        # Many partitions per process: bound file descriptors and info-log clutter.
        opts.set_max_open_files(256)
        opts.set_keep_log_file_num(2)
        opts.set_max_log_file_size(1 << 20)
        table = BlockBasedOptions()
        table.set_block_cache(self._cache)
        # Full bloom filters: most reads are point gets, many for keys not (yet) in the store.
        table.set_bloom_filter(10, False)
        # Index/filter blocks count against the shared cache instead of growing unbounded.
        table.set_cache_index_and_filter_blocks(True)
        table.set_pin_l0_filter_and_index_blocks_in_cache(True)
        opts.set_block_based_table_factory(table)
        return opts

    def open(self, service: str, store: str, partition: int) -> RocksDBPartition:
        key = (service, store, partition)
        with self._lock:
            part = self._parts.get(key)
            if part is not None and not part.closed:
                return part
            path = partition_path(self._root, service, store, partition)
            path.mkdir(parents=True, exist_ok=True)
            label = f"{service}/{store} partition {partition}"
            part = RocksDBPartition(path, self._options(), label)
            self._parts[key] = part
            return part

    def opened(self, service: str, store: str, partition: int) -> RocksDBPartition | None:
        """The partition if this backend has it open now, else None (never opens one: for
        readers outside the task, such as live queries)."""
        with self._lock:
            part = self._parts.get((service, store, partition))
        return None if part is None or part.closed else part

    def drop(self, service: str, store: str, partition: int) -> None:
        """Close the partition if open here and delete its directory."""
        with self._lock:
            part = self._parts.pop((service, store, partition), None)
            if part is not None:
                part.close()
            path = partition_path(self._root, service, store, partition)
            if not path.exists():
                return
            try:
                # DestroyDB takes the LOCK first: we never delete files under a live owner.
                Rdict.destroy(str(path), Options(raw_mode=True))
            except Exception as exc:
                if _is_lock_error(exc):
                    raise _locked(path, f"{service}/{store} partition {partition}", exc) from exc
                # Anything else (half-created, corrupt): dropping is exactly the remedy.
            try:
                shutil.rmtree(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise StateError(f"cannot delete state store directory {path}: {exc}") from exc

    def drop_store(self, service: str, store: str) -> None:
        """Delete every partition of ``store`` as ``drop`` does (refused, with nothing of that
        partition deleted, for one a live process holds), then the store's directory."""
        directory = self._root / service / store
        if not directory.is_dir():
            return
        for child in sorted(directory.iterdir()):
            if child.name.isdigit():
                self.drop(service, store, int(child.name))
        try:
            shutil.rmtree(directory)
        except OSError as exc:
            raise StateError(f"cannot delete state store directory {directory}: {exc}") from exc

    def close_all(self) -> None:
        with self._lock:
            parts = list(self._parts.values())
            self._parts.clear()
        for part in parts:
            part.close()
