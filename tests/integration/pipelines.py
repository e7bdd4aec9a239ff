"""Pipelines the integration tests run as real `fw run` processes.

Topic and group names carry ``FW_TEST_SUFFIX`` so every test has its own.
"""

from __future__ import annotations

import os

from framework.pipeline import Pipeline, Topic
from framework.serde import AvroSerde, JsonSerde, StringSerde, load_schema


def _suffix() -> str:
    return os.environ["FW_TEST_SUFFIX"]


def parity(n: int) -> str:
    return "even" if n % 2 == 0 else "odd"


def even_odd() -> Pipeline:
    """Even/odd running sums through a repartition topic, per-source-key counts, and an echo."""
    s = _suffix()
    p = Pipeline(f"eo-{s}")
    numbers = p.source(Topic(f"numbers-{s}", key_serde=StringSerde(), value_serde=JsonSerde(), partitions=4))
    numbers.key_by(parity, name="parity").sum(name="sums").to(Topic(f"sums-{s}"))
    numbers.count(name="counts").to(Topic(f"counts-{s}"))
    numbers.to(Topic(f"seen-{s}"))
    return p


def avro_numbers() -> Pipeline:
    """Avro numbers (schemas/number.avsc) → echo and per-key count; bad Avro → dead letters."""
    s = _suffix()
    p = Pipeline(f"avro-{s}")
    numbers = p.source(Topic(f"avro-numbers-{s}", value_serde=AvroSerde(load_schema("demo.Number")),
                             partitions=4))
    numbers.map(lambda r: r["n"]).to(Topic(f"avro-seen-{s}"))
    numbers.count(name="counts").to(Topic(f"avro-counts-{s}"))
    return p
