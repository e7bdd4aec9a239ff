"""Watermarks between two services on the real broker, exactly once, with SIGKILLs.

The upstream service writes its output topic with ``Topic(..., watermarks=True)``: each of
its two tasks writes its watermark as control records to every partition of the topic, in
the same transaction as its records. The downstream service, a separate consumer group,
reads that topic with ``WatermarkStrategy.from_upstream()``: a partition's watermark is the
minimum over the upstream tasks, so its per-minute windows close on the upstream event
time, no record is late, and control records are neither outputs nor records downstream.
Both services are killed with SIGKILL at random moments in the middle; the committed
output still holds every window exactly once.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

from framework.engine.partitioner import partition_for
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from framework.time.clock import WATERMARK_HEADER
from tests.integration.harness import (
    ServiceProcess,
    kill_at_random_after,
    present,
    produce_to_partitions,
    read_topic,
    service_env,
    wait_until,
)
from tests.integration.pipelines import CHAIN_BOUND_MS, CHAIN_WINDOW_MS

USERS = [f"user-{i}" for i in range(12)]
CLICKS = 4_000
STEP_MS = 250  # event time advances 250 ms per click: about 17 minutes of clicks
JITTER_MS = 700  # every click is up to 700 ms behind its slot: disorder within the bound
assert JITTER_MS + STEP_MS <= CHAIN_BOUND_MS
T0 = 1_700_000_000_000


def _clicks(rng: random.Random) -> list[tuple[int, bytes, bytes]]:
    """(input partition, key, value) for every click, in produce order."""
    out = []
    for i in range(CLICKS):
        user = rng.choice(USERS)
        ts = T0 + i * STEP_MS - rng.randrange(JITTER_MS)
        out.append((partition_for(user.encode(), 2), user.encode(), json.dumps({"user": user, "ts": ts}).encode()))
    return out


def _end_of_input(last_ts: int) -> list[tuple[int, bytes, bytes]]:
    """One click per input partition far ahead: every upstream task's watermark passes every
    window of the real clicks (its own window never closes, so it is never an output)."""
    ts = last_ts + 10 * CHAIN_WINDOW_MS
    return [(p, f"end-{p}".encode(), json.dumps({"user": f"end-{p}", "ts": ts}).encode()) for p in (0, 1)]


def test_windows_downstream_close_on_upstream_watermarks_exactly_once_across_sigkills(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    rng = random.Random(7)
    clicks = _clicks(rng)
    expected: Counter[tuple[str, int]] = Counter()
    for _, key, value in clicks:
        ts = json.loads(value)["ts"]
        expected[(key.decode(), ts - ts % CHAIN_WINDOW_MS)] += 1
    source, mid, out, late = (f"ch-in-{unique}", f"ch-mid-{unique}", f"ch-out-{unique}", f"ch-late-{unique}")
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(source, 2)])
    env = service_env(kafka_bootstrap, unique)
    up = ServiceProcess("tests.integration.pipelines:chain_upstream", tmp_path, "up", env).start()
    down = ServiceProcess("tests.integration.pipelines:chain_downstream", tmp_path, "down", env).start()
    services += [up, down]

    def outputs() -> list[dict]:
        return [json.loads(present(r.value)) | {"key": present(r.key).decode()}
                for r in read_topic(kafka_bootstrap, out)]

    half = len(clicks) // 2
    produce_to_partitions(kafka_bootstrap, source, clicks[:half])
    # Mid-stream: windows have started to close downstream; kill both services at random moments.
    kill_at_random_after(down, lambda: len(outputs()) > 0, rng, "downstream windows to close", max_delay_s=0.5)
    kill_at_random_after(up, lambda: True, rng, "the upstream service", max_delay_s=0.5)
    produce_to_partitions(kafka_bootstrap, source, clicks[half:])
    last_ts = max(json.loads(v)["ts"] for _, _, v in clicks)
    produce_to_partitions(kafka_bootstrap, source, _end_of_input(last_ts))
    up.start()
    down.start()

    wait_until(lambda: len(outputs()) >= len(expected), 120, "every window downstream",
               lambda: f"{len(outputs())} of {len(expected)} windows\n--- upstream\n{up.log_text()[-4000:]}"
                       f"\n--- downstream\n{down.log_text()[-4000:]}")
    results = outputs()
    fired = Counter((r["key"], r["start"]) for r in results)
    assert max(fired.values()) == 1, "a window was emitted twice"
    assert {(r["key"], r["start"]): r["value"] for r in results} == dict(expected)
    assert all(r["end"] == r["start"] + CHAIN_WINDOW_MS for r in results)
    assert read_topic(kafka_bootstrap, late) == []  # within the bound nothing is late downstream
    # The control records crossed: every partition between the services carries them.
    control = [r for r in read_topic(kafka_bootstrap, mid) if WATERMARK_HEADER in r.headers]
    assert {r.partition for r in control} == {0, 1, 2}
    assert up.stop() == 0 and down.stop() == 0
