"""Event time on the real broker, exactly once, with services as real OS processes.

* Every window kind (tumbling, sliding, session, count tumbling and sliding, global with a
  count trigger, and tumbling and sliding after a key_by, so watermarks cross a
  repartition topic) survives SIGKILLs and a lost local state: the committed outputs
  equal the TestDriver's for the same input in the same per-partition order.
* The fire alarm: an event-time timer pending at a checkpoint survives a SIGKILL and a lost
  local state, fires once after the restart, and stays fired after another SIGKILL.
* A fast and a slow upstream task: the watermark after a repartition topic is the minimum
  over the upstream tasks, so the slow task's records are not late.

What makes the comparison with the TestDriver meaningful: before a key_by every window is
on the source key, whose records are in one source partition, and a partition's watermark
is a pure function of its record order. After the key_by, only records that were on time
at the source go on (``OnTimeOnly``), so none is behind a watermark its upstream task has
sent, and a window fires only when every upstream task has sent a watermark past it, after
all its records (one producer keeps each task's records and watermarks in order): every
window holds the same records in both drivers, and only order-independent results are
computed there. Session windows are not used after the key_by, since whether a record at a
session's end extends it depends on how upstream tasks interleave.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from framework import Pipeline, TestDriver, TestRecord
from framework.engine.partitioner import partition_for
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from framework.serde import ValueSerde
from framework.time.clock import WATERMARK_HEADER
from tests.integration.harness import (
    Record,
    ServiceProcess,
    Tails,
    committed_offsets,
    committed_timers,
    end_offsets,
    present,
    produce_to_partitions,
    read_topic,
    service_env,
    wait_until,
)
from tests.integration.pipelines import (
    ALARM_BOUND_MS,
    ALARM_WINDOW_MS,
    ET_BOUND_MS,
    event_time_windows,
    fast_and_slow,
    fire_alarm,
)

PARTITIONS = 4
READINGS = 3_000
SENSORS = 40
T0 = 1_000_000  # event time of the first reading (ms since the epoch)
FLUSH_AHEAD_MS = 60_000  # past every window, session gap and allowed lateness of the pipelines
WINDOW_OUTPUTS = ("tumbling", "sliding", "session", "count", "count-sliding", "global", "group-tumbling",
                  "group-sliding", "late")

Input = tuple[int, str, dict[str, Any]]  # (partition, key, value)
PerKey = dict[Any, Counter[str]]


def _keys_in(partition: int, partitions: int, prefix: str, n: int = 1) -> list[str]:
    """The first ``n`` keys ``<prefix><i>`` that the murmur2 partitioner puts in ``partition``."""
    keys = (f"{prefix}{i}" for i in range(10_000))
    return [k for k in keys if partition_for(k.encode(), partitions) == partition][:n]


def _flushes(partitions: int, ts: int) -> list[Input]:
    """One record per partition whose timestamp moves its watermark to ``ts - B - 1``."""
    return [(p, _keys_in(p, partitions, "flush-")[0], {"flush": True, "ts": ts}) for p in range(partitions)]


def _readings(seed: str) -> list[Input]:
    """Readings of SENSORS sensors over ~20 s of event time, at most B out of order, except
    ~3% that are up to 4B behind (some late at the source, some within allowed lateness)."""
    rng = random.Random(seed)
    now, out = T0, []
    for _ in range(READINGS):
        now += rng.randint(0, 12)
        sensor = f"s{rng.randrange(SENSORS):02d}"
        late = rng.random() < 0.03
        behind = rng.randint(ET_BOUND_MS + 1, 4 * ET_BOUND_MS) if late else rng.randint(0, ET_BOUND_MS)
        out.append((partition_for(sensor.encode(), PARTITIONS), sensor,
                    {"sensor": sensor, "ts": now - behind, "v": rng.randint(0, 1_000)}))
    return out + _flushes(PARTITIONS, now + FLUSH_AHEAD_MS)


class Feed:
    """Produces a fixed input sequence, in slices, with the source topic's serdes."""

    def __init__(self, bootstrap: str, pipeline: Pipeline, records: list[Input]) -> None:
        self.bootstrap, self.records, self.sent = bootstrap, records, 0
        t = pipeline.sources()[0].topic
        self.topic = t.name
        self.ks = t.key_serde.bind(t.name, True).serialize
        self.vs = t.value_serde.bind(t.name, False).serialize

    @property
    def remaining(self) -> int:
        return len(self.records) - self.sent

    def send(self, n: int) -> None:
        batch = self.records[self.sent:self.sent + n]
        produce_to_partitions(self.bootstrap, self.topic, [(p, self.ks(k), self.vs(v)) for p, k, v in batch])
        self.sent += len(batch)


