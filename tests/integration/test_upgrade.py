"""An upgrade on the real broker: an event-time service is stopped after a checkpoint with
windows open, and its next release, with a source and steps added, continues from its state:
the old windows' results are exactly those of an uninterrupted run of the old pipeline.

The data makes a wrong restore visible: source partition 0 runs far ahead of partition 1, so
at the stop the windows' watermark (behind the repartition topic: the minimum over both
upstream tasks) is far behind the source's. Restored onto the wrong clock, the windows would
take partition 1's remaining records as late."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from tests.integration.harness import (
    ServiceProcess,
    produce_to_partitions,
    read_topic,
    service_env,
    wait_until,
)
from tests.integration.pipelines import upgrade_v1, upgrade_v2
from tests.integration.test_event_time import (
    Feed,
    _committed,
    _expected,
    _per_key,
    _source_caught_up,
)

Input = tuple[int, str, dict[str, object]]


def _views() -> tuple[list[Input], list[Input]]:
    """Views of four users per partition: before the stop, partition 0 up to 20 s of event
    time and partition 1 up to 5 s; after it, both up to 30 s."""
    def part(p: int, start: int, end: int) -> list[Input]:
        return [(p, f"u{p}{i % 4}", {"user": f"u{p}{i % 4}", "ts": ts}) for i, ts in enumerate(range(start, end, 97))]

    before = part(0, 1, 20_000) + part(1, 1, 5_000)  # not 0: librdkafka writes timestamp 0 as "now"
    after = part(0, 20_000, 30_000) + part(1, 5_000, 30_000)
    return before, after


def _service(services: list[ServiceProcess], target: str, tmp_path: Path, bootstrap: str,
             suffix: str) -> ServiceProcess:
    svc = ServiceProcess(f"tests.integration.pipelines:{target}", tmp_path, "0", service_env(bootstrap, suffix))
    services.append(svc)
    return svc


def test_a_release_with_a_source_and_steps_added_continues_the_old_windows(
        kafka_bootstrap: str, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        services: list[ServiceProcess]) -> None:
    monkeypatch.setenv("FW_TEST_SUFFIX", unique)
    old, new = upgrade_v1(), upgrade_v2()
    before, after = _views()
    out, late = f"up-out-{unique}", f"up-late-{unique}"
    expected = _expected(old, before + after)  # the old pipeline, uninterrupted
    assert expected[out] and expected[late] == []
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}),
                  [TopicSpec(f"up-views-{unique}", 2), TopicSpec(f"up-clicks-{unique}", 2)])

    feed = Feed(kafka_bootstrap, old, before + after)
    feed.send(len(before))
    v1 = _service(services, "upgrade_v1", tmp_path, kafka_bootstrap, unique).start()
    wait_until(lambda: _source_caught_up(kafka_bootstrap, old.name, feed.topic), 120, "the first views processed",
               v1.log_text)
    assert v1.stop() == 0  # a final checkpoint: windows of every user are open

    produce_to_partitions(kafka_bootstrap, f"up-clicks-{unique}", [
        (p, f"u{p}0".encode(), json.dumps({"user": f"u{p}0", "ts": ts}).encode())
        for p in (0, 1) for ts in (100, 300, 5_000)])
    v2 = _service(services, "upgrade_v2", tmp_path, kafka_bootstrap, unique).start()
    feed.send(feed.remaining)
    wait_until(lambda: len(read_topic(kafka_bootstrap, out)) >= len(expected[out])
               or bool(read_topic(kafka_bootstrap, late)), 120, "every window result (or a late record)", v2.log_text)
    wait_until(lambda: len(read_topic(kafka_bootstrap, f"up-sessions-{unique}")) > 0, 120,
               "the new step's first sessions", v2.log_text)
    assert v2.stop() == 0

    assert _committed(kafka_bootstrap, new, late) == []
    assert _per_key(_committed(kafka_bootstrap, new, out)) == _per_key((r.key, r.value) for r in expected[out])
