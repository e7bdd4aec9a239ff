"""A savepoint's files read whole and checked against its manifest before a restore changes
anything (docs/savepoints.md, "Checked before anything changes").

``fw savepoint create`` (and ``framework.savepoint.write``) lists every Parquet file of the
savepoint in the manifest's ``files`` (``checksums``): its path, the SHA-256 of its bytes and its
rows. ``verify`` reads every file a restore writes from, whole, and refuses in one line naming
the file and the fix (a ``RuntimeProblem``) unless:

1. a dataset's files are those the manifest lists: none missing, none added;
2. each file reads whole as Parquet with the dataset's columns (a truncated file is refused);
3. each file's bytes have the SHA-256 listed (a file altered, or replaced by another valid
   Parquet file, is refused), and it has the rows listed;
4. a store's rows per partition are the manifest's ``entries``; a repartition topic's rows are
   its records in flight and its watermark control records.

A savepoint of an earlier release lists no files: 1 and 3 cannot be checked, 2 and 4 are.
``verify`` returns the SHA-256 of every file it read, of such a savepoint too, and ``unchanged``
checks them again just before a restore changes anything: a file altered in between is refused
as well.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from framework.errors import RuntimeProblem
from framework.savepoint.files import RECORD_SCHEMA, is_control
from framework.savepoint.manifest import FileInfo, Manifest

_STORE_COLUMNS = ("partition", "key", "value")
_CHUNK = 1 << 20


@dataclass
class Verified:
    """What ``verify`` read: each file's SHA-256 (path relative to the savepoint -> hex), and
    per repartition topic the user's records in flight its files hold."""

    digests: dict[str, str] = field(default_factory=dict)
    records: dict[str, int] = field(default_factory=dict)
    checksummed: bool = True  # the manifest listed the files' SHA-256 (not a savepoint of an earlier release)


def checksums(directory: Path, manifest: Manifest) -> dict[str, FileInfo]:
    """The ``files`` of the manifest: every Parquet file of every dataset it names (its stores'
    and its records in flight), with its SHA-256 and its rows."""
    datasets = [i.path for i in manifest.stores.values()] + [r.path for r in manifest.repartition.values()]
    return {relative: FileInfo(_sha256(directory / relative), pq.ParquetFile(directory / relative).metadata.num_rows)
            for dataset in sorted(set(datasets)) for relative in _present(directory, dataset)}


def verify(path: Path, manifest: Manifest, stores: Iterable[str], topics: Iterable[str]) -> Verified:
    """Read every file of ``stores`` and of the records in flight of ``topics`` whole and check
    it against ``manifest`` (module docstring); a ``RuntimeProblem`` naming the first that is not."""
    verified = Verified(checksummed=bool(manifest.files))
    for store in sorted(stores):
        info = manifest.stores[store]
        counts: Counter[int] = Counter()
        for _, table in _tables(path, manifest, info.path, _STORE_COLUMNS, verified):
            counts.update(table.column("partition").to_pylist())
        for p in sorted(set(counts) | set(info.entries)):
            if counts[p] != info.entries.get(p, 0):
                raise damaged(path, manifest, f"the files of store {store!r} ({path / info.path}) hold {counts[p]} "
                                              f"entries of partition {p}, and its manifest counts "
                                              f"{info.entries.get(p, 0)}")
    for topic in sorted(topics):
        flight = manifest.repartition[topic]
        rows = control = 0
        for _, table in _tables(path, manifest, flight.path, tuple(RECORD_SCHEMA.names), verified):
            rows += table.num_rows
            control += sum(is_control(k, v, [(h["key"], h["value"]) for h in hs or []]) for k, v, hs in zip(
                table.column("key").to_pylist(), table.column("value").to_pylist(),
                table.column("headers").to_pylist()))
        if rows != flight.rows:
            raise damaged(path, manifest, f"the files of the records in flight of {topic} ({path / flight.path}) "
                                          f"hold {rows} records, and its manifest counts {flight.rows}")
        verified.records[topic] = rows - control
    return verified