def _expected(pipeline: Pipeline, records: list[Input]) -> dict[str, list[TestRecord]]:
    """The TestDriver's committed outputs for ``records``, piped in order to their partitions."""
    driver = TestDriver(pipeline, partitions=pipeline.default_partitions)
    source = pipeline.sources()[0].topic.name
    for p, key, value in records:
        driver.pipe(source, value, key=key, partition=p)
    assert driver.dead_letters() == []
    return {t.name: driver.output(t) for t in pipeline.sink_topics()}


def _per_key(pairs: Iterable[tuple[Any, Any]]) -> PerKey:
    out: PerKey = {}
    for key, value in pairs:
        out.setdefault(key, Counter())[json.dumps(value, sort_keys=True)] += 1
    return out


def _committed(bootstrap: str, pipeline: Pipeline, topic: str) -> list[tuple[Any, Any]]:
    """The committed records of an output topic, decoded with its serdes."""
    t = next(t for t in [*pipeline.sink_topics(), pipeline.dead_letter] if t.name == topic)
    kd, vd = t.key_serde.bind(topic, True).deserialize, t.value_serde.bind(topic, False).deserialize
    return [(None if r.key is None else kd(r.key), None if r.value is None else vd(r.value))
            for r in sorted(read_topic(bootstrap, topic), key=lambda r: (r.partition, r.offset))]


def _source_caught_up(bootstrap: str, group: str, topic: str) -> bool:
    """Every record produced to ``topic`` so far is processed and committed by ``group``."""
    return committed_offsets(bootstrap, group, topic) == end_offsets(bootstrap, topic)


def _service(services: list[ServiceProcess], target: str, tmp_path: Path, bootstrap: str,
             suffix: str) -> ServiceProcess:
    svc = ServiceProcess(f"tests.integration.pipelines:{target}", tmp_path, "0", service_env(bootstrap, suffix))
    services.append(svc)
    return svc


# -- every window kind --------------------------------------------------------------------


def _crash_at_point(svc: ServiceProcess, feed: Feed, point: str, group: str) -> None:
    """Start ``svc`` to be SIGKILLed at ``point`` and feed it slices until it is."""
    svc.start({"FW_CRASH_POINT": point, "FW_PROCESSING__CHECKPOINT_INTERVAL_MS": "20"})
    while svc.alive:
        assert feed.remaining > 0, f"crash point {point} not reached:\n{svc.log_text()[-3000:]}"
        feed.send(100)
        wait_until(lambda: not svc.alive or _source_caught_up(feed.bootstrap, group, feed.topic), 120,
                   "the slice processed, or the crash", lambda: svc.log_text()[-3000:])
    assert svc.wait_exit(30) == -9, f"the service did not die at {point}:\n{svc.log_text()[-3000:]}"


