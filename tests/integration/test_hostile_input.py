"""Hostile input through the real runtime: fuzzed keys, values and headers, records larger than
a producer sends by default, and outputs a broker would refuse (P37; docs/operations.md,
"Hostile input: fuzz, large records, floods and open transactions").

**Fuzz.** Hypothesis builds the input: for every serde the services read with, valid encodings
and the same truncated, bit-flipped, extended, emptied or absent, random bytes, and headers
whose names include the framework's own (``fw.source.offset``...). Each strategy runs a fixed
number of examples from a derandomized seed, so every run feeds the same corpus; the examples
are gathered first and produced at once, interleaved with valid records, because one service
run per test is what a real broker affords (a failure names its records by their coordinates).
Header names that are not UTF-8 cannot come from the Python client, but from producers in other
languages: they are written through librdkafka's C API, which confluent-kafka ships.

The corpus goes to real ``fw run`` processes: the services of ``services/`` under the test's
suffix (but sensors, whose windows after a repartition depend on how late records interleave),
and ``hostile_echo`` (tests/integration/pipelines.py), which reads string, int, bytes, JSON, the
framework's value and key encodings, and Avro with every schema of ``schemas/``, and writes each
record again with the same serdes. What must hold:

- every service keeps running: one start, ``/health`` answers 200, a clean stop;
- a record that does not decode is in the dead-letter topic once: its key, value, timestamp
  and headers, then headers naming its topic, partition and offset, step and error;
- ``hostile_echo`` writes every other record once, re-encoded, and nothing else;
- each service's outputs and dead letters equal those of the TestDriver fed the same records.

**Refused records.** A 10 MB value passes with the producer's ``message.max.bytes`` raised; by
default it is dead-lettered with the reason, and a dead letter too large to send goes without
its key, value and headers (the record stays at its coordinates); an output two hours ahead of
now, which the broker would refuse, is dead-lettered: nothing stops, nothing is lost silently.
"""

from __future__ import annotations

import ctypes
import glob
import importlib
import json
import operator
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import confluent_kafka
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, ResourceType
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from framework.engine.partitioner import partition_for
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from framework.pipeline import Pipeline
from framework.serde import AvroSerde, BytesSerde, JsonSerde
from framework.testing import TestDriver
from tests.integration.harness import (
    Record,
    ServiceProcess,
    committed_offsets,
    end_offsets,
    get_json,
    present,
    read_topics,
    service_env,
    wait_until,
)
from tests.integration.pipelines import hostile_serdes
from tests.integration.replay_harness import contract, fw_replay

T0 = 1_700_000_000_000  # event times of valid records start here
WORDS = ["a", "b", "sensor-1", "card-7", "#kafka", "#Kafka!", "é", ""]
FW_NAMES = ["fw.source.topic", "fw.source.partition", "fw.source.offset", "fw.step", "fw.error.type",
            "fw.watermark", ""]
DEMOS = ["even_odd", "hashtags", "fire_alarm", "fraud_detection", "click_sessions", "traffic", "sales_per_month"]
FUZZED, VALID = 90, 60  # examples per source topic: fuzzed records, and valid ones between them
ECHO_FUZZED, ECHO_VALID = 60, 30
UNREADABLE = [(b"\xff\xfeorigin", b"c-client"), (b"trace\x00id", b"\x00\x01")]  # names not in UTF-8
ANY_TIME = {"message.timestamp.after.max.ms": str(2**63 - 1)}
LATEST = {"svc_sales_per_month": ("category",)}  # output fields "of the latest record" (see same_outputs)
MB = 1024 * 1024


# -- the corpus ---------------------------------------------------------------------------------

def _text() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(WORDS), st.text(max_size=12))


EDGES = st.sampled_from([0, -1, 2**31, 2**53 + 1, 2**63 - 300_000, 2**63 - 1, -(2**63)])
NASTY = st.sampled_from([float("inf"), float("-inf"), float("nan"), 2.0**63, 1e300, -0.0, 0.5])


def _long(field: str) -> st.SearchStrategy[int]:
    near = (st.integers(T0, T0 + 3_600_000) if field in ("timestamp", "start", "end", "small_at", "large_at")
            else st.integers(-1_000, 100_000))
    return st.one_of(near, near, near, EDGES, st.integers(-(2**63), 2**63 - 1))  # mostly plausible


def _float() -> st.SearchStrategy[float]:
    return st.one_of(st.floats(), NASTY)


def _avro(schema: Any, field: str = "") -> st.SearchStrategy[Any]:
    """Values of an Avro schema (records of primitives and unions of them, as in ``schemas/``)."""
    if isinstance(schema, dict) and schema.get("type") == "record":
        return st.fixed_dictionaries({f["name"]: _avro(f["type"], f["name"]) for f in schema["fields"]})
    if isinstance(schema, list):  # a union, e.g. ["null", "string"]
        return st.one_of(*(_avro(branch, field) for branch in schema))
    kinds = {"long": _long(field), "int": st.integers(-(2**31), 2**31 - 1), "double": _float(),
             "string": _text(), "boolean": st.booleans(), "null": st.none(), "bytes": st.binary(max_size=16)}
    return kinds[schema]


