"""Avro single-object encoding: the header, the specification's fingerprints, the schema
store, and the one-line errors of bytes it refuses (and of raw Avro, which cannot refuse
another schema's bytes)."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from framework.errors import ConfigError
from framework.serde import AvroSerde, DecodeError, Serde
from framework.serde.single_object import fingerprint, fingerprint_hex

PURCHASE = {"type": "record", "name": "Purchase", "namespace": "shop",
            "fields": [{"name": "user", "type": "string"}, {"name": "amount", "type": "long"}]}
# Another record type with the same binary layout: raw Avro cannot tell the two apart.
CONNECTION = {"type": "record", "name": "Connection", "namespace": "ops",
              "fields": [{"name": "host", "type": "string"}, {"name": "port", "type": "long"}]}
PURCHASE_FP = "0x4fb1acdb052dae11"
CONNECTION_FP = "0x213a43bb9c1f7168"
SO_PURCHASE = f"Avro (single-object, schema shop.Purchase fingerprint {PURCHASE_FP})"


# The fingerprints of share/test/data/schema-tests.txt in the Avro repository, as Java's
# SchemaNormalization.parsingFingerprint64 returns them (signed longs), with a value of each.
@pytest.mark.parametrize(("schema", "java_long", "value"), [
    ("null", 7195948357588979594, None),
    ("int", 8247732601305521295, 7),
    ("long", -3434872931120570953, -7),
    ("string", -8142146995180207161, "x"),
    ({"fields": [], "type": "record", "name": "foo", "namespace": "x.y"}, 5916914534497305771, {}),
    # (the file's default is the string "true", which fastavro refuses; no default is in the canonical form)
    ({"fields": [{"type": "boolean", "aliases": [], "name": "f1", "default": True},
                 {"order": "descending", "name": "f2", "doc": "Hello", "type": "int"}],
      "type": "record", "name": "foo"}, -4860222112080293046, {"f1": True, "f2": 3}),
    ({"namespace": "x.y.z", "type": "enum", "name": "foo", "doc": "foo bar", "symbols": ["A1", "A2"]},
     -4448647247586288245, "A2"),
    ({"name": "PigValue", "type": "record",
      "fields": [{"name": "value", "type": ["null", "int", "long", "PigValue"]}]}, -1759257747318642341,
     {"value": 5}),
])
def test_the_fingerprint_is_the_specifications(schema: Any, java_long: int, value: Any) -> None:
    assert fingerprint(schema) == java_long % 2**64
    serde = AvroSerde(schema, encoding="single-object")
    assert serde.fingerprint == java_long % 2**64
    data = serde.serialize(value)
    assert data[:10] == b"\xc3\x01" + struct.pack("<q", java_long)  # the long, little-endian
    assert serde.deserialize(data) == value


def test_int_fingerprint_in_hex_as_java_prints_it() -> None:
    assert fingerprint_hex(fingerprint("int")) == "0x7275d51a3f395c8f"
    assert fingerprint_hex(bytes.fromhex("8f5c393f1ad57572")) == "0x7275d51a3f395c8f"


def test_round_trip_is_marker_fingerprint_then_the_raw_body() -> None:
    serde = AvroSerde(PURCHASE, encoding="single-object")
    value = {"user": "ann", "amount": 1250}
    data = serde.serialize(value)
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == int(PURCHASE_FP, 16).to_bytes(8, "little")
    assert data[10:] == AvroSerde(PURCHASE).serialize(value)
    assert serde.deserialize(data) == value
    assert serde.bind("purchases", is_key=False) is serde
    assert isinstance(serde, Serde) and serde.encoding == "single-object"
    assert AvroSerde("demo.Number", encoding="single-object").deserialize(
        AvroSerde("demo.Number", encoding="single-object").serialize({"n": -5})) == {"n": -5}


def test_raw_avro_reads_another_schemas_record_as_its_own() -> None:
    """The reported bug, kept as documented behaviour: raw bytes do not say their schema."""
    other = AvroSerde(CONNECTION).serialize({"host": "db.internal", "port": 5432})
    assert AvroSerde(PURCHASE).deserialize(other) == {"user": "db.internal", "amount": 5432}
    assert AvroSerde(PURCHASE).encoding == "raw"


def test_a_record_of_another_schema_is_refused_naming_both_fingerprints() -> None:
    other = AvroSerde(CONNECTION, encoding="single-object").serialize({"host": "db.internal", "port": 5432})
    with pytest.raises(DecodeError) as caught:
        AvroSerde(PURCHASE, encoding="single-object").deserialize(other)
    assert str(caught.value) == (
        f"{SO_PURCHASE} expected a writer schema it knows (fingerprint {PURCHASE_FP}), found fingerprint "
        f"{CONNECTION_FP}: the record was written with another schema; if the topic may carry it, add that "
        "schema to the serde's writer_schemas")


def test_json_bytes_are_refused_naming_the_missing_marker() -> None:
    with pytest.raises(DecodeError) as caught:
        AvroSerde(PURCHASE, encoding="single-object").deserialize(b'{"user": "db.internal", "amount": 5432}')
    assert str(caught.value) == f"{SO_PURCHASE} expected the marker C3 01, found 7B 22 (JSON?)"
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(("data", "line"), [
    (b"", "expected the marker C3 01, found no bytes"),
    (b"\xc3", "expected the marker C3 01, found C3"),
    (AvroSerde(PURCHASE).serialize({"user": "ann", "amount": 1}), "expected the marker C3 01, found 06 61"),
    (b"\x00\x00\x00\x00\x07\x02", "expected the marker C3 01, found 00 00 (Confluent wire format?)"),
    (b"\xc3\x01\x11\xae", "expected the marker C3 01 and an 8-byte schema fingerprint, found 4 bytes"),
])
def test_bytes_without_a_whole_header_are_refused(data: bytes, line: str) -> None:
    with pytest.raises(DecodeError) as caught:
        AvroSerde(PURCHASE, encoding="single-object").deserialize(data)
    assert str(caught.value) == f"{SO_PURCHASE} {line}"


def test_a_body_that_does_not_decode_or_leaves_bytes_is_refused() -> None:
    serde = AvroSerde(PURCHASE, encoding="single-object")
    good = serde.serialize({"user": "ann", "amount": 1})
    with pytest.raises(DecodeError) as caught:
        serde.deserialize(good + b"!")
    assert str(caught.value) == (
        f"{SO_PURCHASE} expected the binary encoding of one shop.Purchase after the 10-byte header, found 6 bytes "
        "(06 61 6E 6E 02 21) with 1 left after it: written with another schema, or not Avro")
    with pytest.raises(DecodeError) as caught:
        serde.deserialize(good[:-2])
    assert str(caught.value) == (
        f"{SO_PURCHASE} expected the binary encoding of one shop.Purchase after the 10-byte header, found 3 bytes "
        "(06 61 6E): EOFError: Expected 3 bytes, read 2")


def test_writer_schemas_are_the_schema_store() -> None:
    """A reader given the old schema reads old records (resolved into its own schema); a
    writer schema it cannot read is refused when the serde is built."""
    v1 = {"type": "record", "name": "Purchase", "namespace": "shop", "fields": [{"name": "user", "type": "string"}]}
    old = AvroSerde(v1, encoding="single-object").serialize({"user": "bob"})
    with_default = {**PURCHASE, "fields": [PURCHASE["fields"][0], {"name": "amount", "type": "long", "default": 0}]}
    reader = AvroSerde(with_default, encoding="single-object", writer_schemas=[v1])
    assert reader.deserialize(old) == {"user": "bob", "amount": 0}
    assert reader.deserialize(reader.serialize({"user": "ann", "amount": 3})) == {"user": "ann", "amount": 3}
    v1_fp = fingerprint_hex(fingerprint(v1))
    own_fp = fingerprint_hex(reader.fingerprint)
    with pytest.raises(DecodeError, match=rf"expected a writer schema it knows \(fingerprints {own_fp}, {v1_fp}\), "
                                          rf"found fingerprint {CONNECTION_FP}:"):
        reader.deserialize(AvroSerde(CONNECTION, encoding="single-object").serialize({"host": "h", "port": 1}))
    with pytest.raises(ConfigError) as caught:
        AvroSerde(PURCHASE, encoding="single-object", writer_schemas=[v1])
    assert str(caught.value) == (
        f"AvroSerde('shop.Purchase') cannot read records written with shop.Purchase (fingerprint {v1_fp}), given "
        "in writer_schemas: field `amount` added without a default: old records cannot be read. Fix: change the "
        "schema so it reads that one (a default for each field it adds, an alias for a renamed type), or leave "
        "that schema out of writer_schemas")


NEEDS_A_REGISTRY = ("Avro encoding 'registry' needs a registry client: pass registry=SchemaRegistryClient"
                    ".from_env() with FW_SCHEMA_REGISTRY_URL set (or use encoding='single-object')")


@pytest.mark.parametrize(("kwargs", "line"), [
    ({"encoding": "registry"}, NEEDS_A_REGISTRY),
    ({"encoding": "registry", "registry": None}, NEEDS_A_REGISTRY),  # from_env() without the variable
    ({"encoding": "single_object"}, "unknown Avro encoding 'single_object'; choose one of raw, single-object, registry"),
    ({"writer_schemas": [PURCHASE]}, "writer_schemas are for encoding='single-object', not 'raw'"),
])
def test_settings_that_do_not_fit_are_config_errors(kwargs: dict[str, Any], line: str) -> None:
    with pytest.raises(ConfigError) as caught:
        AvroSerde(PURCHASE, **kwargs)
    assert str(caught.value) == line


# --- raw Avro: still there, and its errors say what it expected ---------------------------


def test_raw_avro_round_trips_and_names_itself_in_errors() -> None:
    serde = AvroSerde(PURCHASE)
    assert serde.deserialize(serde.serialize({"user": "ann", "amount": 1})) == {"user": "ann", "amount": 1}
    with pytest.raises(DecodeError) as caught:
        serde.deserialize(b'{"user": "db.internal", "amount": 5432}')
    assert str(caught.value) == (
        "Avro (raw, schema shop.Purchase) expected the binary encoding of one shop.Purchase, found 39 bytes "
        "(7B 22 75 73 65 72 22 3A ...; JSON?): EOFError: Expected -62 bytes, read 38")


def test_tail_with_a_schema_reads_single_object_and_raw_records() -> None:
    """`fw topics tail --schema NAME`: single-object records by their header, others raw."""
    from framework.ops.tail import schema_decoder

    decode = schema_decoder("demo.Number").value
    assert decode(AvroSerde("demo.Number", encoding="single-object").serialize({"n": 5})) == {"n": 5}
    assert decode(AvroSerde("demo.Number").serialize({"n": 6})) == {"n": 6}
    other = {"type": "record", "name": "demo.Other", "fields": [{"name": "n", "type": "long"}]}
    with pytest.raises(DecodeError, match="expected a writer schema it knows"):
        decode(AvroSerde(other, encoding="single-object").serialize({"n": 7}))
