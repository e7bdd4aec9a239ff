"""The pipeline tests/integration/test_schema_registry.py runs as a real `fw run` process:
Avro in the Confluent wire format, with the registry of ``FW_SCHEMA_REGISTRY_URL``.

Topic and group names carry ``FW_TEST_SUFFIX`` so every test has its own.
"""

from __future__ import annotations

import os

from framework.pipeline import Pipeline, Topic
from framework.serde import AvroSerde, SchemaRegistryClient, load_schema


def registry_numbers() -> Pipeline:
    """``reg-numbers-<suffix>`` (demo.Number, the wire format; 2 partitions) → each ``n`` as
    JSON to ``reg-seen-<suffix>``, and each record again in the wire format to
    ``reg-out-<suffix>`` (its schema registered under ``reg-out-<suffix>-value``)."""
    s = os.environ["FW_TEST_SUFFIX"]
    numbers = AvroSerde(load_schema("demo.Number"), registry=SchemaRegistryClient.from_env())
    p = Pipeline(f"reg-{s}")
    source = p.source(Topic(f"reg-numbers-{s}", value_serde=numbers, partitions=2))
    source.map(lambda r: r["n"]).to(Topic(f"reg-seen-{s}"))
    source.to(Topic(f"reg-out-{s}", value_serde=numbers))
    return p
