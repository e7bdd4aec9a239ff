"""Serdes: bytes <-> Python values for record keys and values.

Pick one per topic side: ``JsonSerde`` for JSON, ``AvroSerde`` for Avro (schemaless, or
the Confluent wire format with a ``SchemaRegistryClient``), ``StringSerde`` /
``BytesSerde`` / ``IntSerde`` for plain keys, ``PickleSerde`` for internal state only.
"""

from __future__ import annotations

from framework.serde.avro import AvroSerde, load_schema
from framework.serde.base import Serde
from framework.serde.json import JsonSerde
from framework.serde.registry import SchemaRegistryClient
from framework.serde.simple import BytesSerde, IntSerde, PickleSerde, StringSerde

__all__ = [
    "AvroSerde",
    "BytesSerde",
    "IntSerde",
    "JsonSerde",
    "PickleSerde",
    "SchemaRegistryClient",
    "Serde",
    "StringSerde",
    "load_schema",
]
