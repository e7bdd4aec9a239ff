"""Serdes: round trips, error contracts, the Confluent wire format and schema loading.

The registry tests run a tiny in-memory Schema Registry on 127.0.0.1 in a thread: they
test our client's HTTP protocol, not a stand-in for Kafka. (The integration tests run the
real thing: tests/integration/test_schema_registry.py.)
"""

from __future__ import annotations

import base64
import json
import re
import struct
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from framework.errors import ConfigError
from framework.serde import (
    AvroSerde,
    BytesSerde,
    DecodeError,
    IntSerde,
    JsonSerde,
    SchemaRegistryClient,
    Serde,
    StringSerde,
    ValueSerde,
    load_schema,
)
from framework.serde.registry import SchemaRegistryError

READING = {"id": "sensor-1", "timestamp": 1_700_000_000_000, "temperature": 21.5}


# --- plain serdes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("serde", "value"),
    [
        (JsonSerde(), {"a": [1, 2.5, None, True], "ü": "naïve"}),
        (JsonSerde(), "just a string"),
        (StringSerde(), "héllo wörld"),
        (StringSerde("latin-1"), "héllo"),
        (BytesSerde(), b"\x00\xffraw"),
        (IntSerde(), 0),
        (IntSerde(), -(2**63)),
        (IntSerde(), 2**63 - 1),
        (ValueSerde(), {"set": {1, 2}, "tuple": (1, "x"), "bytes": b"b", "none": None}),
    ],
)
def test_round_trip(serde: Serde, value: Any) -> None:
    data = serde.serialize(value)
    assert isinstance(data, bytes)
    assert serde.deserialize(data) == value
    assert isinstance(serde, Serde)
    assert serde.bind("topic", is_key=False) is serde


def test_json_is_compact_utf8() -> None:
    assert JsonSerde().serialize({"a": "é", "b": [1, 2]}) == '{"a":"é","b":[1,2]}'.encode()
    with pytest.raises(TypeError):
        JsonSerde().serialize({1, 2})
    with pytest.raises(ValueError):
        JsonSerde().deserialize(b"{not json")


@pytest.mark.parametrize(("data", "found"), [
    (b'{"k": "a"', ("9 bytes (7B 22 6B 22 3A 20 22 61 ...): JSONDecodeError: Expecting ',' delimiter: line 1 "
                    "column 10 (char 9)")),
    (b"\xc3\x01\x11\xae\x2d\x05\xdb\xac\xb1\x4f\x06", ("11 bytes (C3 01 11 AE 2D 05 DB AC ...; Avro single-object?): "
     "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xc3 in position 0: invalid continuation byte")),
    (b"", "no bytes: JSONDecodeError: Expecting value: line 1 column 1 (char 0)"),
])
def test_json_decode_errors_say_what_was_expected_and_found(data: bytes, found: str) -> None:
    with pytest.raises(DecodeError) as caught:
        JsonSerde().deserialize(data)
    assert str(caught.value) == f"JSON expected one JSON value in UTF-8, found {found}"