JSON = st.recursive(st.none() | st.booleans() | st.integers() | _float() | _text(),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text(), inner, max_size=4),
                    max_leaves=8)
BUILT_INS = st.recursive(
    st.none() | st.booleans() | st.integers() | _float() | _text() | st.binary(max_size=8) | st.datetimes()
    | st.dates() | st.decimals(),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner) | st.dictionaries(_text(), inner, max_size=3)
    | st.frozensets(st.integers(), max_size=3),
    max_leaves=8)
KEYS = st.one_of(_text(), st.integers(), _float(), st.booleans(), st.tuples(_text(), st.integers()))
SHAPES: dict[str, st.SearchStrategy[Any]] = {  # the JSON the services read
    "hashtags": st.fixed_dictionaries({"text": st.lists(_text(), max_size=6).map(" ".join)}),
    "fire_alarm": st.fixed_dictionaries({
        "location": _text(), "kind": st.sampled_from(["temperature", "smoke", "rain"]),
        "celsius": st.one_of(st.integers(0, 100), _float()),
        "ts": st.one_of(_long("timestamp"), _long("timestamp"), NASTY, _float(), _text(), st.integers()),
    }),
}


def _valid(serde: Any, values: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    return values.map(serde.serialize)


def _values_of(serde: Any, shape: st.SearchStrategy[Any] | None = None) -> st.SearchStrategy[Any]:
    """What ``serde`` encodes: ``shape`` when given, else any value of its kind."""
    if shape is not None:
        return shape
    if isinstance(serde, AvroSerde):
        return _avro(serde.schema)
    if isinstance(serde, JsonSerde):
        return JSON
    return {"StringSerde": _text(), "IntSerde": st.one_of(EDGES, st.integers(-(2**63), 2**63 - 1)),
            "BytesSerde": st.binary(),
            "ValueSerde": BUILT_INS, "KeySerde": KEYS}[type(serde).__name__]


def _flip(data: bytes, bits: list[int]) -> bytes:
    if not data:
        return b"\x80"
    out = bytearray(data)
    for bit in bits:
        out[(bit // 8) % len(out)] ^= 1 << (bit % 8)
    return bytes(out)


def _mutated(valid: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes | None]:
    """A valid encoding as it is, truncated, bit-flipped, extended, emptied or absent; or noise."""
    return st.one_of(
        valid,
        st.tuples(valid, st.integers(0, 64)).map(lambda t: t[0][: t[1] % (len(t[0]) + 1)]),
        st.tuples(valid, st.lists(st.integers(0, 2**12), min_size=1, max_size=4)).map(lambda t: _flip(*t)),
        st.tuples(valid, st.binary(min_size=1, max_size=16)).map(lambda t: t[0] + t[1]),
        st.just(b""), st.none(), st.binary(max_size=48),
    )


HEADERS = st.lists(st.tuples(st.one_of(st.text(max_size=12), st.sampled_from(FW_NAMES)),
                             st.one_of(st.none(), st.binary(max_size=24))), max_size=4)


def _examples(strategy: st.SearchStrategy[Any], n: int) -> list[Any]:
    """``n`` examples of ``strategy``, the same on every run (a derandomized Hypothesis run
    that collects what it generates)."""
    found: list[Any] = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(example: Any) -> None:
        found.append(example)

    collect()
    return found


Raw = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def corpus(key_serde: Any, value_serde: Any, fuzzed: int, valid: int,
           shape: st.SearchStrategy[Any] | None = None) -> list[Raw]:
    """Fuzzed records, with a valid one after every few."""
    key_ok = _valid(key_serde, _values_of(key_serde))
    value_ok = _valid(value_serde, _values_of(value_serde, shape))
    bad = _examples(st.tuples(_mutated(key_ok), _mutated(value_ok), HEADERS), fuzzed)
    good = _examples(st.tuples(key_ok, value_ok, HEADERS), valid)
    out: list[Raw] = []
    for i, record in enumerate(bad):
        out.append(record)
        if good and i % max(1, len(bad) // len(good)) == 0:
            out.append(good.pop())
    return out + good


# -- producing and reading back -------------------------------------------------------------------

@dataclass
class Stored:
    """A record as the topic holds it; ``headers`` None when the client cannot read them."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: list[tuple[str, bytes | None]] | None

    @property
    def where(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


def produce(bootstrap: str, topic: str, records: Iterable[Raw], partitions: int, *, first_ts: int = T0) -> None:
    """Each record to its key's partition (round robin without a key), in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i, (key, value, headers) in enumerate(records):
        partition = partition_for(key, partitions) if key is not None else i % partitions
        # cast: the stubs' list of header values that may also be str (a list the client only reads)
        producer.produce(topic, value, key, partition, timestamp=first_ts + i,
                         headers=cast("list[tuple[str, str | bytes | None]] | None", headers or None))
        producer.poll(0)
    assert producer.flush(60) == 0


def produce_unreadable_headers(bootstrap: str, topic: str, records: list[tuple[int, bytes, bytes]]) -> None:
    """``(partition, key, value)`` records with header names that are not UTF-8, through
    librdkafka's C API: what a C, Go or Rust producer may write."""
    lib = ctypes.CDLL(glob.glob(os.path.join(os.path.dirname(confluent_kafka.__file__), os.pardir,
                                             "confluent_kafka.libs", "librdkafka*.so*"))[0])
    lib.rd_kafka_conf_new.restype = lib.rd_kafka_new.restype = lib.rd_kafka_headers_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.c_size_t]
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_headers_new.argtypes = [ctypes.c_size_t]
    lib.rd_kafka_header_add.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_ssize_t, ctypes.c_char_p,
                                        ctypes.c_ssize_t]
    lib.rd_kafka_flush.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_destroy.argtypes = [ctypes.c_void_p]
    errors = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    assert lib.rd_kafka_conf_set(conf, b"bootstrap.servers", bootstrap.encode(), errors, 512) == 0
    rk = lib.rd_kafka_new(0, conf, errors, 512)  # 0: a producer
    assert rk, errors.value
    end, topic_, partition_, value_, key_, headers_ = 0, 1, 3, 4, 5, 10  # rd_kafka_vtype_t
    for partition, key, value in records:
        headers = lib.rd_kafka_headers_new(len(UNREADABLE))
        for name, data in UNREADABLE:
            lib.rd_kafka_header_add(headers, name, len(name), data, len(data))
        err = lib.rd_kafka_producev(
            ctypes.c_void_p(rk), ctypes.c_int(topic_), ctypes.c_char_p(topic.encode()),
            ctypes.c_int(partition_), ctypes.c_int32(partition), ctypes.c_int(value_), ctypes.c_char_p(value),
            ctypes.c_size_t(len(value)), ctypes.c_int(key_), ctypes.c_char_p(key), ctypes.c_size_t(len(key)),
            ctypes.c_int(headers_), ctypes.c_void_p(headers), ctypes.c_int(end))
        assert err == 0, err
    assert lib.rd_kafka_flush(ctypes.c_void_p(rk), 30_000) == 0
    lib.rd_kafka_destroy(ctypes.c_void_p(rk))


_read_headers = operator.methodcaller("headers")


def read_all(bootstrap: str, topics: list[str]) -> dict[str, list[Stored]]:
    """Every committed record of ``topics``, with timestamps and headers in order."""
    md = admin_client({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    parts = [TopicPartition(t, p, OFFSET_BEGINNING) for t in topics if t in md.topics
             for p in md.topics[t].partitions]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"hostile-reader-{time.time_ns()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True, "fetch.wait.max.ms": 10})
    consumer.assign(parts)
    out: dict[str, list[Stored]] = {t: [] for t in topics}
    at_end: set[tuple[str, int]] = set()
    deadline = time.monotonic() + 60
    while len(at_end) < len(parts):
        assert time.monotonic() < deadline, f"reading {topics} did not reach the end"
        for msg in consumer.consume(10_000, 0.1):
            err = msg.error()
            if err is not None:
                assert err.code() == KafkaError._PARTITION_EOF, err
                at_end.add(cast("tuple[str, int]", (msg.topic(), msg.partition())))  # an EOF event names them
                continue
            topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
            assert topic is not None and partition is not None and offset is not None  # a record has them
            at_end.discard((topic, partition))
            try:  # through methodcaller: see framework.records.record_headers
                headers: list[tuple[str, bytes | None]] | None = list(_read_headers(msg) or ())
            except SystemError:  # a header name that is not UTF-8
                headers = None
            out[topic].append(Stored(topic, partition, offset, msg.key(), msg.value(), msg.timestamp()[1], headers))
    consumer.close()
    return {t: sorted(rs, key=lambda r: (r.partition, r.offset)) for t, rs in out.items()}


# -- what must hold ---------------------------------------------------------------------------------

def _decoded(key_serde: Any, value_serde: Any, r: Stored) -> tuple[Any, Any, BaseException | None]:
    """The record decoded with the serdes, or the first error (None bytes stay None)."""
    try:
        k = None if r.key is None else key_serde.deserialize(r.key)
        v = None if r.value is None else value_serde.deserialize(r.value)
    except Exception as exc:  # noqa: BLE001 - any failure of a serde is what the oracle wants
        return None, None, exc
    return k, v, None


def _encoded(key_serde: Any, value_serde: Any, k: Any, v: Any) -> tuple[Any, BaseException | None]:
    """The decoded record encoded again, ``(key bytes, value bytes)``, or None and the error."""
    try:
        return (None if k is None else key_serde.serialize(k), None if v is None else value_serde.serialize(v)), None
    except Exception as exc:  # noqa: BLE001 - any failure of a serde is what the oracle wants
        return None, exc


def check_letter(letter: Stored, original: Stored, step: str, error: str | None = None) -> None:
    """A dead letter: the original key, value, timestamp and headers, then the framework's."""
    where = original.where
    assert (letter.key, letter.value, letter.timestamp) == (original.key, original.value, original.timestamp), where
    assert letter.headers is not None, where
    own = original.headers or []
    assert letter.headers[: len(own)] == own, f"{where}: its own headers first, in order"
    framework = dict(letter.headers[len(own):])
    assert framework["fw.source.topic"] == original.topic.encode(), where
    assert framework["fw.source.partition"] == str(original.partition).encode(), where
    assert framework["fw.source.offset"] == str(original.offset).encode(), where
    assert framework["fw.step"] == step.encode(), where
    assert where in present(framework["fw.error.message"]).decode(), where
    if error is not None:
        assert framework["fw.error.type"] == error.encode(), (where, framework["fw.error.type"], error)
    if original.headers is None:
        assert b"not copied" in present(framework["fw.source.headers"]), where
    last = dict(letter.headers)  # a reader that keeps the last header of a name gets the framework's
    assert all(last[name] == value for name, value in framework.items()), where


def letters_by_source(letters: list[Stored]) -> dict[tuple[str, int, int], Stored]:
    """Dead letters by the coordinates they name; each coordinate at most once."""
    out: dict[tuple[str, int, int], Stored] = {}
    for letter in letters:
        h = dict(letter.headers or [])
        if "fw.source.topic" not in h:
            continue  # a failed timer: no source record
        at = (present(h["fw.source.topic"]).decode(), int(present(h["fw.source.partition"])),
              int(present(h["fw.source.offset"])))
        assert at not in out, f"{at} dead-lettered twice"
        out[at] = letter
    return out


def expected_echo(kinds: dict[str, tuple[Any, Any]], stored: dict[str, list[Stored]],
                  suffix: str) -> tuple[dict[str, Counter[Any]], Counter[Any], dict[tuple[str, int, int], tuple[str, str]]]:
    """``hostile_echo`` computed by hand: each topic's outputs, the string counts, and the
    (step, error type) of each record that must be dead-lettered."""
    outputs: dict[str, Counter[Any]] = {}
    per_key: Counter[tuple[int, bytes | None]] = Counter()
    letters: dict[tuple[str, int, int], tuple[str, str]] = {}
    for kind, (ks, vs) in kinds.items():
        out = outputs[f"hx-{kind}-out-{suffix}"] = Counter()
        for r in stored[f"hx-{kind}-in-{suffix}"]:
            k, v, err = _decoded(ks, vs, r)
            if err is not None:
                letters[(r.topic, r.partition, r.offset)] = (f"{kind}-in", type(err).__name__)
                continue
            encoded, err = _encoded(ks, vs, k, v)
            if encoded is None:
                letters[(r.topic, r.partition, r.offset)] = (f"to-{kind}-out", type(err).__name__)
                continue
            kb, vb = encoded
            out[(kb, vb, r.timestamp)] += 1
            if kind == "string" and k is None:  # counted per key: a record without one fails there,
                letters[(r.topic, r.partition, r.offset)] = ("string-counts", "ProcessingError")  # once echoed
            elif kind == "string":
                per_key[(r.partition, kb)] += 1
    counts = Counter((key, str(i).encode()) for (_, key), n in per_key.items() for i in range(1, n + 1))
    return outputs, counts, letters


# -- the services --------------------------------------------------------------------------------------

@dataclass
class Run:
    """A service under test: its pipeline (built here with the test's suffix) and process."""

    target: str
    pipeline: Pipeline
    svc: ServiceProcess
    sources: dict[str, list[Stored]]


def demo_pipeline(package: str, suffix: str) -> Pipeline:
    return importlib.import_module(f"services.{package}.pipeline").build_pipeline(f"-{suffix}")


def driver_results(pipeline: Pipeline, sources: dict[str, list[Stored]]) -> dict[str, list[Record]]:
    """What the TestDriver writes, fed the same records (in the same partitions and order)."""
    driver = TestDriver(pipeline, partitions=max(r.partition for rs in sources.values() for r in rs) + 1)
    for topic, records in sources.items():
        for r in records:
            # a hostile header may have no value, as Kafka allows; framework.records.Headers has bytes only
            driver.append(topic, r.value, key=r.key, timestamp=r.timestamp,
                          headers=r.headers or None,  # type: ignore[arg-type]  # header values may be None
                          partition=r.partition)
    driver.run()
    raw = BytesSerde()
    out = {t.name: [Record(m.partition, m.offset, m.key, m.value, dict(m.headers))
                    for m in driver.output(t, key_serde=raw, value_serde=raw)]
           for t in pipeline.sink_topics()}
    out[pipeline.dead_letter.name] = [Record(m.partition(), m.offset(), m.key(), m.value(), dict(m.headers() or ()))
                                      for m in driver.dead_letters()]
    return out


def same_outputs(pipeline: Pipeline, live: list[Stored], expected: list[Record], topic: str,
                 latest: tuple[str, ...] = ()) -> list[str]:
    """Differences the replay contract (docs/replay.md) does not allow between the live outputs of
    ``topic`` and the TestDriver's: each key's outputs in order where one partition feeds them,
    in any order after a repartition, as many and the same last one of order-sensitive steps
    fed by several, but for the ``latest`` fields (a value "of the latest record", which depends
    on how the partitions interleave). A record without a key goes to any partition, so those
    compare as a multiset."""
    kind = contract(pipeline, topic)
    if kind == "final" and latest:
        serde = next(t for t in pipeline.sink_topics() if t.name == topic).value_serde.bind(topic, False)

        def without(value: bytes | None) -> Any:
            decoded = serde.deserialize(value) if value is not None else None
            kept = {k: v for k, v in decoded.items() if k not in latest} if isinstance(decoded, dict) else decoded
            return json.dumps(kept, sort_keys=True, default=repr)

        live = [Stored(r.topic, r.partition, r.offset, r.key, without(r.value), r.timestamp, r.headers) for r in live]
        expected = [Record(e.partition, e.offset, e.key, without(e.value), e.headers) for e in expected]
    a: dict[bytes | None, list[Any]] = {}
    b: dict[bytes | None, list[Any]] = {}
    for r in live:
        a.setdefault(r.key, []).append(r.value)
    for e in sorted(expected, key=lambda e: (e.partition, e.offset)):
        b.setdefault(e.key, []).append(e.value)
    if set(a) != set(b):
        return [f"{topic}: keys only live {set(a) - set(b)}, only expected {set(b) - set(a)}"]
    problems = []
    for key, x in a.items():
        y = b[key]
        same = (Counter(x) == Counter(y) if kind == "multiset" or key is None
                else (len(x), x[-1]) == (len(y), y[-1]) if kind == "final" else x == y)
        if not same:
            problems.append(f"{topic} ({kind}) key {key!r}: live {x[:10]}..., expected {y[:10]}...")
    return problems


def same_letters(live: list[Stored], expected: list[Record], sources: set[str]) -> list[str]:
    """The dead letters match the TestDriver's: the same records (by coordinates where they come
    from a source topic; a repartition topic's offsets differ), steps and errors."""
    def summary(topic: str, partition: int, offset: int, key: Any, value: Any, h: dict[str, Any]) -> Any:
        at = offset if topic in sources else None
        return (topic, partition, at, key, value, h.get("fw.step"), h.get("fw.error.type"),
                h.get("fw.timer.timestamp"))

    def of(h: dict[str, Any], key: Any, value: Any) -> Any:
        topic = (h.get("fw.source.topic") or b"").decode()
        return summary(topic, int(h.get("fw.source.partition", -1)), int(h.get("fw.source.offset", -1)), key, value, h)

    mine = Counter(of(dict(r.headers or []), r.key, r.value) for r in live)
    theirs = Counter(of(e.headers, e.key, e.value) for e in expected)
    if mine == theirs:
        return []
    only_live, only_expected = list((mine - theirs).elements()), list((theirs - mine).elements())
    return [f"dead letters: only live {only_live[:5]}, only expected {only_expected[:5]}"]


def start(target: str, pipeline: Pipeline, sources: dict[str, list[Stored]], workdir: Path, env: dict[str, str],
          services: list[ServiceProcess]) -> Run:
    svc = ServiceProcess(f"tests.integration.pipelines:{target}", workdir / target, "0", env)
    (workdir / target).mkdir()
    services.append(svc.start())
    return Run(target, pipeline, svc, sources)


def processed_all(bootstrap: str, pipeline: Pipeline) -> Callable[[], bool]:
    """For ``wait_until``: the group committed past the end of every source partition, then
    past the last record of every repartition partition (``replay_harness.caught_up``, whose
    reader cannot read the sources here: confluent-kafka keeps a broken list for headers it
    could not read, and the harness reads them twice)."""
    sources = [s.topic.name for s in pipeline.sources()]
    ends = {t: end_offsets(bootstrap, t) for t in sources}
    internal = [t for t in pipeline.input_topics() if t not in sources]

    def committed_past(last: dict[str, dict[int, int]]) -> bool:
        return all(committed_offsets(bootstrap, pipeline.name, t).get(p, 0) > o
                   for t, parts in last.items() for p, o in parts.items())

    def done() -> bool:
        if not committed_past({t: {p: end - 1 for p, end in parts.items() if end} for t, parts in ends.items()}):
            return False
        last: dict[str, dict[int, int]] = {}
        for t, records in read_topics(bootstrap, internal).items():
            for r in records:
                last.setdefault(t, {})[r.partition] = max(last.get(t, {}).get(r.partition, -1), r.offset)
        return committed_past(last)

    return done


def finish(run: Run, bootstrap: str) -> None:
    """Wait until ``run`` has processed every record; it is alive, was never restarted, is
    healthy; then stop it cleanly."""
    wait_until(lambda: processed_all(bootstrap, run.pipeline)() or not run.svc.alive, 120,
               f"{run.target} to process every record", lambda: run.svc.log_text()[-3000:])
    assert run.svc.alive and run.svc.starts == 1, run.svc.log_text()[-3000:]
    status, body = get_json(run.svc.endpoint() + "/health")
    assert status == 200, body
    assert run.svc.stop() == 0, run.svc.log_text()[-3000:]
    assert run.svc.log_text().count("---- start") == 1


def test_fuzzed_records_are_dead_lettered_with_their_coordinates_and_every_valid_one_is_processed_once(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FW_TEST_SUFFIX", unique)
    from tests.integration.pipelines import hostile_echo

    admin = admin_client({"bootstrap.servers": kafka_bootstrap})
    kinds = hostile_serdes()
    echo = hostile_echo()
    demos = {package: demo_pipeline(package, unique) for package in DEMOS}
    ensure_topics(admin, [TopicSpec(s.topic.name, s.topic.partitions or p.default_partitions)
                          for p in [echo, *demos.values()] for s in p.sources()])
    # The TestDriver's topics take any timestamp; a broker's refuse those over an hour ahead
    # (message.timestamp.after.max.ms), which fuzzed event times are: the services' outputs here
    # take any too, so the TestDriver stays the reference. The refusal is tested on its own below.
    ensure_topics(admin, [TopicSpec(t.name, t.partitions or p.default_partitions, ANY_TIME)
                          for p in demos.values() for t in [*p.sink_topics(), p.dead_letter]])

    # The corpus: fuzzed records with valid ones between them, and a few with headers the
    # client cannot read (valid and not) on each partition of the JSON topics.
    for kind, (ks, vs) in kinds.items():
        produce(kafka_bootstrap, f"hx-{kind}-in-{unique}", corpus(ks, vs, ECHO_FUZZED, ECHO_VALID), 2)
    for package, pipeline in demos.items():
        (source,) = pipeline.sources()
        t = source.topic
        produce(kafka_bootstrap, t.name, corpus(t.key_serde, t.value_serde, FUZZED, VALID, SHAPES.get(package)),
                t.partitions or pipeline.default_partitions)
    for topic in (f"hx-json-in-{unique}", f"tweets-{unique}"):
        produce_unreadable_headers(kafka_bootstrap, topic, [(p, b"k", v) for p in (0, 1)
                                                            for v in (b'{"text": "#c"}', b"\xff not json")])

    source_topics = {p.name: [s.topic.name for s in p.sources()] for p in [echo, *demos.values()]}
    stored = read_all(kafka_bootstrap, [t for ts in source_topics.values() for t in ts])
    env = service_env(kafka_bootstrap, unique, checkpoint_interval_ms=200)
    runs = [start("hostile_echo", echo, {t: stored[t] for t in source_topics[echo.name]}, tmp_path, env, services)]
    runs += [start(f"svc_{package}", pipeline, {t: stored[t] for t in source_topics[pipeline.name]}, tmp_path, env,
                   services) for package, pipeline in demos.items()]
    for run in runs:
        finish(run, kafka_bootstrap)

    problems: list[str] = []
    for run in runs:
        p = run.pipeline
        outputs = read_all(kafka_bootstrap, [t.name for t in p.sink_topics()] + [p.dead_letter.name])
        letters = outputs.pop(p.dead_letter.name)
        by_source = letters_by_source(letters)
        records = {(r.topic, r.partition, r.offset): r for rs in run.sources.values() for r in rs}
        # Whatever else failed, a record that does not decode is a dead letter, and every dead
        # letter of a source record carries that record.
        for at, letter in by_source.items():
            if at[0] in records:
                step = letter.headers and present(dict(letter.headers)["fw.step"]).decode()
                check_letter(letter, records[at], str(step))
        for s in p.sources():
            for r in run.sources[s.topic.name]:
                _, _, err = _decoded(s.topic.key_serde, s.topic.value_serde, r)
                if err is not None:
                    assert (r.topic, r.partition, r.offset) in by_source, f"{r.where} does not decode: a dead letter"
                    check_letter(by_source[(r.topic, r.partition, r.offset)], r, s.name, type(err).__name__)
        if run.target == "hostile_echo":
            want, counts, dead = expected_echo(kinds, stored, unique)
            for topic, expected in want.items():
                got = Counter((r.key, r.value, r.timestamp) for r in outputs[topic])
                if got != expected:
                    problems.append(f"{topic}: only live {list((got - expected).elements())[:5]}, "
                                    f"only expected {list((expected - got).elements())[:5]}")
            got_counts = Counter((r.key, r.value) for r in outputs[f"hx-string-counts-{unique}"])
            if got_counts != counts:
                problems.append(f"string counts: only live {got_counts - counts}, only expected {counts - got_counts}")
            if set(by_source) != set(dead) or len(letters) != len(dead):
                problems.append(f"echo dead letters: only live {sorted(set(by_source) - set(dead))[:5]}, "
                                f"only expected {sorted(set(dead) - set(by_source))[:5]}")
            for at, (step, error) in dead.items():
                if at in by_source:
                    check_letter(by_source[at], records[at], step, error)
        else:
            by_driver = driver_results(p, run.sources)
            for topic, records_out in outputs.items():
                live = [r for r in records_out if not (r.key is None and r.value is None
                                                       and any(h == "fw.watermark" for h, _ in r.headers or []))]
                problems += same_outputs(p, live, by_driver[topic], topic, LATEST.get(run.target, ()))
            problems += same_letters(letters, by_driver[p.dead_letter.name], set(run.sources))
    assert not problems, "\n".join(problems)


# -- records the broker would refuse -------------------------------------------------------------

LIMIT = 16 * MB  # the raised producer limit: a 10 MB record passes, a 20 MB one does not
BIG = 10 * MB


def _refused_run(bootstrap: str, suffix: str, workdir: Path, services: list[ServiceProcess], env: dict[str, str],
                 byte_values: list[bytes], json_values: list[bytes]) -> ServiceProcess:
    """``refused_echo`` under ``suffix``, its sources (taking up to 64 MB) holding the values."""
    admin = admin_client({"bootstrap.servers": bootstrap})
    ensure_topics(admin, [TopicSpec(f"rf-{kind}-in-{suffix}", 1, {"max.message.bytes": str(4 * LIMIT)})
                          for kind in ("bytes", "json")])
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 4 * LIMIT, "linger.ms": 5,
                         "enable.idempotence": True})
    for kind, values in (("bytes", byte_values), ("json", json_values)):
        for value in values:
            producer.produce(f"rf-{kind}-in-{suffix}", value, b"k", 0)
    assert producer.flush(60) == 0
    (workdir / suffix).mkdir()
    svc = ServiceProcess("tests.integration.pipelines:refused_echo", workdir / suffix, "0",
                         {**service_env(bootstrap, suffix), **env})
    services.append(svc.start())
    return svc


def _letters(bootstrap: str, topic: str) -> dict[tuple[str, int], tuple[Stored, dict[str, bytes | None]]]:
    """Dead letters by the source topic and offset they name, with their headers."""
    out = {}
    for letter in read_all(bootstrap, [topic])[topic]:
        h = dict(letter.headers or [])
        out[((h["fw.source.topic"] or b"").decode(), int(h["fw.source.offset"] or b"-1"))] = (letter, h)
    return out


def _check_omitted(letter: Stored, h: dict[str, bytes | None], step: str, error: str, size: int) -> None:
    """A dead letter that cannot carry its record: no key or value; the coordinates, the step, the
    error, and what was left out."""
    assert (letter.key, letter.value) == (None, None), h
    assert (h["fw.step"], h["fw.error.type"]) == (step.encode(), error.encode()), h
    omitted = (h["fw.omitted"] or b"").decode()
    assert f"value ({size} bytes)" in omitted and "message.max.bytes" in omitted, omitted


def test_records_the_broker_would_refuse_are_processed_with_raised_limits_or_dead_lettered_with_the_reason(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.integration.pipelines import refused_echo

    now = int(time.time() * 1000)
    rng = random.Random(7)
    big, huge = rng.randbytes(BIG), rng.randbytes(20 * MB)  # random: compression cannot shrink them
    junk = b"\xff" + rng.randbytes(BIG)  # not JSON
    padded = json.dumps({"ts": now, "pad": "x" * BIG}).encode()  # JSON of 10 MB
    ahead = json.dumps({"ts": now + 2 * 3_600_000, "v": 2}).encode()  # two hours ahead of now
    json_serde = JsonSerde()
    junk_error = type(_decoded(json_serde, json_serde, Stored("", 0, 0, None, junk, 0, []))[2]).__name__

    def small(v: int) -> bytes:
        return json.dumps({"ts": now, "v": v}).encode()

    def again(value: bytes) -> bytes:  # what the JSON echo writes
        return json_serde.serialize(json.loads(value))

    # Defaults: the producer sends up to 1,000,000 bytes; topics take timestamps up to an hour ahead.
    d, r, c = f"{unique}d", f"{unique}r", f"{unique}c"
    defaults = _refused_run(kafka_bootstrap, d, tmp_path, services, {}, [b"a", big, b"b"],
                            [small(1), ahead, padded, junk, small(3)])
    # Raised: FW_KAFKA_PRODUCER__MESSAGE_MAX_BYTES; the service creates its topics to match.
    raised = _refused_run(kafka_bootstrap, r, tmp_path, services, {"FW_KAFKA_PRODUCER__MESSAGE_MAX_BYTES": str(LIMIT)},
                          [b"a", big, huge, b"b"], [junk, padded, small(3)])
    # An output topic that exists with a smaller limit than the producer's stops the start.
    admin = admin_client({"bootstrap.servers": kafka_bootstrap})
    ensure_topics(admin, [TopicSpec(f"rf-bytes-out-{c}", 1)])
    checked = _refused_run(kafka_bootstrap, c, tmp_path, services, {"FW_KAFKA_PRODUCER__MESSAGE_MAX_BYTES": str(LIMIT)},
                           [b"a"], [small(1)])
    assert checked.wait_exit(120) != 0
    assert (f"message.max.bytes={LIMIT} is larger than the max.message.bytes of topics the service writes to: "
            f"rf-bytes-out-{c} (1048588)") in checked.log_text(), checked.log_text()[-3000:]

    for suffix, svc in ((d, defaults), (r, raised)):
        monkeypatch.setenv("FW_TEST_SUFFIX", suffix)
        finish(Run("refused_echo", refused_echo(), svc, {}), kafka_bootstrap)
    # A backfill on Spark decides as the live runs did: each with its producer settings
    replayed = {suffix: _replay_refused(kafka_bootstrap, suffix, env) for suffix, env in
                ((d, {}), (r, {"FW_KAFKA_PRODUCER__MESSAGE_MAX_BYTES": str(LIMIT)}))}

    # Defaults: what fits is processed. The 10 MB records are dead letters that say why, without
    # their bytes, which do not fit the dead-letter topic either; the output two hours ahead is
    # one with its bytes.
    out = read_all(kafka_bootstrap, [f"rf-bytes-out-{d}", f"rf-json-out-{d}"])
    assert [x.value for x in out[f"rf-bytes-out-{d}"]] == [b"a", b"b"]
    assert [x.value for x in out[f"rf-json-out-{d}"]] == [again(small(1)), again(small(3))]
    letters = _letters(kafka_bootstrap, f"rf-{d}-dead-letter")
    bytes_in, json_in = f"rf-bytes-in-{d}", f"rf-json-in-{d}"
    assert sorted(letters) == [(bytes_in, 1), (json_in, 1), (json_in, 2), (json_in, 3)]
    _check_omitted(*letters[(bytes_in, 1)], "to-bytes-out", "RecordTooLargeError", BIG)
    message = (letters[(bytes_in, 1)][1]["fw.error.message"] or b"").decode()
    assert f"{bytes_in}[0]@1" in message and "FW_KAFKA_PRODUCER__MESSAGE_MAX_BYTES" in message, message
    letter, h = letters[(json_in, 1)]
    assert (letter.value, h["fw.step"], h["fw.error.type"]) == (ahead, b"to-json-out", b"TimestampError"), h
    assert b"message.timestamp.after.max.ms" in (h["fw.error.message"] or b""), h
    _check_omitted(*letters[(json_in, 2)], "to-json-out", "RecordTooLargeError", len(padded))
    _check_omitted(*letters[(json_in, 3)], "json-in", junk_error, len(junk))

    # Raised: the 10 MB records pass whole; the 20 MB one is a dead letter without its bytes; the
    # 10 MB one that does not decode is a dead letter with all of them.
    out = read_all(kafka_bootstrap, [f"rf-bytes-out-{r}", f"rf-json-out-{r}"])
    assert [x.value for x in out[f"rf-bytes-out-{r}"]] == [b"a", big, b"b"]
    assert [x.value for x in out[f"rf-json-out-{r}"]] == [again(padded), again(small(3))]
    letters = _letters(kafka_bootstrap, f"rf-{r}-dead-letter")
    assert sorted(letters) == [(f"rf-bytes-in-{r}", 2), (f"rf-json-in-{r}", 0)]
    _check_omitted(*letters[(f"rf-bytes-in-{r}", 2)], "to-bytes-out", "RecordTooLargeError", len(huge))
    letter, h = letters[(f"rf-json-in-{r}", 0)]
    assert (letter.key, letter.value, h["fw.error.type"]) == (b"k", junk, junk_error.encode()), h
    configs = admin.describe_configs([ConfigResource(ResourceType.TOPIC, t)
                                      for t in (f"rf-{r}-dead-letter", f"rf-bytes-out-{r}", f"rf-{r}-dead-letter-rp",
                                                f"rf-bytes-out-{r}-rp")])
    assert all(f.result()["max.message.bytes"].value == str(LIMIT) for f in configs.values())

    for suffix in (d, r):  # the backfills wrote what the live runs wrote, and refused what they refused
        assert replayed[suffix] == _refusals(kafka_bootstrap, suffix, ""), suffix


def _replay_refused(bootstrap: str, suffix: str, env: dict[str, str]) -> tuple[Any, ...]:
    """``fw replay`` of ``refused_echo`` under ``suffix`` to its topics renamed ``-rp``: what
    it wrote (``_refusals``)."""
    done = fw_replay(["replay", "tests.integration.pipelines:refused_echo", "--output", "topic", "--output-suffix",
                      "-rp", "--reader", "librdkafka", "--master", "local[1]"],
                     {**service_env(bootstrap, suffix), **env})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return _refusals(bootstrap, suffix, "-rp")


def _refusals(bootstrap: str, suffix: str, renamed: str) -> tuple[Any, ...]:
    """The outputs of the refused echo under ``suffix`` (topics renamed by ``renamed``), and its
    dead letters by source record: their key, value, step, error type and what they left out
    (not why: that names the topics, renamed or not)."""
    out = read_all(bootstrap, [f"rf-bytes-out-{suffix}{renamed}", f"rf-json-out-{suffix}{renamed}"])
    letters = {where: (letter.key, letter.value, h["fw.step"], h["fw.error.type"],
                       (h.get("fw.omitted") or b"").partition(b": the record for")[0])
               for where, (letter, h) in _letters(bootstrap, f"rf-{suffix}-dead-letter{renamed}").items()}
    return [x.value for x in out[f"rf-bytes-out-{suffix}{renamed}"]], \
        [x.value for x in out[f"rf-json-out-{suffix}{renamed}"]], letters
