"""The same pipeline through the TestDriver and through the Kafka runtime (a real broker, the
``Service`` in this process) gives the same outputs.

What both drivers guarantee, and so what is compared (``two_drivers`` in pipelines.py: the
source is keyed by user; ``alerts`` is a process function on that key; after a filter and a
map, ``key_by user -> totals`` and ``key_by band -> bands`` aggregate (sum, count)):

* One task processes one partition number, each input partition in offset order, and writes
  through one producer, which keeps the order of its records within each partition. Both
  drivers partition every key with murmur2 of the same key bytes (asserted below for the
  source), so a key's records are in the same partition number in both.
* 1 partition: one task reads the source and both repartition topics, and each repartition
  topic has a single writer that writes in source order. Every output topic's whole
  sequence is therefore a function of the input order alone: compared in full.
* 4 partitions:
  - ``alerts`` runs before any key_by, on the source key: a user's records are in one source
    partition, in production order, so its state sees the same sequence in both drivers.
    The alert's key is the source key with the same serde (StringSerde), so the alerts of
    source partition p go to output partition p, written only by task p: even the whole
    sequence of every output partition is guaranteed, and so are per-key sequences.
  - ``totals`` after ``key_by user``: the repartition topic's partitions receive records from
    up to 4 writers (tasks), interleaved by timing, so the order ACROSS keys in a repartition
    partition (and in an output partition) is not guaranteed. But the new key is the source
    key: all records of a user come from a single upstream task, which writes them in its
    input order, and that one writer's order is kept in the repartition partition. So the
    per-key input order of the aggregate, hence every running (sum, count) of a user, is
    guaranteed: per-key sequences compared (and the multiset follows).
  - ``bands`` after ``key_by band``: a band's records come from every upstream task, so their
    order in the repartition partition depends on how the four writers interleave. The
    running sums are order-dependent and NOT guaranteed; what is guaranteed is the final
    (sum, count) per band, that the counts of a band are exactly 1..n, and that the amounts
    added (the differences of successive running sums, in count order) are the same
    multiset. That is what is compared for bands.
"""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from framework.config import Config
from framework.engine.partitioner import partition_for
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from framework.pipeline import Pipeline
from framework.runtime.service import Service
from framework.testing import TestDriver
from tests.integration.harness import Record, present, produce, read_topic
from tests.integration.pipelines import amount_band, two_drivers

N = 5_000
USERS = 50
Out = tuple[int, int, Any, Any]  # (partition, offset, key, value)


def _transactions(seed: int = 20240601) -> list[tuple[str, dict[str, Any]]]:
    """Deterministic (user, {"user", "amount"}): small, medium and large amounts mixed."""
    rng = random.Random(seed)
    out = []
    for _ in range(N):
        user = f"user-{rng.randrange(USERS):02d}"
        r = rng.random()
        amount = (rng.randint(1, 9) if r < 0.25 else rng.randint(501, 2000) if r < 0.45
                  else rng.randint(10, 500))
        out.append((user, {"user": user, "amount": amount}))
    return out


def _decoded(pipeline: Pipeline, topic: str, records: list[Record]) -> list[Out]:
    """Kafka records of an output topic decoded with its serdes, in (partition, offset) order."""
    t = next(t for t in pipeline.sink_topics() if t.name == topic)
    kd, vd = t.key_serde.bind(topic, True).deserialize, t.value_serde.bind(topic, False).deserialize
    return sorted(((r.partition, r.offset, None if r.key is None else kd(r.key),
                    None if r.value is None else vd(r.value)) for r in records), key=lambda o: (o[0], o[1]))


def _by_partition(outs: list[Out]) -> dict[int, list[tuple[Any, Any]]]:
    parts: dict[int, list[tuple[Any, Any]]] = defaultdict(list)
    for p, _, k, v in sorted(outs, key=lambda o: (o[0], o[1])):
        parts[p].append((k, v))
    return dict(parts)


def _by_key(outs: list[Out]) -> dict[Any, list[Any]]:
    keys: dict[Any, list[Any]] = defaultdict(list)
    for _, _, k, v in sorted(outs, key=lambda o: (o[0], o[1])):
        keys[k].append(v)
    return dict(keys)


def _multiset(outs: list[Out]) -> Counter[str]:
    return Counter(repr((k, v)) for _, _, k, v in outs)


def _bands_guarantees(outs: list[Out]) -> dict[Any, tuple[Any, list[int], list[int]]]:
    """Per band: the final (sum, count), the counts sorted, and the added amounts sorted."""
    out = {}
    for band, values in _by_key(outs).items():
        by_count = sorted(values, key=lambda v: v[1])
        sums = [v[0] for v in by_count]
        added = [b - a for a, b in zip([0, *sums], sums)]
        out[band] = (by_count[-1], sorted(v[1] for v in values), sorted(added))
    return out