def test_int_matches_kafka_long_serializer() -> None:
    assert IntSerde().serialize(1) == b"\x00" * 7 + b"\x01"
    assert IntSerde().serialize(-1) == b"\xff" * 8
    assert IntSerde().deserialize(struct.pack(">q", 123456789012)) == 123456789012


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: IntSerde().serialize(2**63), ValueError),
        (lambda: IntSerde().serialize("12"), TypeError),
        (lambda: IntSerde().deserialize(b"\x00\x01\x02"), ValueError),
        (lambda: StringSerde().serialize(5), TypeError),
        (lambda: StringSerde().deserialize(b"\xff\xfe"), ValueError),
        (lambda: BytesSerde().serialize("text"), TypeError),
        (lambda: BytesSerde().serialize(5), TypeError),
        (lambda: StringSerde("no-such-codec"), LookupError),
    ],
)
def test_bad_values_raise_plain_errors(call: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        call()


def test_bytes_serde_copies_buffers() -> None:
    assert BytesSerde().serialize(bytearray(b"ab")) == b"ab"
    assert BytesSerde().serialize(memoryview(b"cd")) == b"cd"


# --- Avro without a registry ----------------------------------------------------------


def test_avro_schemaless_round_trip() -> None:
    serde = AvroSerde("sensor.Reading")
    data = serde.serialize(READING)
    # schemaless: the bare body, "sensor-1" as a zigzag length 16 (0x10) + the characters
    assert data[:9] == b"\x10sensor-1"
    assert serde.deserialize(data) == READING
    assert serde.bind("readings", is_key=False) is serde
    assert isinstance(serde, Serde)


def test_avro_accepts_a_schema_dict_and_rejects_bad_records() -> None:
    serde = AvroSerde(load_schema("number"))
    assert serde.deserialize(serde.serialize({"n": -5})) == {"n": -5}
    with pytest.raises((TypeError, ValueError)):
        serde.serialize({"n": "five"})
    with pytest.raises(ValueError):
        serde.serialize({})


def test_avro_bytes_left_after_the_record_are_an_error_not_a_record() -> None:
    """A prefix of garbage can be a valid datum (a number is one varint): decoding must take
    every byte, or a poison record would pass as data."""
    serde = AvroSerde(load_schema("number"))
    good = serde.serialize({"n": 7})
    expected = "Avro (raw, schema demo.Number) expected the binary encoding of one demo.Number, found"
    with pytest.raises(DecodeError) as caught:
        serde.deserialize(good + b"abc")
    assert str(caught.value) == (f"{expected} 4 bytes (0E 61 62 63) with 3 left after it: written with another "
                                 "schema, or not Avro")
    with pytest.raises(ValueError) as plain:  # a DecodeError is a ValueError
        serde.deserialize(b"{\"truncated\":")
    assert str(plain.value) == (f"{expected} 13 bytes (7B 22 74 72 75 6E 63 61 ...; JSON?) with 12 left after "
                                 "it: written with another schema, or not Avro")


def test_avro_invalid_schema_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="invalid Avro schema"):
        AvroSerde({"type": "record", "name": "X", "fields": [{"name": "a", "type": "lnog"}]})


# --- Avro with a schema registry ------------------------------------------------------


class FakeRegistry:
    """The two Schema Registry endpoints the serde uses, over real HTTP, in memory. Requests
    are recorded by path; query parameters (``?normalize=false``) are ignored."""

    def __init__(self) -> None:
        self.schemas: dict[int, str] = {}
        self.subjects: dict[str, list[int]] = {}
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                path = urllib.parse.urlsplit(self.path).path
                registry.requests.append(("POST", path, dict(self.headers)))
                match = re.fullmatch(r"/subjects/([^/]+)/versions", path)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if not match or "schema" not in body:
                    return self._send(404, {"error_code": 404, "message": "no such path"})
                text = body["schema"]
                ids = [i for i, s in registry.schemas.items() if s == text]
                schema_id = ids[0] if ids else len(registry.schemas) + 1
                registry.schemas[schema_id] = text
                registry.subjects.setdefault(match.group(1), []).append(schema_id)
                self._send(200, {"id": schema_id})

            def do_GET(self) -> None:
                path = urllib.parse.urlsplit(self.path).path
                registry.requests.append(("GET", path, dict(self.headers)))
                match = re.fullmatch(r"/schemas/ids/(\d+)", path)
                text = registry.schemas.get(int(match.group(1))) if match else None
                if text is None:
                    return self._send(404, {"error_code": 40403, "message": "Schema not found"})
                self._send(200, {"schema": text})

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

        return Handler


