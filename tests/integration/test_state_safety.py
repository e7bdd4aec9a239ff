"""State and internal topics on the real broker: records crafted to run a command under
pickle run nothing (in a repartition topic: a dead letter with its coordinates; in a
changelog: the restore stops naming the record and the fix), and a changelog deleted and
created again with other content, longer than the old stored offset, replaces the local
state instead of being merged into it."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import NewTopic

from framework.engine.partitioner import partition_for
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics, topic_partitions
from framework.kafka.io import delete_topics
from framework.serde import ValueSerde
from framework.state.keys import keyed, state_prefix
from tests.integration.harness import ServiceProcess, produce, read_topic, service_env, wait_until

TARGET = "tests.integration.pipelines:word_counts"
PARTITIONS = 2


class _Shell:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def _produce_one(bootstrap: str, topic: str, key: bytes, value: bytes | None, partition: int) -> int:
    """One plain (non-transactional) record, as any client allowed to write the topic could;
    returns its offset."""
    where: list[int | None] = []
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, key=key, value=value, partition=partition,
                     on_delivery=lambda err, msg: where.append(msg.offset()) if err is None else None)
    assert producer.flush(30) == 0 and where
    offset = where[0]
    assert offset is not None  # delivered
    return offset


def _counts(bootstrap: str, suffix: str) -> dict[str, list[int]]:
    """Each word's committed count outputs, in order."""
    out: dict[str, list[int]] = {}
    for r in sorted(read_topic(bootstrap, f"wc-out-{suffix}"), key=lambda r: (r.partition, r.offset)):
        out.setdefault((r.key or b"").decode(), []).append(json.loads(r.value or b"null"))
    return out


def _feed(bootstrap: str, suffix: str, words: list[str]) -> None:
    produce(bootstrap, f"wc-in-{suffix}", ((w.encode(), json.dumps({"w": w}).encode()) for w in words))


def _task_of(word: str) -> int:
    """The task (partition) whose state holds ``word``: its key_by key is JSON."""
    return partition_for(json.dumps(word).encode(), PARTITIONS)


def _start(services: list[ServiceProcess], bootstrap: str, suffix: str, workdir: Path) -> ServiceProcess:
    svc = ServiceProcess(TARGET, workdir, "0", service_env(bootstrap, suffix))
    services.append(svc)
    return svc.start()


def test_records_crafted_to_run_code_in_internal_topics_run_nothing(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    marker = tmp_path / "pwned"
    crafted = pickle.dumps(_Shell(marker))
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(f"wc-in-{unique}", PARTITIONS)])
    svc = _start(services, kafka_bootstrap, unique, tmp_path)
    _feed(kafka_bootstrap, unique, ["a", "a", "b"])
    wait_until(lambda: _counts(kafka_bootstrap, unique).get("a") == [1, 2], 120, "the first counts", svc.log_text)

    # 1. A repartition record: a dead letter with its coordinates; the service goes on.
    repartition = f"wc-{unique}-by-word-repartition"
    p = _task_of("a")
    offset = _produce_one(kafka_bootstrap, repartition, b'"a"', crafted, p)
    _feed(kafka_bootstrap, unique, ["a"])
    wait_until(lambda: _counts(kafka_bootstrap, unique).get("a") == [1, 2, 3], 120, "the count after it",
               svc.log_text)
    [dead] = read_topic(kafka_bootstrap, f"wc-{unique}-dead-letter")
    assert (dead.headers["fw.source.topic"], dead.headers["fw.source.partition"],
            dead.headers["fw.source.offset"]) == (repartition.encode(), str(p).encode(), str(offset).encode())
    assert dead.headers["fw.step"] == b"by-word" and dead.value == crafted
    assert f"{repartition}[{p}]@{offset}" in svc.log_text()
    assert svc.stop() == 0

    # 2. A changelog record: the restore of the next start stops on it, naming it and the fix.
    changelog = f"wc-{unique}-counts-changelog"
    offset = _produce_one(kafka_bootstrap, changelog, keyed(state_prefix("acc"), b'"a"'), crafted, p)
    svc.start()
    assert svc.wait_exit(120) == 1
    log = svc.log_text()
    assert f"{changelog}[{p}]@{offset}" in log and "Fix:" in log and "Traceback" not in log
    assert not marker.exists()


def _recreate(bootstrap: str, topic: str) -> None:
    """Delete ``topic`` and create it anew (a new topic id), compacted as a changelog is."""
    admin = admin_client({"bootstrap.servers": bootstrap})
    delete_topics(bootstrap, [topic])

    def created() -> bool:  # the broker refuses the name until the deletion is complete
        future = admin.create_topics([NewTopic(topic, PARTITIONS, config={"cleanup.policy": "compact"})])[topic]
        try:
            future.result()
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return False
            raise
        return True

    wait_until(created, 60, f"{topic} created again")
    wait_until(lambda: topic_partitions(admin, [topic]).get(topic) == PARTITIONS, 30, f"{topic} visible")


def test_a_recreated_changelog_replaces_the_local_state(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(f"wc-in-{unique}", PARTITIONS)])
    svc = _start(services, kafka_bootstrap, unique, tmp_path)
    old_words = ["a", "b", "c", "d"] * 3
    _feed(kafka_bootstrap, unique, old_words)
    wait_until(lambda: sum(len(v) for v in _counts(kafka_bootstrap, unique).values()) == len(old_words), 120,
               "the old counts", svc.log_text)
    assert svc.stop() == 0
    changelog = f"wc-{unique}-counts-changelog"
    old_ends = {p: len([r for r in read_topic(kafka_bootstrap, changelog) if r.partition == p])
                for p in range(PARTITIONS)}

    # Other content, longer in every partition than what the local state reflects: counts of
    # new words (written in the documented format), with "x" rising to 100 in each task.
    _recreate(kafka_bootstrap, changelog)
    encode = ValueSerde().serialize
    new_counts: dict[str, int] = {}
    records = []
    words = [f"x{i}" for i in range(200)]
    for p in range(PARTITIONS):
        mine = [w for w in words if _task_of(w) == p][:2]
        for n in range(1, old_ends[p] + 6):
            for w in mine:
                records.append((p, keyed(state_prefix("acc"), json.dumps(w).encode()), encode(n)))
                new_counts[w] = n
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for p, key, value in records:
        producer.produce(changelog, key=key, value=value, partition=p)
    assert producer.flush(30) == 0

    svc.start()
    probe = sorted(new_counts) + ["a", "b"]
    _feed(kafka_bootstrap, unique, probe)
    wait_until(lambda: all(len(_counts(kafka_bootstrap, unique).get(w, [])) > (3 if w in ("a", "b") else 0)
                           for w in probe), 120, "the counts after the restart", svc.log_text)
    assert svc.stop() == 0
    counts = _counts(kafka_bootstrap, unique)
    for w, n in new_counts.items():
        assert counts[w] == [n + 1], f"{w} continues from the new changelog"
    assert counts["a"] == [1, 2, 3, 1] and counts["b"] == [1, 2, 3, 1], "the old local state is gone, not merged"
    assert "reflects another incarnation of its changelog" in svc.log_text()