@pytest.mark.parametrize("crash", ["sigkill", "after_commit:3"])
def test_every_window_kind_survives_sigkill_and_equals_the_testdriver(
        kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        services: list[ServiceProcess], crash: str) -> None:
    """Each window kind, on the real broker under exactly_once, SIGKILLed after some output
    committed (``sigkill``: at a random moment then, and its local state lost; else also at
    an exact checkpoint step of a second run), then finished: every committed output topic
    holds, per key, exactly the multiset of results (and late records) the TestDriver gives
    for the same input."""
    monkeypatch.setenv("FW_TEST_SUFFIX", unique)
    pipeline = event_time_windows()
    records = _readings(unique)
    expected = _expected(pipeline, records)
    outputs = {name: f"etw-{name}-{unique}" for name in WINDOW_OUTPUTS}
    assert all(expected[t] for t in outputs.values()), "the input must exercise every output, late ones too"

    feed = Feed(kafka_bootstrap, pipeline, records)
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(feed.topic, PARTITIONS)])
    svc = _service(services, "event_time_windows", tmp_path, kafka_bootstrap, unique)
    tails = Tails(kafka_bootstrap, outputs.values())
    feed.send(READINGS // 2 if crash == "sigkill" else READINGS // 3)
    svc.start()
    wait_until(lambda: tails.drain() > 0, 120, "committed window results", lambda: svc.log_text()[-3000:])
    if crash == "sigkill":
        # the kill's moment is random; no result depends on it
        time.sleep(random.Random(unique).uniform(0.0, 0.5))
    svc.kill()
    if crash == "sigkill":
        shutil.rmtree(svc.state_dir)  # a lost disk too: every store and clock from its changelog
    if crash != "sigkill":
        _crash_at_point(svc, feed, crash, pipeline.name)
    feed.send(feed.remaining)
    svc.start()
    total = sum(len(v) for v in expected.values())
    wait_until(lambda: tails.drain() >= total, 180, f"{total} committed results",
               lambda: f"{tails.drain()}\n{svc.log_text()[-3000:]}")
    assert svc.stop() == 0
    tails.close()

    for name, topic in outputs.items():
        got = _per_key(_committed(kafka_bootstrap, pipeline, topic))
        assert got == _per_key((r.key, r.value) for r in expected[topic]), f"{name}: per-key results"
    assert read_topic(kafka_bootstrap, pipeline.dead_letter.name) == []
    assert svc.starts == (2 if crash == "sigkill" else 3)


# -- the fire alarm -----------------------------------------------------------------------


def test_fire_alarm_timer_pending_at_a_crash_fires_once_after_restart(
        kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        services: list[ServiceProcess]) -> None:
    """A high temperature's expiry timer, committed pending, survives a SIGKILL and the loss
    of the local state; after the restart, smoke within 10 minutes alerts, the watermark
    passing the timer fires it once (it stays fired across another SIGKILL), and smoke after
    the expiry gives no alert."""
    monkeypatch.setenv("FW_TEST_SUFFIX", unique)
    pipeline = fire_alarm()
    hot, smoky, cold, sentinel, tick = _keys_in(0, 2, "loc-", 5)
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(f"fa-in-{unique}", 2)])
    feed = Feed(kafka_bootstrap, pipeline, [])
    out = Tails(kafka_bootstrap, [f"fa-out-{unique}"])
    svc = _service(services, "fire_alarm", tmp_path, kafka_bootstrap, unique)

    def send(*events: tuple[str, str, int, int]) -> None:
        feed.records += [(0, loc, {"kind": kind, "ts": ts, "celsius": c}) for loc, kind, ts, c in events]
        feed.send(feed.remaining)

    def outputs() -> list[dict[str, Any]]:
        out.drain()
        return [json.loads(present(r.value)) for r in out.records[f"fa-out-{unique}"]]

    t0 = 1_000_000_000
    send((hot, "temperature", t0, 80), (smoky, "temperature", t0 + 1_000, 75), (cold, "temperature", t0, 20))
    svc.start()
    pending = [(t0 + ALARM_WINDOW_MS, hot.encode()), (t0 + 1_000 + ALARM_WINDOW_MS, smoky.encode())]
    wait_until(lambda: committed_timers(kafka_bootstrap, pipeline.name, "alarm") == pending, 120,
               "a checkpoint with both timers pending", lambda: svc.log_text()[-3000:])
    assert outputs() == []
    svc.kill()
    shutil.rmtree(svc.state_dir)  # a lost disk: the timers come back from the changelog

    svc.start()
    send((smoky, "smoke", t0 + 5 * 60_000, 0),  # within 10 minutes: an alert
         (tick, "tick", t0 + ALARM_WINDOW_MS + ALARM_BOUND_MS + 1, 0))  # watermark t0 + 10 min: hot expires
    wait_until(lambda: len(outputs()) >= 2, 120, "the alert and the expiry", lambda: svc.log_text()[-3000:])
    assert committed_timers(kafka_bootstrap, pipeline.name, "alarm") == []
    svc.kill()

    svc.start()
    t1 = t0 + ALARM_WINDOW_MS + 60_000
    send((hot, "smoke", t1, 0), (cold, "smoke", t1, 0),  # after the expiry; never high: no alerts
         (sentinel, "temperature", t1, 90), (sentinel, "smoke", t1 + 60_000, 0))  # an alert, the last output
    wait_until(lambda: len(outputs()) >= 3, 120, "the sentinel's alert", lambda: svc.log_text()[-3000:])
    assert svc.stop() == 0
    out.close()
    assert [v for _, v in _committed(kafka_bootstrap, pipeline, f"fa-out-{unique}")] == [
        {"alert": smoky, "high": t0 + 1_000, "smoke": t0 + 5 * 60_000},
        {"expired": hot, "high": t0, "at": t0 + ALARM_WINDOW_MS},
        {"alert": sentinel, "high": t1, "smoke": t1 + 60_000},
    ]
    assert svc.starts == 3