@pytest.fixture
def registry() -> Iterator[FakeRegistry]:
    fake = FakeRegistry()
    fake.thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def test_wire_format_header_and_round_trip(registry: FakeRegistry) -> None:
    serde = AvroSerde("sensor.Reading", registry=SchemaRegistryClient(registry.url))
    bound = serde.bind("readings", is_key=False)
    data = bound.serialize(READING)
    bound.serialize(READING)  # registered once, then cached
    [(method, path, headers)] = registry.requests
    assert (method, path) == ("POST", "/subjects/readings-value/versions")
    assert headers["Content-Type"] == "application/vnd.schemaregistry.v1+json"
    schema_id = registry.subjects["readings-value"][0]
    assert data[0] == 0 and data[1:5] == struct.pack(">I", schema_id)
    assert data[5:] == AvroSerde("sensor.Reading").serialize(READING)
    # A reader with its own client knows nothing yet: it fetches the writer schema by id.
    reader = AvroSerde("sensor.Reading", registry=SchemaRegistryClient(registry.url))
    assert reader.deserialize(data) == READING
    assert reader.deserialize(data) == READING
    assert [r[:2] for r in registry.requests[1:]] == [("GET", f"/schemas/ids/{schema_id}")]


def test_schema_evolution_reader_adds_a_field_with_default(registry: FakeRegistry) -> None:
    v1 = load_schema("sensor.Reading")
    v2 = {**v1, "fields": [*v1["fields"], {"name": "unit", "type": "string", "default": "C"}]}
    writer = AvroSerde(v1, registry=SchemaRegistryClient(registry.url), subject="r-value")
    reader = AvroSerde(v2, registry=SchemaRegistryClient(registry.url), subject="r-value")
    assert reader.deserialize(writer.serialize(READING)) == {**READING, "unit": "C"}
    new = reader.serialize({**READING, "unit": "F"})
    assert new[1:5] != writer.serialize(READING)[1:5]  # v2 got its own id
    assert writer.deserialize(new) == READING  # old reader, new writer: field dropped


def test_not_wire_format_is_a_clear_error(registry: FakeRegistry) -> None:
    serde = AvroSerde("sensor.Reading", registry=SchemaRegistryClient(registry.url)).bind("readings", False)
    assert serde.encoding == "registry"
    named = "Avro (registry, subject readings-value, schema sensor.Reading) expected"
    with pytest.raises(DecodeError) as caught:
        serde.deserialize(b'{"id": "sensor-1"}')
    assert str(caught.value) == (f"{named} the magic byte 00 of the Confluent wire format, found 18 bytes (7B 22 69 "
                                 "64 22 3A 20 22 ...; JSON?): was it written without a schema registry?")
    with pytest.raises(DecodeError) as caught:
        serde.deserialize(b"\x00\x00")
    assert str(caught.value) == (f"{named} the Confluent wire format (a 5-byte header: magic byte 00 and a 4-byte "
                                 "schema id), found 2 bytes (00 00)")
    with pytest.raises(DecodeError) as caught:
        serde.deserialize(b"\x00\x00\x00\x03\xe7\x02")
    assert str(caught.value) == (
        f"{named} a schema id the registry at {registry.url} knows, found id 999 (00 00 00 03 E7): the registry "
        f"answered: schema registry GET {registry.url}/schemas/ids/999 failed: HTTP 404: Schema not found")
    assert isinstance(caught.value.__cause__, SchemaRegistryError) and caught.value.__cause__.error_code == 40403


def test_bind_uses_topic_name_strategy(registry: FakeRegistry) -> None:
    serde = AvroSerde("number", registry=SchemaRegistryClient(registry.url))
    assert serde.bind("t", is_key=False).subject == "t-value"
    assert serde.bind("t", is_key=True).subject == "t-key"
    assert serde.subject is None  # bind copies, never mutates
    explicit = AvroSerde("number", registry=serde.registry, subject="fixed")
    assert explicit.bind("t", is_key=True) is explicit
    with pytest.raises(ConfigError, match="no subject"):
        serde.serialize({"n": 1})
    serde.bind("t", is_key=True).serialize({"n": 1})
    assert list(registry.subjects) == ["t-key"]


