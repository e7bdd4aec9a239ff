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
from framework.pipeline import CoProcessFunction, Pipeline, ProcessFunction, Stream, Topic
from framework.serde import AvroSerde, BytesSerde, IntSerde, JsonSerde, StringSerde, load_schema
from framework.testing import TestDriver, TestRecord
from framework.time import NO_WATERMARK, WatermarkStrategy
from framework.windows import (
    CountTrigger,
    CountWindows,
    GlobalWindows,
    SessionWindows,
    SlidingWindows,
    TumblingWindows,
    Window,
)

__all__ = [
    "AvroSerde",
    "BytesSerde",
    "CoProcessFunction",
    "Config",
    "ConfigError",
    "CountTrigger",
    "CountWindows",
    "DeserializationError",
    "FrameworkError",
    "GlobalWindows",
    "Guarantee",
    "IntSerde",
    "JsonSerde",
    "NO_WATERMARK",
    "OnError",
    "Pipeline",
    "PipelineError",
    "ProcessFunction",
    "ProcessingError",
    "RecordError",
    "SerializationError",
    "SessionWindows",
    "SlidingWindows",
    "Stream",
    "StringSerde",
    "TestDriver",
    "TestRecord",
    "Topic",
    "TumblingWindows",
    "WatermarkStrategy",
    "Window",
    "load_schema",
]