# -- a fast and a slow upstream task ------------------------------------------------------


def _fast_and_slow_input() -> tuple[list[Input], list[Input]]:
    """Partition 0 runs 60 s of event time, partition 1 only 12 s; four groups span both.
    Returns (the fast records, the slow records and a flush for each partition)."""
    rng = random.Random(7)
    fast_keys, slow_keys = _keys_in(0, 2, "fast-", 5), _keys_in(1, 2, "slow-", 5)

    def run(p: int, keys: list[str], step_ms: int) -> list[Input]:
        out = []
        for i in range(600):
            sensor = rng.choice(keys)
            ts = T0 + i * step_ms - rng.randint(0, ET_BOUND_MS)
            out.append((p, sensor, {"sensor": sensor, "group": f"g{rng.randrange(4)}", "ts": ts, "v": i}))
        return out

    fast, slow = run(0, fast_keys, 100), run(1, slow_keys, 20)
    return fast, slow + _flushes(2, T0 + 120_000)


def _fast_watermark_before_slow_records(records: list[Record]) -> bool:
    """Some repartition partition holds a record of the slow task (source partition 1) after
    a watermark of the fast task (upstream 0) that is past the record's timestamp."""
    decode = ValueSerde().deserialize
    for p in {r.partition for r in records}:
        fast_wm = None
        for r in sorted((r for r in records if r.partition == p), key=lambda r: r.offset):
            header = r.headers.get(WATERMARK_HEADER)
            if header is not None:
                who, _, what = header.decode().partition(":")
                if who.startswith("0/") and what != "idle":
                    fast_wm = int(what)
            elif fast_wm is not None and r.value is not None:
                value = decode(r.value)
                if value["sensor"].startswith("slow-") and value["ts"] <= fast_wm:
                    return True
    return False


def test_fast_and_slow_upstream_tasks_leave_no_record_late_after_a_repartition(
        kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        services: list[ServiceProcess]) -> None:
    """One source partition is processed 48 s of event time ahead of the other, and its task
    sends its watermark through the repartition topic before the slow task's records arrive
    there: no window fires on the fast task's watermark alone, the windows after the key_by
    count none of the slow records late (the late topic stays empty), and their results
    equal the TestDriver's."""
    monkeypatch.setenv("FW_TEST_SUFFIX", unique)
    pipeline = fast_and_slow()
    fast, slow = _fast_and_slow_input()
    expected = _expected(pipeline, fast + slow)
    out, late = f"fs-out-{unique}", f"fs-late-{unique}"
    assert expected[out] and expected[late] == []

    feed = Feed(kafka_bootstrap, pipeline, fast + slow)
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(feed.topic, 2)])
    feed.send(len(fast))
    svc = _service(services, "fast_and_slow", tmp_path, kafka_bootstrap, unique).start()
    wait_until(lambda: _source_caught_up(kafka_bootstrap, pipeline.name, feed.topic), 120,
               "the fast partition processed", lambda: svc.log_text()[-3000:])
    assert read_topic(kafka_bootstrap, out) == [], "no window fires before the slow task sent a watermark"
    feed.send(feed.remaining)
    tails = Tails(kafka_bootstrap, [out])
    wait_until(lambda: tails.drain() >= len(expected[out]), 120, "every window result",
               lambda: svc.log_text()[-3000:])
    assert svc.stop() == 0
    tails.close()

    repartition = read_topic(kafka_bootstrap, pipeline.repartition_topic("by-group"))
    assert _fast_watermark_before_slow_records(repartition), "the fast task must be ahead of the slow one"
    assert read_topic(kafka_bootstrap, late) == []
    got = _per_key(_committed(kafka_bootstrap, pipeline, out))
    assert got == _per_key((r.key, r.value) for r in expected[out])
