"""Poison records against a real `fw run` process: malformed Avro goes to the dead-letter
topic with its coordinates while the service keeps running; with ``on_error=fail`` the first
one stops the process, naming the record."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from framework.kafka.admin import TopicSpec, admin_client, ensure_topics, topic_partitions
from framework.serde import AvroSerde, load_schema
from tests.integration.harness import ServiceProcess, Tail, present, read_topic, wait_until

TARGET = "tests.integration.pipelines:avro_numbers"
N = 20_000
KEYS = 100
PARTITIONS = 4
SERDE = AvroSerde(load_schema("demo.Number"))
SOURCE_STEP = "source-0"  # the name avro_numbers' unnamed source step gets


def _is_bad(i: int) -> bool:
    """Exactly one record in each block of 100 is malformed, at a position that moves from
    block to block (so the bad records spread over keys and partitions)."""
    block = i // 100
    return i % 100 == (37 * block + 11) % 100


def _number(i: int) -> int:
    """Distinct numbers of varied encoded lengths (1 to 8 bytes), negative ones too."""
    return i * 1_000_003 * (-1 if i % 3 == 0 else 1) + (2**40 if i % 7 == 0 else 0)


def _decode_error(payload: bytes) -> BaseException | None:
    try:
        SERDE.deserialize(payload)
    except Exception as exc:  # noqa: BLE001 - any failure is what we want to see
        return exc
    return None


def _malformed(j: int, rng: random.Random) -> bytes:
    """Bytes that are not an Avro demo.Number: an unterminated zig-zag varint (every byte has
    its continuation bit set), as random bytes, as a fixed pattern, or as a real encoding
    with its last byte cut off."""
    kind = j % 3
    if kind == 0:
        return b"\xff\xff\xff\xff\xff"
    if kind == 1:
        return SERDE.serialize({"n": rng.randrange(2**20, 2**62)})[:-1]
    return bytes(rng.randrange(0x80, 0x100) for _ in range(rng.randint(1, 9)))


def _inputs() -> list[tuple[bytes, bytes, bool]]:
    """(key, value, malformed) for i in 0..N-1, keyed str(i % 100)."""
    rng = random.Random(4242)
    out = []
    for i in range(N):
        key = str(i % KEYS).encode()
        if _is_bad(i):
            value = _malformed(i // 100, rng)
            assert _decode_error(value) is not None, f"payload {value!r} must not decode"
            out.append((key, value, True))
        else:
            value = SERDE.serialize({"n": _number(i)})
            assert _decode_error(value) is None and SERDE.deserialize(value) == {"n": _number(i)}
            out.append((key, value, False))
    return out


def _produce_tracked(bootstrap: str, topic: str,
                     records: list[tuple[bytes, bytes]]) -> list[tuple[int, int]]:
    """Produce in order (idempotent, murmur2 as harness.produce); return each record's
    (partition, offset) from its delivery report."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20,
                         "partitioner": "murmur2_random"})
    where: list[tuple[int, int] | None] = [None] * len(records)
    errors: list[Any] = []

    def report(i: int) -> Any:
        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                where[i] = (msg.partition(), msg.offset())
        return on_delivery

    for i, (key, value) in enumerate(records):
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=report(i))
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors
    assert all(w is not None for w in where)
    return [w for w in where if w is not None]


def _create_source(bootstrap: str, suffix: str) -> str:
    topic = f"avro-numbers-{suffix}"
    ensure_topics(admin_client({"bootstrap.servers": bootstrap}), [TopicSpec(topic, PARTITIONS)])
    return topic


def _env(bootstrap: str, suffix: str) -> dict[str, str]:
    return {"FW_BOOTSTRAP_SERVERS": bootstrap, "FW_TEST_SUFFIX": suffix}


def _topics_exist(bootstrap: str, names: list[str]) -> bool:
    return len(topic_partitions(admin_client({"bootstrap.servers": bootstrap}), names)) == len(names)


