"""Rescaling on the real broker, through the real CLI and ``fw run`` processes.

A service with per-user bucket sums on event-time timers and, after a repartition, one-second
event-time windows runs on readings produced for its old partition count until every one is
processed, and stops with timers pending, windows open and records in flight in its
repartition topic. It is rescaled (4 -> 6 with ``fw rescale``; 6 -> 3 with a savepoint, the
source created anew with 3 partitions, and ``fw savepoint restore --partitions 3``), readings
are produced for the new count, and it runs on: every output it wrote, read_committed, equals
a reference computed from the input alone, each bucket and each window once. The refusals: a
rescale with records not processed yet, and a decrease by ``fw rescale``."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from framework.engine.partitioner import partition_for
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics, topic_partitions
from framework.kafka.groups import remove_topics
from framework.serde.keys import KeySerde
from framework.serde.values import ValueCodec
from tests.integration.harness import (
    Record,
    ServiceProcess,
    committed_offsets,
    produce_to_partitions,
    read_topic,
    service_env,
    wait_until,
)
from tests.integration.pipelines import BUCKET_MS
from tests.integration.test_ops_cli import fw_json, fw_process

TARGET = "tests.integration.pipelines:rescaled"
BASE = (time.time_ns() // 1_000_000_000) // 10 * 10_000 - 600_000  # on ten seconds: buckets and windows start on it
END = 20_000  # the last readings' time past BASE: every bucket and window before it fires

Reading = dict[str, Any]  # {"u", "g", "ts", "v"}


def _readings(indices: range) -> list[Reading]:
    """Reading ``i``: user ``u<i % 12>``, group ``g<i % 3>``, at BASE + 100 i."""
    return [{"u": f"u{i % 12}", "g": f"g{i % 3}", "ts": BASE + 100 * i, "v": i} for i in indices]


BEFORE = _readings(range(60))  # up to 5.9 s: the bucket of 4-6 s and the window of 5-6 s stay open
AFTER = _readings(range(60, 120))  # 6-11.9 s, produced for the new partition count
IN_FLIGHT = [{"g": f"g{j % 3}", "ts": BASE + 5_950 + 5 * j, "v": 1000 + j} for j in range(6)]  # written by the key_by


def _ends(partitions: int) -> list[Reading]:
    """One reading at END on every partition (a user key the partitioner sends there): every
    task's watermark passes everything before END."""
    users: dict[int, str] = {}
    for k in range(1000):
        users.setdefault(partition_for(f"end{k}".encode(), partitions), f"end{k}")
    return [{"u": users[p], "g": "g0", "ts": BASE + END, "v": 0} for p in range(partitions)]


def _produce(bootstrap: str, topic: str, readings: list[Reading], partitions: int) -> None:
    """As a Kafka producer with the default partitioner writes them to a topic of ``partitions``."""
    produce_to_partitions(bootstrap, topic, [
        (partition_for(r["u"].encode(), partitions), r["u"].encode(), json.dumps(r).encode(), None, r["ts"])
        for r in readings])


def _in_flight(bootstrap: str, service: str, partitions: int) -> None:
    """IN_FLIGHT in the repartition topic as the key_by writes it, never read by the downstream
    task: records in flight, as a stopped service leaves those its upstream tasks wrote last."""
    keys, codec = KeySerde(), ValueCodec()
    produce_to_partitions(bootstrap, f"{service}-by-group-repartition", [
        (partition_for(keys.serialize(x["g"]), partitions), keys.serialize(x["g"]), codec.encode(x), None, x["ts"])
        for x in IN_FLIGHT])


def _reference(readings: list[Reading]) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
    """From the input alone: each (user, bucket) sum and each (group, window start) count that
    ends by END."""
    sums: dict[tuple[str, int], int] = Counter()
    counts: dict[tuple[str, int], int] = Counter()
    for r in readings:
        if "u" in r:
            bucket = r["ts"] // BUCKET_MS * BUCKET_MS
            if bucket + BUCKET_MS <= BASE + END:
                sums[(r["u"], bucket)] += r["v"]
        start = r["ts"] // 1000 * 1000
        if start + 1000 <= BASE + END:
            counts[(r["g"], start)] += 1
    return dict(sums), dict(counts)


SUMS, COUNTS = _reference(BEFORE + IN_FLIGHT + AFTER)


def _outputs(bootstrap: str, unique: str) -> tuple[list[Record], list[Record]]:
    return read_topic(bootstrap, f"rs-buckets-{unique}"), read_topic(bootstrap, f"rs-windows-{unique}")


