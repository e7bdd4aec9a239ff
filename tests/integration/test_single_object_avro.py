"""A service whose source is Avro in the single-object encoding, as a real `fw run` process:
a record of its schema is processed; a record written with another schema and a JSON record
are dead letters whose ``fw.error.message`` is the serde's line, naming what it expected
and what it found (raw Avro would have read the other schema's record as a purchase)."""

from __future__ import annotations

import json
from pathlib import Path

from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from framework.serde import AvroSerde
from tests.integration.harness import ServiceProcess, produce, read_topics, service_env, wait_until
from tests.integration.pipelines import PURCHASE

TARGET = "tests.integration.pipelines:single_object_purchases"
CONNECTION = {"type": "record", "name": "Connection", "namespace": "ops",
              "fields": [{"name": "host", "type": "string"}, {"name": "port", "type": "long"}]}
SERDE = "Avro (single-object, schema shop.Purchase fingerprint 0x4fb1acdb052dae11)"
# What the runtime adds to every decode error (framework/engine/task.py).
FIX = ("Fix: check the producer's serializer against the source topic's serdes (with on_error=dead_letter the "
       "record goes to the dead-letter topic)")


def test_records_of_another_schema_and_json_are_dead_letters_naming_what_was_expected(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    source, seen, dead = f"so-purchases-{unique}", f"so-seen-{unique}", f"so-{unique}-dead-letter"
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(source, 1)])
    good = AvroSerde(PURCHASE, encoding="single-object").serialize({"user": "ann", "amount": 1250})
    other = AvroSerde(CONNECTION, encoding="single-object").serialize({"host": "db.internal", "port": 5432})
    as_json = b'{"user": "db.internal", "amount": 5432}'
    produce(kafka_bootstrap, source, [(b"o-1", good), (b"o-2", other), (b"o-3", as_json)])  # offsets 0, 1, 2

    svc = ServiceProcess(TARGET, tmp_path, "0", service_env(kafka_bootstrap, unique)).start()
    services.append(svc)
    wait_until(lambda: [len(r) for r in read_topics(kafka_bootstrap, [seen, dead]).values()] == [1, 2], 120,
               "the purchase echoed and two dead letters", lambda: svc.log_text()[-3000:])
    assert svc.alive and svc.stop() == 0

    out = read_topics(kafka_bootstrap, [seen, dead])
    [echo] = out[seen]
    assert (echo.key, json.loads(echo.value or b"")) == (b"o-1", {"user": "ann", "amount": 1250})
    letters = {int(r.headers["fw.source.offset"]): r for r in out[dead]}
    assert sorted(letters) == [1, 2]
    assert (letters[1].key, letters[1].value, letters[2].key, letters[2].value) == (b"o-2", other, b"o-3", as_json)
    assert {r.headers["fw.error.type"] for r in letters.values()} == {b"DecodeError"}
    where = f"{source}[0]@%d in step 'purchases': cannot decode the record: DecodeError: {SERDE} expected"
    assert letters[1].headers["fw.error.message"].decode() == (
        f"{where % 1} a writer schema it knows (fingerprint 0x4fb1acdb052dae11), found fingerprint "
        "0x213a43bb9c1f7168: the record was written with another schema; if the topic may carry it, add that "
        f"schema to the serde's writer_schemas {FIX}")
    assert letters[2].headers["fw.error.message"].decode() == f"{where % 2} the marker C3 01, found 7B 22 (JSON?) {FIX}"
