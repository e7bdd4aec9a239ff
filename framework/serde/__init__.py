"""Serdes: bytes <-> Python values for record keys and values.

Pick one per topic side: ``JsonSerde`` for JSON, ``AvroSerde`` for Avro (single-object
encoding, the Confluent wire format with a ``SchemaRegistryClient``, or raw), ``StringSerde``
/ ``BytesSerde`` / ``IntSerde`` for plain keys. ``ValueSerde`` is the framework's own value
encoding (state, changelogs, repartition topics: docs/state-format.md); ``CustomType``
registers a user type with it. No serde decodes with pickle: nothing read from a topic
can run code. Bytes the Avro and JSON serdes cannot decode raise ``DecodeError``, naming
the serde, what it expected and what it found.
"""

from __future__ import annotations

from framework.serde.avro import AvroSerde, load_schema
from framework.serde.base import DecodeError, Serde
from framework.serde.json import JsonSerde
from framework.serde.registry import SchemaRegistryClient
from framework.serde.simple import BytesSerde, IntSerde, StringSerde
from framework.serde.values import CustomType, ValueSerde

__all__ = [
    "AvroSerde",
    "BytesSerde",
    "CustomType",
    "DecodeError",
    "IntSerde",
    "JsonSerde",
    "SchemaRegistryClient",
    "Serde",
    "StringSerde",
    "ValueSerde",
    "load_schema",
]
