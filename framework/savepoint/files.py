"""A savepoint's data as Parquet (pyarrow): one dataset (a directory of Parquet files) per store
and per repartition topic with records in flight.

A store's rows: ``partition`` (int32), ``key`` and ``value`` (binary: the store entry exactly,
docs/state-format.md sections 2 and 3), then the entry in people's terms where the pipeline's
``StoreLayout`` decodes it: ``kind`` (``state``, ``timer`` or ``meta``), ``state`` (the state
name), ``decoded_key`` (JSON text: the record key, and the window, map key or timer's time) and
``decoded_value`` (JSON text). The bytes are what a restore writes back; the decoded columns are
for people and other tools, and are null where the bytes do not decode (a registered type this
process does not know, say).

In-flight records: ``partition``, ``offset`` (in the topic the savepoint read), ``timestamp``,
``key``, ``value``, ``headers`` (a list of ``{key, value}``), in offset order per partition.
Among them are the upstream tasks' watermark control records (no key, no value, a
``fw.watermark`` header: ``is_control``), which are not the user's records.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from framework.engine.entries import StoreLayout
from framework.ops.targets import plain
from framework.time.clock import WATERMARK_HEADER

STORES_RESULT = "stores.json"  # what a savepoint's Spark job (framework.replay.snapshot) tells fw savepoint create
PART = "part-00000.parquet"  # one file per dataset now; readers take every file of the directory

STORE_SCHEMA = pa.schema([
    ("partition", pa.int32()), ("key", pa.binary()), ("value", pa.binary()), ("kind", pa.string()),
    ("state", pa.string()), ("decoded_key", pa.string()), ("decoded_value", pa.string()),
])
HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
RECORD_SCHEMA = pa.schema([
    ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", pa.int64()), ("key", pa.binary()),
    ("value", pa.binary()), ("headers", pa.list_(HEADER)),
])

Pair = tuple[int, bytes, bytes]  # partition, store key, value
InFlight = tuple[int, int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def store_rows(layout: StoreLayout, pairs: Iterable[Pair]) -> pa.Table:
    """The rows of a store's ``(partition, key, value)`` entries, decoded by ``layout``."""
    columns: dict[str, list[Any]] = {name: [] for name in STORE_SCHEMA.names}
    for partition, key, value in pairs:
        kind, state, decoded_key, decoded_value = decoded_entry(layout, key, value)
        for name, cell in zip(STORE_SCHEMA.names, (partition, key, value, kind, state, decoded_key, decoded_value)):
            columns[name].append(cell)
    return pa.table(columns, schema=STORE_SCHEMA)


def decoded_entry(layout: StoreLayout, key: bytes, value: bytes) -> tuple[str | None, str | None, str | None, str | None]:
    """The entry's kind, state name, key and value in people's terms; None where they do not decode."""
    try:
        entry = next(layout.decode(key, None))  # the key alone: a session store's value is one entry per session
    except (ValueError, IndexError, StopIteration):
        return None, None, None, None
    described = {k: v for k, v in entry.as_dict().items() if k not in ("state", "value")}
    try:
        shown: str | None = json.dumps(plain(layout.codec.decode(value)), sort_keys=True)
    except (ValueError, TypeError):
        shown = None
    return entry.kind, entry.state, json.dumps(plain(described), sort_keys=True), shown


def in_flight_rows(records: Iterable[InFlight]) -> pa.Table:
    """The rows of records ``(partition, offset, timestamp, key, value, headers)``."""
    columns: dict[str, list[Any]] = {name: [] for name in RECORD_SCHEMA.names}
    for partition, offset, timestamp, key, value, headers in records:
        for name, cell in zip(RECORD_SCHEMA.names, (partition, offset, timestamp, key, value,
                                                    [{"key": k, "value": v} for k, v in headers])):
            columns[name].append(cell)
    return pa.table(columns, schema=RECORD_SCHEMA)


def is_control(key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, bytes | None]]) -> bool:
    """Whether a record in flight is a watermark control record (docs/state-format.md, section 6), not the user's."""
    return key is None and value is None and any(name == WATERMARK_HEADER for name, _ in headers)


def write_dataset(table: pa.Table, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, directory / PART)


def read_dataset(directory: Path) -> pa.Table:
    """Every Parquet file of ``directory``, as one table."""
    files = sorted(directory.glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"no Parquet file in {directory}")
    return pa.concat_tables(pq.read_table(f) for f in files)


def store_pairs(directory: Path) -> Iterator[Pair]:
    """A store dataset's ``(partition, key, value)`` entries, one file after the other (a
    savepoint made with Spark has many)."""
    files = sorted(directory.glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"no Parquet file in {directory}")
    for f in files:
        for batch in pq.ParquetFile(f).iter_batches(columns=["partition", "key", "value"]):
            yield from zip(*(batch.column(i).to_pylist() for i in range(3)))


def in_flight_records(directory: Path) -> Iterator[InFlight]:
    """A repartition topic's in-flight records, in partition and offset order."""
    table = read_dataset(directory).sort_by([("partition", "ascending"), ("offset", "ascending")])
    for row in table.to_pylist():
        yield (row["partition"], row["offset"], row["timestamp"], row["key"], row["value"],
               [(h["key"], h["value"]) for h in row["headers"] or []])
