"""The stores of ``fw savepoint create --master``: a savepoint of state too large for one
process's memory, made by Spark (``job.py <plan> savepoint``).

What the process-local savepoint does in memory (``framework.savepoint.create``: every store
rebuilt by the runtime's restore), spread over Spark tasks:

1. **Changelog stores.** Each changelog partition, read to its end (read_committed), is cut
   into ranges of at most ``CHUNK`` offsets; one Spark task reads each range with the
   framework's own Kafka client and checks every value as the restore does (a value the state
   encoding cannot read fails the savepoint with its ``topic[partition]@offset``). A
   changelog's latest record per key is the restore's result (a restore applies the records in
   offset order, each overwriting the key's entry, a tombstone deleting it): Spark keeps, per
   store, partition and key, the record of the highest offset, and drops tombstones. Only
   this shuffle holds the entries, spilling to disk as Spark does: no process holds a store.
2. **Tables read from their own topic** (``pipeline.table``) are rebuilt by the table step's
   own code (``framework.ops.state.table_entries``), from the topic's start up to the group's
   committed offset, one Spark task per partition: a table's history rules need its
   records in order.
3. Each entry is decoded in people's terms (``framework.savepoint.files.decoded_entry``, the
   columns the process-local savepoint writes) and written as Parquet under
   ``stores/<store>/`` of the savepoint; the entries per partition and each store's ``00
   "step"`` signature go back to ``fw savepoint create`` in ``stores.json``, which writes the
   manifest with the positions it read itself.

The savepoint's directory must be one path for the driver and every executor (a local master,
or a shared file system), as for ``fw archive``.
"""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from framework.replay.plan import ReplayPlan
from framework.savepoint.files import STORES_RESULT
from framework.state.base import STEP_META_KEY

if TYPE_CHECKING:
    import pyarrow as pa

CHUNK = 500_000  # offsets of a changelog partition one Spark task reads
_STAGING = ".spark-stores"  # written by Spark, moved to stores/<store> once complete
_READ = "sid int, partition int, key binary, offset long, value binary"
Setup = Callable[[str], tuple[ReplayPlan, Any]]  # the plan's JSON -> the plan and the pipeline, once per worker
Settings = Callable[[ReplayPlan], dict[str, Any]]
_ENTRIES = ("sid int, partition int, key binary, value binary, kind string, state string, decoded_key string, "
            "decoded_value string")


def savepoint_stores(spark: SparkSession, plan: ReplayPlan, setup: Setup, kafka_settings: Settings) -> dict[str, Any]:
    """Write every store of ``plan.savepoint`` under its directory; returns, and writes as
    ``stores.json``, each store's entries per partition and its signature (base64 of the ``00
    "step"`` entry's value, or null). ``setup`` and ``kafka_settings`` are the job's (``job.py``):
    a Python worker's plan and pipeline, made once, and the cluster's settings there."""
    assert plan.savepoint is not None
    stores: list[str] = list(plan.savepoint["stores"])
    tables = set(plan.savepoint["tables"])
    target = Path(plan.savepoint["path"])
    staging = target / _STAGING
    read_ranges, table_parts = [], []
    for sid, store in enumerate(stores):
        topic = plan.savepoint["stores"][store]
        for p, (start, end) in sorted(plan.ranges.get(topic, {}).items()):
            if store in tables:
                table_parts.append((sid, int(p), int(start), int(end)))
            else:
                read_ranges += [(sid, int(p), a, min(a + CHUNK, int(end))) for a in range(int(start), int(end), CHUNK)]
    plan_json = plan.to_json()
    frames = []
    if read_ranges:
        changes = _ranges(spark, read_ranges).mapInArrow(_read_function(plan_json, setup, kafka_settings), _READ)
        latest = (changes.groupBy("sid", "partition", "key")
                  .agg(F.max(F.struct("offset", "value")).alias("last"))
                  .select("sid", "partition", "key", F.col("last.value").alias("value"))
                  .where(F.col("value").isNotNull()))
        frames.append(latest.mapInArrow(_decode_function(plan_json, setup), _ENTRIES))
    if table_parts:
        frames.append(_ranges(spark, table_parts).mapInArrow(_table_function(plan_json, setup, kafka_settings), _ENTRIES))
    counts: dict[str, dict[int, int]] = {s: {} for s in stores}
    signatures: dict[str, str | None] = {s: None for s in stores}
    if frames:
        entries = frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])
        entries.write.mode("overwrite").partitionBy("sid").parquet(str(staging))
        written = spark.read.parquet(str(staging))
        for row in written.groupBy("sid", "partition").count().collect():
            counts[stores[row.sid]][int(row.partition)] = int(row["count"])
        for row in written.where(F.col("kind") == "meta").select("sid", "key", "value").collect():
            if bytes(row.key) == STEP_META_KEY:
                signatures[stores[row.sid]] = base64.b64encode(bytes(row.value)).decode()
    for sid, store in enumerate(stores):
        _place(staging / f"sid={sid}", target / "stores" / store)
    shutil.rmtree(staging, ignore_errors=True)
    result = {"counts": counts, "signatures": signatures}
    (target / STORES_RESULT).write_text(json.dumps(result))
    return result


