"""Replay parity on the real broker with real PySpark: for every service in ``services/`` and
the pipelines of the integration tests, a history with disorder within the watermark bound, a
few poison records and several partitions is processed live to its end (the reference), then
replayed over the same offsets with ``fw replay --bootstrap --output topic``. The outputs
equal the live ones by the contract (docs/replay.md: each key's outputs in order where one
partition feeds them, in any order after a repartition, the last value of an order-sensitive
step fed by several partitions), the dead letters are the same, and the final state in the
changelogs is the same per store and key."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from framework.engine.partitioner import partition_for
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from framework.pipeline import Pipeline
from framework.serde import AvroSerde, load_schema
from tests.integration.harness import ServiceProcess, produce_to_partitions, service_env, wait_until
from tests.integration.replay_harness import assert_same, caught_up, fw_replay, results

History = dict[str, list[tuple[Any, ...]]]  # topic -> (partition, key, value[, headers])
POISON = [b"\xff\xfe not json nor avro", b"\x00", b"{\"truncated\":"]
# A poison record's headers go into its dead letter: one with a binary value, one without.
POISON_HEADERS = [("origin", b"\x00\xffsensor-7"), ("trace", None)]


def _json(rows: list[tuple[str, Any]], partitions: int, rng: random.Random) -> list[tuple[Any, ...]]:
    """Keyed JSON records in their key's partition, with a poison record here and there."""
    out: list[tuple[Any, ...]] = []
    for i, (key, value) in enumerate(rows):
        p = partition_for(key.encode(), partitions)
        out.append((p, key.encode(), json.dumps(value).encode()))
        if i % 97 == 13:
            out.append((p, key.encode(), rng.choice(POISON), POISON_HEADERS))
    return out


def _timeline(n: int, bound: int, seed: int, start: int = 1_700_000_000_000, step: int = 50) -> list[int]:
    """``n`` event times about ``step / 2`` ms apart, each up to ``bound`` behind the latest
    before it."""
    rng = random.Random(seed)
    now, out = start, []
    for _ in range(n):
        now += rng.randint(0, step)
        out.append(now - rng.randint(0, bound))
    return out


def even_odd_service(s: str) -> History:
    serde = AvroSerde(load_schema("demo.Number"))
    rows = [(str(n % 10), n) for n in range(1, 401)]
    out: list[tuple[Any, ...]] = [(partition_for(k.encode(), 4), k.encode(), serde.serialize({"n": n}))
                                  for k, n in rows]
    out[50:50] = [(partition_for(b"3", 4), b"3", POISON[0], POISON_HEADERS)]
    return {f"numbers-{s}": out}


def hashtags_service(s: str) -> History:
    rng = random.Random(2)
    tags = ["#kafka", "#flink", "#spark", "#python", "#streams"]
    rows = [(f"u{i % 7}", {"text": " ".join(rng.sample(tags, rng.randint(0, 3)) + ["hello"])}) for i in range(300)]
    return {f"tweets-{s}": _json(rows, 4, rng)}


def sensors_service(s: str) -> History:
    rng = random.Random(3)
    serde = AvroSerde(load_schema("sensor.Reading"))
    times = _timeline(600, 4_000, 3)
    out = []
    for i, ts in enumerate(times):
        sensor = f"s{i % 6}"
        value = serde.serialize({"id": sensor, "timestamp": ts, "temperature": 20 + rng.random() * 15})
        out.append((partition_for(sensor.encode(), 4), sensor.encode(), value))
    out[100:100] = [(partition_for(b"s1", 4), b"s1", POISON[0])]
    return {f"readings-{s}": out}


def fire_alarm_service(s: str) -> History:
    rng = random.Random(4)
    rows = []
    for i, ts in enumerate(_timeline(500, 20_000, 4)):
        kind = rng.choice(["temperature", "temperature", "smoke"])
        rows.append((f"room{i % 5}", {"location": f"room{i % 5}", "kind": kind, "celsius": rng.randint(10, 90),
                                      "ts": ts}))
    return {f"sensor-events-{s}": _json(rows, 4, rng)}


