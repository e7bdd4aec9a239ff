"""Savepoints: a service's complete state and positions, kept as files, and put back.

A savepoint is a directory (docs/savepoints.md):

- ``manifest.json`` (``manifest``): the service, when, the partition count, the pipeline's
  description and its hash, each store's entry counts, the group's committed offsets, each
  repartition topic's committed and end offsets, and each Parquet file's SHA-256 and rows;
- ``stores/<store>/part-00000.parquet`` (``files``): every entry of every task's store
  partition, the bytes of docs/state-format.md and, where the pipeline's ``StoreLayout``
  decodes them, the entry in people's terms as JSON text;
- ``in-flight/<repartition topic>/part-00000.parquet``: the records a repartition topic held
  between the group's committed offset and its end (written, not yet processed).

``create`` makes one of a running service (its members held at a checkpoint meanwhile:
``hold``) or of a stopped one: the stores rebuilt in memory by the runtime's own restore
(``framework.ops.state.rebuild_stores``), which is the state as of that checkpoint, and so
matches the committed offsets. With ``--master`` a Spark job makes the same stores
(``framework.replay.snapshot``), for state larger than one process's memory. ``restore`` puts
one back onto a stopped service as the replay's bootstrap hands over
(``framework.replay.handover``), refused while the group has members: every file it writes from
is read and checked against the manifest first (``verify``), then its changelogs and
repartition topics are created anew, the entries and in-flight records written into them, and
the group's offsets committed as the savepoint has them. ``rescale`` moves a savepoint's
entries and records in flight onto another partition count, each by its key (``fw savepoint
restore --partitions N``, ``fw rescale``).

``read`` and ``write`` (``spark``) are state with Spark: a store as a DataFrame, and a new
savepoint written from DataFrames in people's terms (``compose``), checked against the target
pipeline's serdes before anything is written.
"""

from framework.savepoint.spark import read, write

__all__ = ["read", "write"]
