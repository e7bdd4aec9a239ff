"""A savepoint's stores as Spark DataFrames, and a savepoint written from DataFrames: state with
Spark, as Flink's State Processor API offers it (docs/savepoints.md, "State with Spark").

``read(spark, path, store)`` is Spark SQL over the store's Parquet dataset, whose decoded
columns ``create`` (and ``write``) wrote with the pipeline's own serdes: no Python runs on the
executors, so any master reads it (a cluster's executors need the savepoint at the same path:
a shared file system). ``write(path, pipeline, stores={name: DataFrame})`` pulls each
DataFrame's rows to the driver (``toLocalIterator``), where ``compose`` encodes and checks them
with the target pipeline's serdes before it writes the directory.

This module never imports pyspark (only ``framework.replay`` does): it drives the session and
the DataFrames it is handed, so the framework stays importable without it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from framework.errors import ConfigError
from framework.pipeline.definition import Pipeline
from framework.pipeline.loading import load_pipeline
from framework.savepoint.compose import compose_savepoint, rows_of
from framework.savepoint.manifest import Manifest

# The columns of a store read decoded: the entry in people's terms from the JSON columns of
# the dataset (docs/savepoints.md), then its bytes.
DECODED = (
    "partition", "kind", "state",
    "get_json_object(decoded_key, '$.key') AS key",
    "CAST(get_json_object(decoded_key, '$.window_start') AS BIGINT) AS window_start",
    "CAST(get_json_object(decoded_key, '$.window_end') AS BIGINT) AS window_end",
    "get_json_object(decoded_key, '$.map_key') AS map_key",
    "CAST(get_json_object(decoded_key, '$.timer') AS BIGINT) AS timer",
    "decoded_value AS value",
    "key AS key_bytes", "value AS value_bytes",
)
RAW = ("partition", "key AS key_bytes", "value AS value_bytes")


def read(spark: Any, path: str | Path, store: str, *, decoded: bool = True) -> Any:
    """The entries of ``store`` in the savepoint at ``path`` (a local or shared file-system
    path) as a DataFrame of ``spark`` (a ``SparkSession``). Decoded: ``partition``, ``kind``
    (``state``, ``timer``, ``meta``), ``state``, ``key`` (the record key as text: a string
    itself, other keys as JSON), ``window_start``/``window_end``, ``map_key``, ``timer``
    (null where the entry has none), ``value`` (JSON text), ``key_bytes``, ``value_bytes``.
    ``decoded=False``: ``partition``, ``key_bytes``, ``value_bytes`` only."""
    root = Path(path).resolve()
    manifest = Manifest.load(root)
    info = manifest.stores.get(store)
    if info is None:
        raise ConfigError(f"savepoint {root} has no store {store!r}; its stores: "
                          f"{', '.join(sorted(manifest.stores)) or 'none'}")
    frame = spark.read.parquet((root / info.path).as_uri())
    return frame.selectExpr(*(DECODED if decoded else RAW))


def write(path: str | Path, pipeline: Pipeline | str, stores: Mapping[str, Any], *,
          base: str | Path | None = None, offsets: Mapping[str, Mapping[int, int]] | None = None,
          partitions: int | None = None) -> Manifest:
    """Write a new savepoint of ``pipeline`` (a ``Pipeline`` or ``module:pipeline``) at ``path``
    (a new or empty directory): each store of ``stores`` (name -> DataFrame, or any iterable of
    mappings) from rows ``key``, ``value`` (as ``read`` gives them; other columns may stay),
    every other store, the records in flight and the offsets from the savepoint ``base``.
    Without ``base`` (a bootstrap), ``partitions`` and ``offsets`` are needed. Every row is
    checked before anything is written; return the manifest written."""
    target = _pipeline(pipeline)
    rows = {name: rows_of(_records(frame)) for name, frame in stores.items()}
    return compose_savepoint(Path(path), target, rows, base=None if base is None else Path(base),
                             offsets=offsets, partitions=partitions)


def _pipeline(pipeline: Pipeline | str) -> Pipeline:
    if isinstance(pipeline, Pipeline):
        return pipeline
    return load_pipeline(pipeline)


def _records(frame: Any) -> Iterable[Any]:
    """A DataFrame's rows, streamed to the driver a partition at a time; other iterables as they are."""
    local = getattr(frame, "toLocalIterator", None)
    return local() if callable(local) else frame
