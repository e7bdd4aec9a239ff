"""A table and nothing else, for ``benchmarks/table_memory.py``: the customers topic
(BENCH_TABLE) read as a table with one day of history, in RocksDB, restored from its own
topic (no changelog), as j1's table is. Its updates go nowhere (a filter that passes
nothing; a pipeline needs a sink), so what the process holds is the table.

Run by table_memory.py as ``python -m framework.cli run benchmarks.apps.table_app:pipeline``
with the BENCH_* variables of ``benchmarks/common.py`` and FW_* settings.
"""

from __future__ import annotations

from benchmarks.common import HISTORY_MS, passes_nothing, schema, settings
from framework import AvroSerde, Pipeline, StringSerde, Topic


def pipeline() -> Pipeline:
    s = settings()
    p = Pipeline(s.group)
    customers = Topic(s.table, key_serde=StringSerde(), value_serde=AvroSerde(schema("customer")), partitions=4)
    table = p.table(customers, history_ms=HISTORY_MS, name="customers")
    table.to_stream().filter(passes_nothing).to(Topic(s.output, key_serde=StringSerde(),
                                                value_serde=AvroSerde(schema("customer")), partitions=4))
    return p