def unchanged(path: Path, digests: dict[str, str]) -> None:
    """The files ``verify`` read are still there as it read them, and no other was added to
    their datasets; else a ``RuntimeProblem`` naming the file (nothing changed yet)."""
    datasets = {relative.rsplit("/", 1)[0] for relative in digests}
    now = {relative for dataset in datasets for relative in _present(path, dataset)}
    for relative in sorted(now | set(digests)):
        what = ("was added" if relative not in digests else "is gone" if relative not in now
                else "was altered" if _sha256(path / relative) != digests[relative] else None)
        if what is not None:
            raise RuntimeProblem(f"savepoint {path} changed after it was checked: {path / relative} {what}; nothing "
                                 "was changed. Fix: leave the savepoint's files as they are while it is restored, "
                                 "and restore it again")


def damaged(path: Path, manifest: Manifest, what: str) -> RuntimeProblem:
    """The line of a savepoint whose files are not as its manifest says."""
    return RuntimeProblem(f"savepoint {path} is damaged: {what}; nothing was changed. Fix: restore another "
                          f"savepoint of {manifest.service!r} (fw savepoint list {manifest.service}), or copy this "
                          "one again from where it was made")


def _tables(path: Path, manifest: Manifest, dataset: str, columns: tuple[str, ...],
            verified: Verified) -> Iterator[tuple[str, pa.Table]]:
    """Each file of ``dataset`` read whole (every column: every page decoded), checked
    against the manifest's ``files`` where it lists them."""
    present = _present(path, dataset)
    if manifest.files:
        listed = [f for f in manifest.files if f.rsplit("/", 1)[0] == dataset]
        for relative in sorted(set(listed) ^ set(present)):
            if relative in present:
                raise damaged(path, manifest, f"{path / relative} is not one of its files (its manifest does not "
                                              "list it), and a restore would write its rows too")
            raise damaged(path, manifest, f"{path / relative} is missing")
    elif not present:
        raise damaged(path, manifest, f"{path / dataset} holds no Parquet file")
    for relative in present:
        yield relative, _read(path, manifest, relative, columns, verified)


def _read(path: Path, manifest: Manifest, relative: str, columns: tuple[str, ...], verified: Verified) -> pa.Table:
    """The file's bytes read once, hashed and decoded whole. Decoded on this thread, without
    pyarrow's thread pools: a command that exited right after ``pq.read_table`` had used them
    aborted now and then at exit ("terminate called without an active exception", 5 in 120
    dry runs of a service's savepoint; none in 90 this way)."""
    file = path / relative
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise damaged(path, manifest, f"{file} cannot be read ({exc.strerror})") from None
    try:
        table = pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
    except (pa.ArrowException, OSError, ValueError) as exc:
        said = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        said = said.split("'<Buffer>': ", 1)[-1]  # the reader's name for the bytes: the file is named already
        raise damaged(path, manifest, f"{file} is not readable Parquet ({said})") from None
    digest = hashlib.sha256(data).hexdigest()
    listed = manifest.files.get(relative)
    if listed is not None and digest != listed.sha256:
        raise damaged(path, manifest, f"{file} is not the file the savepoint wrote (its SHA-256 is {digest[:16]}..., "
                                      f"its manifest lists {listed.sha256[:16]}...)")
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise damaged(path, manifest, f"{file} has no column {', '.join(missing)}")
    if listed is not None and table.num_rows != listed.rows:
        raise damaged(path, manifest, f"{file} holds {table.num_rows} rows, and its manifest lists {listed.rows}")
    verified.digests[relative] = digest
    return table


def _present(path: Path, dataset: str) -> list[str]:
    """The Parquet files of ``dataset`` (relative to the savepoint), as its readers take them."""
    return [f"{dataset}/{f.name}" for f in sorted((path / dataset).glob("*.parquet"))]


def _sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with file.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