def _ranges(spark: SparkSession, rows: list[tuple[int, int, int, int]]) -> DataFrame:
    """One Spark partition per ``(sid, partition, start, end)`` row: each a task of its own."""
    return spark.createDataFrame(rows, "sid int, partition int, start long, end long").repartition(len(rows))


def _place(written: Path, store_dir: Path) -> None:
    """A store's Parquet files from Spark's staging directory (none: the store is empty, and
    an empty file with its columns stands for it)."""
    store_dir.mkdir(parents=True, exist_ok=True)
    files = sorted(written.glob("*.parquet")) if written.is_dir() else []
    for f in files:
        f.replace(store_dir / f.name)
    if not files:
        from framework.savepoint.files import STORE_SCHEMA, write_dataset

        write_dataset(STORE_SCHEMA.empty_table(), store_dir)


def _range_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[int, int, int, int]]:
    for batch in batches:
        yield from zip(*(batch.column(i).to_pylist() for i in range(4)))


def _read_function(plan_json: str, setup: Setup, kafka_settings: Settings) -> Any:
    """The ``mapInArrow`` function of a changelog range: its committed records as
    ``(sid, partition, key, offset, value)``, each value checked as the restore checks it."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        from framework.engine.runner import checked_changelog
        from framework.kafka.clients import read_range
        from framework.serde.values import ValueCodec

        plan, pipeline = setup(plan_json)
        assert plan.savepoint is not None
        stores = list(plan.savepoint["stores"])
        decode = ValueCodec(pipeline.types).decode
        settings, reader = kafka_settings(plan), f"{plan.service}-savepoint-{plan.run_id}"
        for sid, p, start, end in _range_rows(batches):
            store = stores[sid]
            topic = plan.savepoint["stores"][store]
            for run in read_range(settings, reader, topic, p, start, end):
                records = [(cast(int, m.offset()), m.key(), m.value(), 0) for m in run]
                checked = list(checked_changelog(pipeline.name, store, topic, p, records, decode))
                offsets, keys, values = (list(c) for c in zip(*checked)) if checked else ([], [], [])
                n = len(keys)
                yield pa.RecordBatch.from_pydict({"sid": pa.array([sid] * n, pa.int32()),
                                                  "partition": pa.array([p] * n, pa.int32()),
                                                  "key": pa.array(keys, pa.binary()),
                                                  "offset": pa.array(offsets, pa.int64()),
                                                  "value": pa.array(values, pa.binary())})

    return run


def _entry_batch(layout_of: Any, rows: list[tuple[int, int, bytes, bytes]]) -> pa.RecordBatch:
    """``(sid, partition, key, value)`` entries with their decoded columns."""
    import pyarrow as pa

    from framework.savepoint.files import decoded_entry

    columns: dict[str, list[Any]] = {n: [] for n in ("sid", "partition", "key", "value", "kind", "state",
                                                     "decoded_key", "decoded_value")}
    for sid, p, key, value in rows:
        cells = (sid, p, key, value, *decoded_entry(layout_of(sid), key, value))
        for name, cell in zip(columns, cells):
            columns[name].append(cell)
    types = [pa.int32(), pa.int32(), pa.binary(), pa.binary()] + [pa.string()] * 4
    return pa.RecordBatch.from_arrays([pa.array(columns[n], t) for n, t in zip(columns, types)], list(columns))


def _layouts(plan: ReplayPlan, pipeline: Any) -> Any:
    """``sid -> StoreLayout``, each made once."""
    from framework.engine.entries import StoreLayout

    assert plan.savepoint is not None
    stores = list(plan.savepoint["stores"])
    made: dict[int, StoreLayout] = {}

    def layout(sid: int) -> StoreLayout:
        if sid not in made:
            made[sid] = StoreLayout(pipeline, stores[sid])
        return made[sid]

    return layout


def _decode_function(plan_json: str, setup: Setup) -> Any:
    """The ``mapInArrow`` function that adds the decoded columns to ``(sid, partition, key,
    value)`` entries."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        plan, pipeline = setup(plan_json)
        layout = _layouts(plan, pipeline)
        for batch in batches:
            if batch.num_rows:
                yield _entry_batch(layout, list(zip(*(batch.column(i).to_pylist() for i in range(4)))))

    return run


def _table_function(plan_json: str, setup: Setup, kafka_settings: Settings) -> Any:
    """The ``mapInArrow`` function that rebuilds a table's partition from its topic
    (``table_entries``) and returns its entries, decoded."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from framework.ops.state import table_entries

        plan, pipeline = setup(plan_json)
        assert plan.savepoint is not None
        stores = list(plan.savepoint["stores"])
        layout = _layouts(plan, pipeline)
        settings, reader = kafka_settings(plan), f"{plan.service}-savepoint-{plan.run_id}"
        for sid, p, start, end in _range_rows(batches):
            rows: list[tuple[int, int, bytes, bytes]] = []
            for key, value in table_entries(pipeline, settings, plan.partitions, stores[sid], p, start, end, reader):
                rows.append((sid, p, key, value))
                if len(rows) == 4_096:
                    yield _entry_batch(layout, rows)
                    rows = []
            if rows:
                yield _entry_batch(layout, rows)

    return run