@pytest.mark.parametrize("partitions", [1, 4])
def test_testdriver_and_kafka_runtime_give_the_same_outputs(
        kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        partitions: int) -> None:
    monkeypatch.setenv("FW_TEST_SUFFIX", unique)
    monkeypatch.setenv("FW_TEST_PARTITIONS", str(partitions))
    source, alerts, totals, bands = (f"td-{t}-{unique}" for t in ("tx", "alerts", "totals", "bands"))
    records = _transactions()

    # -- the TestDriver ---------------------------------------------------------------------
    pipeline = two_drivers()
    driver = TestDriver(pipeline, partitions=partitions)
    for ts, (user, tx) in enumerate(records, start=1):
        driver.pipe(source, tx, key=user, timestamp=ts)
    assert driver.dead_letters() == []
    expected: dict[str, list[Out]] = {
        t: [(r.partition, r.offset, r.key, r.value) for r in driver.output(t)]
        for t in (alerts, totals, bands)
    }
    # Every record that passes the filter goes once through each repartition topic.
    repartitioned = sum(len(part) for step in ("by-user", "by-band")
                        for part in driver.topics.log(pipeline.repartition_topic(step)))
    kept = sum(1 for _, tx in records if tx["amount"] % 13 != 0)
    assert repartitioned == 2 * kept
    assert len(expected[alerts]) > 50, "the input must exercise the alert function"
    assert len(expected[totals]) == kept and len(expected[bands]) == kept

    # -- the Kafka runtime ------------------------------------------------------------------
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(source, partitions)])
    codec = pipeline.sources()[0].topic
    kser, vser = codec.key_serde.serialize, codec.value_serde.serialize
    produce(kafka_bootstrap, source, [(kser(user), vser(tx)) for user, tx in records])
    written = read_topic(kafka_bootstrap, source)
    assert len(written) == N
    # The comparison is only meaningful if Kafka put every key where the TestDriver did.
    assert all(r.partition == partition_for(present(r.key), partitions) for r in written)

    svc_pipeline = two_drivers()  # a fresh definition, as a separate service would build it
    total = N + repartitioned
    deadline = time.monotonic() + 180

    def done(svc: Service) -> bool:
        assert time.monotonic() < deadline, f"processed {svc.records_processed} of {total} records"
        return svc.records_processed >= total

    config = Config.load(env={"FW_BOOTSTRAP_SERVERS": kafka_bootstrap}, state={"dir": str(tmp_path)})
    service = Service(svc_pipeline, config, "0")
    service.run(until=done)
    assert service.records_processed == total, "each record processed exactly once (no abort, no replay)"

    got = {t: _decoded(svc_pipeline, t, read_topic(kafka_bootstrap, t)) for t in (alerts, totals, bands)}
    assert read_topic(kafka_bootstrap, svc_pipeline.dead_letter.name) == []

    # -- the comparison ---------------------------------------------------------------------
    for t in (alerts, totals, bands):
        assert len(got[t]) == len(expected[t]), f"{t}: record count"
    if partitions == 1:
        for t in (alerts, totals, bands):
            assert [(k, v) for _, _, k, v in got[t]] == [(k, v) for _, _, k, v in expected[t]], \
                f"{t}: the whole output sequence"
        return
    # alerts: per output partition (so per key), the same sequence.
    assert _by_partition(got[alerts]) == _by_partition(expected[alerts])
    assert _by_key(got[alerts]) == _by_key(expected[alerts])
    assert _multiset(got[alerts]) == _multiset(expected[alerts])
    # totals: per key, the same sequence of running (sum, count); so the same multiset.
    assert _by_key(got[totals]) == _by_key(expected[totals])
    assert _multiset(got[totals]) == _multiset(expected[totals])
    # Each key lands in the same output partition in both drivers.
    assert {k: p for p, _, k, _ in got[totals]} == {k: p for p, _, k, _ in expected[totals]}
    # bands: only what is order-independent (see the module docstring).
    assert _bands_guarantees(got[bands]) == _bands_guarantees(expected[bands])
    amounts: dict[str, list[int]] = defaultdict(list)
    for _, tx in records:
        if tx["amount"] % 13 != 0:
            amounts[amount_band(tx["amount"])].append(tx["amount"])
    assert _bands_guarantees(got[bands]) == {
        band: ([sum(a), len(a)], list(range(1, len(a) + 1)), sorted(a)) for band, a in amounts.items()}