def _as_reference(buckets: list[Record], windows: list[Record]) -> tuple[dict[Any, int], dict[Any, int]]:
    sums = [json.loads(r.value or b"null") for r in buckets]
    counts = [(json.loads(r.key or b"null"), json.loads(r.value or b"null")) for r in windows]
    return ({(s["user"], s["bucket"]): s["sum"] for s in sums},
            {(g, w["start"]): w["value"] for g, w in counts})


def _lags(readings: list[Reading], partitions: int, topic: str) -> str:
    per = Counter(partition_for(r["u"].encode(), partitions) for r in readings)
    return ", ".join(f"{topic}[{p}] lag {per[p]}" for p in sorted(per))


@pytest.mark.parametrize(("old", "new"), [(4, 6), (6, 3)])
def test_a_rescaled_service_meets_every_key_with_its_state_and_its_outputs_equal_the_reference(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess], old: int,
        new: int) -> None:
    env = service_env(kafka_bootstrap, unique)
    service, source, admin = f"rs-{unique}", f"rs-in-{unique}", admin_client({"bootstrap.servers": kafka_bootstrap})
    ensure_topics(admin, [TopicSpec(source, old)])
    svc = ServiceProcess(TARGET, tmp_path, "s", env)
    services.append(svc)
    env = {**env, "FW_STATE_DIR": str(svc.state_dir)}
    _produce(kafka_bootstrap, source, BEFORE, old)

    if new > old:  # not processed yet: produced for the old count, they would miss their keys' state
        refused = fw_process(env, "rescale", TARGET, "--partitions", str(new))
        assert (refused.returncode, refused.stderr) == (1, (
            f"error: the sources of '{service}' hold records it has not processed ({_lags(BEFORE, old, source)}): "
            f"produced for {old} partitions, they would not meet their keys' state on {new}. Fix: stop the "
            f"producers, run the service until its lag is 0 (fw group describe {TARGET} shows it), stop it, then "
            "rescale\n"))

    svc.start()
    wait_until(lambda: sum(committed_offsets(kafka_bootstrap, service, source).values()) == len(BEFORE), 180,
               "every reading processed", svc.log_text)
    assert svc.stop() == 0
    _in_flight(kafka_bootstrap, service, old)
    buckets, windows = _outputs(kafka_bootstrap, unique)
    sums, counts = _as_reference(buckets, windows)
    assert len(sums) < len(SUMS) and len(counts) < len(COUNTS)  # timers pending, windows open

    if new > old:
        restored = fw_json(env, "rescale", TARGET, "--partitions", str(new), "--path", str(tmp_path / "sp"))
    else:
        refused = fw_process(env, "rescale", TARGET, "--partitions", str(new))
        assert (refused.returncode, refused.stderr) == (1, (
            f"error: '{service}' has {old} partitions and Kafka cannot take partitions away from a topic: {new} "
            f"partitions need its sources ({source}) created anew. Fix: with the service stopped and its lag 0, take "
            f"a savepoint (fw savepoint create {TARGET}), stop the producers, create the sources anew with {new} "
            f"partitions, then fw savepoint restore {TARGET} PATH --partitions {new}\n"))
        fw_json(env, "savepoint", "create", TARGET, "--path", str(tmp_path / "sp"))
        remove_topics({"bootstrap.servers": kafka_bootstrap}, [source])
        ensure_topics(admin, [TopicSpec(source, new)])
        restored = fw_json(env, "savepoint", "restore", TARGET, str(tmp_path / "sp"), "--partitions", str(new))

    repartition = f"{service}-by-group-repartition"
    assert restored["applied"] and restored["partitions"] == {"savepoint": old, "restored": new}
    assert restored["in_flight_written"] == {repartition: len(IN_FLIGHT)}  # the control records left out
    offsets = {(o["topic"], o["partition"]): o["offset"] for o in restored["offsets"]}
    drained = committed_offsets(kafka_bootstrap, service, source) if new > old else {}
    assert offsets == {**{(source, p): drained.get(p, 0) for p in range(new)},
                       **{(repartition, p): 0 for p in range(new)}}
    internal = [repartition, *(f"{service}-{s}-changelog" for s in ("_time", "buckets", "per-second"))]
    assert topic_partitions(admin, internal) == dict.fromkeys(internal, new)

    _produce(kafka_bootstrap, source, AFTER + _ends(new), new)
    svc.start()
    wait_until(lambda: [len(d) for d in _as_reference(*_outputs(kafka_bootstrap, unique))] == [len(SUMS), len(COUNTS)],
               180, "every bucket and window", svc.log_text)
    assert svc.stop() == 0
    buckets, windows = _outputs(kafka_bootstrap, unique)
    assert _as_reference(buckets, windows) == (SUMS, COUNTS)
    assert (len(buckets), len(windows)) == (len(SUMS), len(COUNTS))  # each once
