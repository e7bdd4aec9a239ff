"""A count per key and nothing else, for ``benchmarks/savepoint_size.py``: the customers
topic (BENCH_INPUT, Avro ``bench.Customer``) counted per key in RocksDB with its changelog. Its
updates go nowhere (a filter that passes nothing; a pipeline needs a sink), so what the service
holds is one count per key.

Run by savepoint_size.py as ``python -m framework.cli run benchmarks.apps.count_app:pipeline``
with the BENCH_* variables of ``benchmarks/common.py`` and FW_* settings.
"""

from __future__ import annotations

from benchmarks.common import passes_nothing, schema, settings
from framework import AvroSerde, JsonSerde, Pipeline, StringSerde, Topic


def pipeline() -> Pipeline:
    s = settings()
    p = Pipeline(s.group)
    source = Topic(s.input, key_serde=StringSerde(), value_serde=AvroSerde(schema("customer")), partitions=4)
    p.source(source, name="customers").count(name="counts").filter(passes_nothing) \
        .to(Topic(s.output, key_serde=StringSerde(), value_serde=JsonSerde(), partitions=4))
    return p