def test_credentials_are_sent_but_never_shown(registry: FakeRegistry) -> None:
    client = SchemaRegistryClient(registry.url, auth=("alice", "s3cret"))
    client.register("s", {"type": "string"})
    expected = "Basic " + base64.b64encode(b"alice:s3cret").decode()
    assert registry.requests[0][2]["Authorization"] == expected
    with pytest.raises(SchemaRegistryError) as info:
        client.get_schema(999)
    in_url = SchemaRegistryClient(registry.url.replace("//", "//bob:hunter2@"))
    assert in_url.url == registry.url
    for text in (repr(client), str(info.value), repr(in_url)):
        assert "s3cret" not in text and "hunter2" not in text
    in_url.get_schema(1)
    assert registry.requests[-1][2]["Authorization"] == "Basic " + base64.b64encode(
        b"bob:hunter2"
    ).decode()


def test_registry_from_env() -> None:
    assert SchemaRegistryClient.from_env({}) is None
    client = SchemaRegistryClient.from_env(
        {
            "FW_SCHEMA_REGISTRY_URL": "http://registry:8081/",
            "FW_SCHEMA_REGISTRY_USER": "u",
            "FW_SCHEMA_REGISTRY_PASSWORD": "pw-secret",
        }
    )
    assert client is not None and client.url == "http://registry:8081"
    assert "pw-secret" not in repr(client)
    with pytest.raises(ConfigError, match="FW_SCHEMA_REGISTRY_PASSWORD"):
        SchemaRegistryClient.from_env(
            {"FW_SCHEMA_REGISTRY_URL": "http://r:8081", "FW_SCHEMA_REGISTRY_USER": "u"}
        )


def test_unreachable_registry_names_the_request() -> None:
    client = SchemaRegistryClient("http://127.0.0.1:9", timeout_s=2)
    with pytest.raises(SchemaRegistryError, match=r"GET http://127.0.0.1:9/schemas/ids/1"):
        client.get_schema(1)


# --- load_schema ----------------------------------------------------------------------


def test_load_schema_by_full_name_stem_and_path() -> None:
    by_name = load_schema("sensor.Reading")
    assert by_name["name"] == "Reading" and by_name["namespace"] == "sensor"
    assert load_schema("reading") == by_name
    assert load_schema("demo.Number")["fields"] == [{"name": "n", "type": "long"}]
    repo_schemas = Path(__file__).resolve().parents[2] / "schemas"
    assert load_schema(repo_schemas / "number.avsc") == load_schema("number")
    by_name["fields"].clear()  # callers get their own copy
    assert load_schema("sensor.Reading")["fields"]


def test_unknown_schema_suggests_close_matches() -> None:
    with pytest.raises(ConfigError) as info:
        load_schema("sensor.Readings")
    message = str(info.value)
    assert "'sensor.Readings'" in message and "sensor.Reading" in message
    assert "schemas" in message  # where it looked


def test_load_schema_from_another_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    order = {"type": "record", "name": "shop.Order", "fields": [{"name": "x", "type": "int"}]}
    (tmp_path / "order.avsc").write_text(json.dumps(order))
    (tmp_path / "broken.avsc").write_text("{not json")
    monkeypatch.setenv("FW_SCHEMAS_DIR", str(tmp_path))
    assert load_schema("shop.Order")["name"] == "shop.Order"
    with pytest.raises(ConfigError, match="cannot read Avro schema"):
        load_schema("broken")
    with pytest.raises(ConfigError, match="FW_SCHEMAS_DIR.*unreadable files skipped: broken"):
        load_schema("sensor.Reading")
    assert load_schema("sensor.Reading", schemas_dir=Path(__file__).parents[2] / "schemas")