def test_malformed_avro_goes_to_dead_letters_and_service_never_restarts(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    source = _create_source(kafka_bootstrap, unique)
    seen_topic, counts_topic = f"avro-seen-{unique}", f"avro-counts-{unique}"
    dead_topic = f"avro-{unique}-dead-letter"
    inputs = _inputs()
    bad = [i for i, (_, _, malformed) in enumerate(inputs) if malformed]
    assert len(bad) == N // 100 and all(_is_bad(i) for i in bad)
    where = _produce_tracked(kafka_bootstrap, source, [(k, v) for k, v, _ in inputs])
    # The delivery reports say where each record is: check them against the topic itself.
    stored = {(r.partition, r.offset): (r.key, r.value) for r in read_topic(kafka_bootstrap, source)}
    assert len(stored) == N
    assert all(stored[where[i]] == (k, v) for i, (k, v, _) in enumerate(inputs))
    assert len({where[i][0] for i in bad}) == PARTITIONS, "bad records in every partition"

    svc = ServiceProcess(TARGET, tmp_path, "0", _env(kafka_bootstrap, unique)).start()
    assert svc.proc is not None
    pid = svc.proc.pid
    wait_until(lambda: _topics_exist(kafka_bootstrap, [seen_topic, counts_topic, dead_topic]), 60,
               "the service's topics", lambda: svc.log_text()[-3000:])
    seen, dead = Tail(kafka_bootstrap, seen_topic), Tail(kafka_bootstrap, dead_topic)
    good_count = N - len(bad)
    wait_until(lambda: seen.drain() >= good_count and dead.drain() >= len(bad), 180,
               "every good record echoed and every bad one dead-lettered",
               lambda: f"seen {seen.drain()}/{good_count}, dead {dead.drain()}/{len(bad)}, "
                       f"alive {svc.alive}\n{svc.log_text()[-3000:]}")
    seen.close()
    dead.close()

    # The same process did all of it: never died, never restarted.
    assert svc.alive and svc.starts == 1 and svc.proc.pid == pid
    assert svc.log_text().count("---- start") == 1
    assert svc.stop() == 0
    log = svc.log_text()

    # Echo: every good number exactly once, with its key; nothing else.
    echoed = Counter((r.key, json.loads(present(r.value))) for r in read_topic(kafka_bootstrap, seen_topic))
    expected_echo = Counter((k, _number(i)) for i, (k, _, malformed) in enumerate(inputs) if not malformed)
    assert echoed == expected_echo

    # Dead letters: exactly the malformed records, their bytes, and where they were written.
    bad_at = {where[i]: i for i in bad}
    letters = read_topic(kafka_bootstrap, dead_topic)
    assert len(letters) == len(bad)
    coordinates = []
    for r in letters:
        h = r.headers
        assert h["fw.source.topic"] == source.encode()
        at = (int(h["fw.source.partition"]), int(h["fw.source.offset"]))
        coordinates.append(at)
        assert at in bad_at, f"dead letter for {at}, which is not a malformed record"
        key, value, _ = inputs[bad_at[at]]
        assert (r.key, r.value) == (key, value), f"dead letter {at}: the original bytes"
        assert h["fw.step"] == SOURCE_STEP.encode()
        error = _decode_error(value)
        assert h["fw.error.type"] == type(error).__name__.encode()
        message = h["fw.error.message"].decode()
        assert f"{source}[{at[0]}]@{at[1]}" in message and "cannot decode" in message, message
        assert f"{source}[{at[0]}]@{at[1]}" in log, f"the log names the bad record {at}"
    assert sorted(coordinates) == sorted(bad_at), "each malformed record dead-lettered exactly once"

    # Per-key counts count the good records only, each once, in order.
    per_key: dict[bytes | None, list[int]] = {}
    for r in sorted(read_topic(kafka_bootstrap, counts_topic), key=lambda r: (r.partition, r.offset)):
        per_key.setdefault(r.key, []).append(json.loads(present(r.value)))
    good_per_key: Counter[bytes | None] = Counter(k for k, _, malformed in inputs if not malformed)
    assert {k: v[-1] for k, v in per_key.items()} == dict(good_per_key)
    assert all(v == list(range(1, good_per_key[k] + 1)) for k, v in per_key.items())


def _fail_env(bootstrap: str, suffix: str) -> dict[str, str]:
    return {**_env(bootstrap, suffix), "FW_PROCESSING__ON_ERROR": "fail"}


def test_fail_policy_stops_with_coordinates(kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    source = _create_source(kafka_bootstrap, unique)
    records = [(str(i % KEYS).encode(), SERDE.serialize({"n": i})) for i in range(50)]
    poison = b"\xff\xff\xff\xff\xff"
    assert _decode_error(poison) is not None
    records.insert(30, (b"7", poison))
    where = _produce_tracked(kafka_bootstrap, source, records)
    p, o = where[30]

    svc = ServiceProcess(TARGET, tmp_path, "0", _fail_env(kafka_bootstrap, unique)).start()
    code = svc.wait_exit(120)  # it exits by itself: nothing restarts it, and it does not loop
    log = svc.log_text()
    assert code != 0, log[-3000:]
    assert not svc.alive and svc.starts == 1
    assert f"{source}[{p}]@{o}" in log, log[-3000:]
    assert "cannot decode" in log
    assert read_topic(kafka_bootstrap, f"avro-{unique}-dead-letter") == [], "fail means no dead letter"


def test_fail_policy_does_not_commit_past_the_bad_record(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    """The process stops on the bad record while it holds processed, uncheckpointed work
    (a long checkpoint interval): whatever it commits on the way out, the group's offsets
    must not pass the bad record, or a restart would silently skip it (and the records after
    it in the same fetched batch), which neither dead-letters nor processes them."""
    source = _create_source(kafka_bootstrap, unique)
    env = {**_fail_env(kafka_bootstrap, unique), "FW_PROCESSING__CHECKPOINT_INTERVAL_MS": "300000",
           "FW_KAFKA__TRANSACTION_TIMEOUT_MS": "320000"}
    svc = ServiceProcess(TARGET, tmp_path, "0", env).start()
    first = [(str(i % KEYS).encode(), SERDE.serialize({"n": i})) for i in range(100)]
    _produce_tracked(kafka_bootstrap, source, first)
    seen_topic = f"avro-seen-{unique}"
    # Processed (its outputs are in the open transaction) but not checkpointed.
    wait_until(lambda: _topics_exist(kafka_bootstrap, [seen_topic])
               and len(read_topic(kafka_bootstrap, seen_topic, "read_uncommitted")) >= len(first), 120,
               "the first records processed", lambda: svc.log_text()[-3000:])
    assert svc.alive

    poison = b"\xff\xff\xff\xff\xff"
    then = [(b"7", poison)] + [(b"7", SERDE.serialize({"n": 1000 + i})) for i in range(10)]
    where = _produce_tracked(kafka_bootstrap, source, then)
    p, o = where[0]
    assert all(w[0] == p for w in where)
    code = svc.wait_exit(120)
    log = svc.log_text()
    assert code != 0, log[-3000:]
    assert f"{source}[{p}]@{o}" in log

    c = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"avro-{unique}",
                  "enable.auto.commit": False})
    committed = {tp.partition: tp.offset for tp in c.committed(
        [TopicPartition(source, q) for q in range(PARTITIONS)], timeout=30)}
    c.close()
    assert committed[p] <= o, (
        f"the group committed offset {committed[p]} on {source}[{p}], past the bad record at offset {o} "
        f"(and past {committed[p] - o - 1} records after it) that stopped the service: a restart skips them")
