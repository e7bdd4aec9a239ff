"""Flink-style stateful stream processing on Apache Kafka, in Python.

The public API: define a ``Pipeline`` of steps over ``Topic``s, keep keyed state in a
``ProcessFunction`` (its ``ProcessContext`` gives ``ValueState``, ``MapState`` and
``ListState``), call other services from ``map_async``/``process_async`` steps (``AsyncFunction``,
``AsyncCall``, ``Retry``), register the user types state may hold (``CustomType``), unit-test it with
the ``TestDriver``, run it with ``fw run``. Everything a service needs is exported here or
by the public packages (``framework.pipeline``, ``serde``, ``time``, ``windows``,
``testing``), and a script around a service produces records with ``framework.produce``;
the other modules are the implementation.
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
    StateError,
)
from framework.pipeline import (
    AsyncCall,
    AsyncFunction,
    CoProcessFunction,
    Pipeline,
    ProcessContext,
    ProcessFunction,
    Retry,
    Stream,
    Table,
    Topic,
)
from framework.serde import (
    AvroSerde,
    BytesSerde,
    CustomType,
    IntSerde,
    JsonSerde,
    StringSerde,
    load_schema,
)
from framework.state.views import ListState, MapState, ValueState
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

__all__ = [  # noqa: RUF022 - in sorted() order, which tests/unit/test_public_api.py checks
    "AsyncCall",
    "AsyncFunction",
    "AvroSerde",
    "BytesSerde",
    "CoProcessFunction",
    "Config",
    "ConfigError",
    "CountTrigger",
    "CountWindows",
    "CustomType",
    "DeserializationError",
    "FrameworkError",
    "GlobalWindows",
    "Guarantee",
    "IntSerde",
    "JsonSerde",
    "ListState",
    "MapState",
    "NO_WATERMARK",
    "OnError",
    "Pipeline",
    "PipelineError",
    "ProcessContext",
    "ProcessFunction",
    "ProcessingError",
    "RecordError",
    "Retry",
    "SerializationError",
    "SessionWindows",
    "SlidingWindows",
    "StateError",
    "Stream",
    "StringSerde",
    "Table",
    "TestDriver",
    "TestRecord",
    "Topic",
    "TumblingWindows",
    "ValueState",
    "WatermarkStrategy",
    "Window",
    "load_schema",
]