def demo_history(package: str, records: int, seed: int) -> Callable[[str], History]:
    """The history of an example service: its demo's generated input (``services/<package>/
    demo.py``) on each of its source topics, encoded with the service's own serdes into the
    topic's partitions by key and stamped with its event time (a tombstone has no value to
    carry it), with a poison record in the demo's first source."""
    def history(s: str) -> History:
        from framework.demos import load_demo

        demo, build = load_demo(package)
        pipeline = build(f"-{s}")
        topics = {src.topic.name: src.topic for src in pipeline.sources()}
        out: History = {}
        for name, rows in demo.by_source(demo.generate(records, seed)).items():
            topic = topics[f"{name}-{s}"]
            partitions = topic.partitions or pipeline.default_partitions
            encode = topic.value_serde.serialize
            out[topic.name] = [(partition_for(k, partitions), k, None if value is None else encode(value), None, ts)
                               for k, value, ts in ((topic.key_serde.serialize(key), v, t) for key, v, t in rows)]
        first = next(iter(out.values()))
        first[records // 3:records // 3] = [(first[0][0], first[0][1], POISON[0], POISON_HEADERS)]
        return out
    return history


def even_odd(s: str) -> History:
    rows = [(str(n % 7), n) for n in range(1, 301)]
    return {f"numbers-{s}": _json(rows, 4, random.Random(5))}


def avro_numbers(s: str) -> History:
    serde = AvroSerde(load_schema("demo.Number"))
    out: list[tuple[Any, ...]] = [(partition_for(str(i % 9).encode(), 4), str(i % 9).encode(),
                                   serde.serialize({"n": i * 7})) for i in range(300)]
    out[33:33] = [(partition_for(b"x", 4), b"x", b"\xff\xff\xff", POISON_HEADERS)]
    return {f"avro-numbers-{s}": out}


def two_drivers(s: str) -> History:
    rng = random.Random(6)
    rows = [(f"user{rng.randrange(8)}", {"user": "", "amount": rng.choice([3, 50, 700, 13, 9, 600])})
            for _ in range(300)]
    rows = [(u, {**v, "user": u}) for u, v in rows]
    return {f"td-tx-{s}": _json(rows, 3, rng)}


def event_time_windows(s: str) -> History:
    rng = random.Random(7)
    rows = [(f"s{i % 8}", {"sensor": f"s{i % 8}", "ts": ts, "v": rng.randint(0, 100)})
            for i, ts in enumerate(_timeline(800, 200, 7))]
    return {f"etw-in-{s}": _json(rows, 4, rng)}


def fire_alarm(s: str) -> History:
    rng = random.Random(8)
    rows = [(f"loc{i % 4}", {"kind": rng.choice(["temperature", "smoke", "tick"]), "celsius": rng.randint(20, 80),
                             "ts": ts}) for i, ts in enumerate(_timeline(400, 1_000, 8))]
    return {f"fa-in-{s}": _json(rows, 2, rng)}


def fast_and_slow(s: str) -> History:
    rng = random.Random(9)
    rows = [(f"s{i % 6}", {"sensor": f"s{i % 6}", "group": f"g{i % 3}", "ts": ts, "v": i})
            for i, ts in enumerate(_timeline(500, 200, 9))]
    return {f"fs-in-{s}": _json(rows, 2, rng)}


def word_counts(s: str) -> History:
    rng = random.Random(10)
    rows = [(w, {"w": w}) for w in (rng.choice("abcdefg") for _ in range(300))]
    return {f"wc-in-{s}": _json(rows, 2, rng)}


def upgrade_v2(s: str) -> History:
    rng = random.Random(11)
    views = [(f"u{i % 5}", {"user": f"u{i % 5}", "ts": ts}) for i, ts in enumerate(_timeline(400, 0, 11))]
    clicks = [(f"u{i % 3}", {"user": f"u{i % 3}", "ts": ts}) for i, ts in enumerate(_timeline(200, 0, 12))]
    return {f"up-views-{s}": _json(views, 2, rng), f"up-clicks-{s}": _json(clicks, 2, rng)}


def upgrade_v1(s: str) -> History:
    return {t: rs for t, rs in upgrade_v2(s).items() if t.startswith("up-views-")}


def chain(s: str) -> History:
    rng = random.Random(13)
    # about 4 minutes of event time: the downstream's one-minute windows close
    rows = [(f"user{i % 9}", {"user": f"user{i % 9}", "ts": ts})
            for i, ts in enumerate(_timeline(500, 900, 13, step=1_000))]
    return {f"ch-in-{s}": _json(rows, 2, rng)}


def enriched_orders(s: str) -> History:
    from tests.integration import tables

    return tables.history(s, tables.events(orders=400, customers=12, seed=14))


def priced_orders(s: str) -> History:
    from tests.integration import tables

    return tables.global_history(s, tables.events(orders=400, customers=12, seed=15))


@dataclass(frozen=True)
class Case:
    target: str
    history: Callable[[str], History]
    env: dict[str, str] = field(default_factory=dict)
    upstream: str | None = None  # a service whose outputs are the target's sources: run live first
    reader: str = "spark"  # fw replay --reader: about half the cases each (they differ in stage 0's reading only)


LIBRDKAFKA = "librdkafka"
CASES = [
    Case("svc_even_odd", even_odd_service), Case("svc_hashtags", hashtags_service, reader=LIBRDKAFKA),
    Case("svc_sensors", sensors_service), Case("svc_fire_alarm", fire_alarm_service, reader=LIBRDKAFKA),
    Case("svc_fraud_detection", demo_history("fraud_detection", 400, 1)),
    Case("svc_click_sessions", demo_history("click_sessions", 400, 2), reader=LIBRDKAFKA),
    Case("svc_traffic", demo_history("traffic", 600, 3)),
    Case("svc_sales_per_month", demo_history("sales_per_month", 400, 4), reader=LIBRDKAFKA),
    Case("svc_orders_enrich", demo_history("orders_enrich", 400, 5)),  # a stream and a table
    Case("even_odd", even_odd), Case("avro_numbers", avro_numbers, reader=LIBRDKAFKA),
    Case("two_drivers", two_drivers, {"FW_TEST_PARTITIONS": "3"}),
    Case("event_time_windows", event_time_windows, reader=LIBRDKAFKA),
    Case("fire_alarm", fire_alarm), Case("fast_and_slow", fast_and_slow, reader=LIBRDKAFKA),
    Case("word_counts", word_counts), Case("upgrade_v1", upgrade_v1),
    Case("upgrade_v2", upgrade_v2, reader=LIBRDKAFKA),  # two sources merged in each task
    Case("chain_upstream", chain), Case("chain_downstream", chain, upstream="chain_upstream", reader=LIBRDKAFKA),
    Case("enriched_orders", enriched_orders),  # a stream-table join by event time
    Case("priced_orders", priced_orders, reader=LIBRDKAFKA),  # a global table, read whole by every task
]


def prepare(case: Case, bootstrap: str, suffix: str, monkeypatch: pytest.MonkeyPatch,
            part: slice = slice(None)) -> tuple[Pipeline, dict[str, str]]:
    """The case's pipeline under ``suffix``, its source topics with ``part`` of the history
    produced into them, and the environment of its services and replays."""
    monkeypatch.setenv("FW_TEST_SUFFIX", suffix)
    for k, v in case.env.items():
        monkeypatch.setenv(k, v)
    from tests.integration import pipelines

    pipeline = getattr(pipelines, case.target)()
    upstream = [getattr(pipelines, case.upstream)()] if case.upstream else []
    produce_history(case, bootstrap, suffix, [*upstream, pipeline], part)
    return pipeline, {**service_env(bootstrap, suffix), **case.env}


def produce_history(case: Case, bootstrap: str, suffix: str, pipelines: list[Pipeline], part: slice) -> None:
    """``part`` of each source topic's history (the pipelines' sources created first)."""
    admin = admin_client({"bootstrap.servers": bootstrap})
    counts = {t.name: t.partitions or p.default_partitions for p in pipelines
              for t in [s.topic for s in p.sources()] + [g.topic for g in p.global_tables()]}
    ensure_topics(admin, [TopicSpec(t, n) for t, n in counts.items()])
    for topic, records in case.history(suffix).items():
        produce_to_partitions(bootstrap, topic, records[part])


def run_live(case: Case, bootstrap: str, pipeline: Pipeline, env: dict[str, str], workdir: Path,
             services: list[ServiceProcess]) -> None:
    """The live service (instance 0, its state under ``workdir``) until it has processed
    every record of its sources, then stopped; the case's upstream service first."""
    if case.upstream:
        from tests.integration import pipelines

        run_live(Case(case.upstream, case.history), bootstrap, getattr(pipelines, case.upstream)(), env,
                 workdir / "upstream", services)
    workdir.mkdir(parents=True, exist_ok=True)
    svc = ServiceProcess(f"tests.integration.pipelines:{case.target}", workdir, "0", env)
    services.append(svc.start())
    wait_until(caught_up(bootstrap, pipeline), 180, "the live run processed everything", svc.log_text)
    assert svc.stop() == 0


def replay(case: Case, env: dict[str, str], *args: str, master: str = "local[2]") -> str:
    """``fw replay`` of the case's pipeline with ``args`` and its reader; its output (it must succeed)."""
    done = fw_replay(["replay", f"tests.integration.pipelines:{case.target}", "--allow-nondeterministic",
                      "--reader", case.reader, "--master", master, *args], env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    [summary] = [line for line in done.stdout.splitlines() if line.startswith("[replay] done:")]
    assert "records read" in summary and "records/s while processing" in summary and "command seconds" in summary, \
        summary
    return done.stdout + done.stderr


@pytest.mark.parametrize("case", CASES, ids=[f"{c.target}-{c.reader}" for c in CASES])
def test_a_replay_equals_the_live_run(case: Case, kafka_bootstrap: str, unique: str, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch, services: list[ServiceProcess]) -> None:
    pipeline, env = prepare(case, kafka_bootstrap, unique, monkeypatch)
    run_live(case, kafka_bootstrap, pipeline, env, tmp_path, services)
    live = results(kafka_bootstrap, pipeline)
    assert sum(map(len, live.outputs.values())) > 0, "the history produces outputs"

    replay(case, env, "--bootstrap", "--output", "topic", "--output-suffix", "-replay")
    assert_same(pipeline, live, results(kafka_bootstrap, pipeline, "-replay"))
