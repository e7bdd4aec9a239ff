"""Flink-style stateful stream processing on Apache Kafka, in Python.

The public API: define a ``Pipeline`` of steps over ``Topic``s, keep keyed state in a
``ProcessFunction``, unit-test it with the ``TestDriver``, run it with ``fw run``.
"""

from framework.config import Config, Guarantee, OnError
from framework.errors import (
    ConfigError,
    DeserializationError,
    FrameworkError,
    PipelineError,
    ProcessingError,
    RecordError,
    SerializationError,
)
from framework.pipeline import Pipeline, ProcessFunction, Stream, Topic
from framework.serde import AvroSerde, BytesSerde, IntSerde, JsonSerde, StringSerde, load_schema
from framework.testing import TestDriver, TestRecord

__all__ = [
    "AvroSerde",
    "BytesSerde",
    "Config",
    "ConfigError",
    "DeserializationError",
    "FrameworkError",
    "Guarantee",
    "IntSerde",
    "JsonSerde",
    "OnError",
    "Pipeline",
    "PipelineError",
    "ProcessFunction",
    "ProcessingError",
    "RecordError",
    "SerializationError",
    "Stream",
    "StringSerde",
    "TestDriver",
    "TestRecord",
    "Topic",
    "load_schema",
]
