"""Run services as real OS processes, kill them, and read what they committed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import ConfigResource

from framework.broker.local import LocalBroker
from framework.kafka.admin import admin_client
from framework.kafka.logs import CLIENT_LOG
from tests.present import present

ROOT = Path(__file__).resolve().parents[2]
# Every client here logs through the framework's logger: librdkafka's own lines (a coordinator
# still loading on a fresh broker, a restarted broker's connections) are filtered as the
# framework's are, instead of being written to stderr by its threads, between tests included.


@dataclass
class Record:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]
    timestamp: int = 0


def located(msg: Message) -> tuple[str, int, int, dict[str, bytes]]:
    """The topic, partition, offset and headers of a message consumed without an error:
    confluent-kafka's stubs type the first three Optional (an error event has none) and the
    headers as any shape a producer may pass (a consumed message's are (name, bytes) pairs)."""
    topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
    assert topic is not None and partition is not None and offset is not None
    return topic, partition, offset, {k: v for k, v in cast("list[tuple[str, bytes]]", msg.headers() or [])}


class ServiceProcess:
    """One `fw run` group member; its output goes to a log file under ``workdir``."""

    def __init__(self, target: str, workdir: Path, instance: str, env: dict[str, str],
                 args: list[str] | None = None) -> None:
        self.target, self.instance, self.env = target, instance, env
        self.args = ["--instance-id", instance] if args is None else args
        self.state_dir = workdir / f"state-{instance}"
        self.log_path = workdir / f"service-{instance}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, extra_env: dict[str, str] | None = None) -> ServiceProcess:
        env = {**os.environ, **self.env, "FW_STATE_DIR": str(self.state_dir), **(extra_env or {})}
        env["PYTHONPATH"] = str(ROOT)
        with open(self.log_path, "ab") as log:  # the service writes to its own copy of the descriptor
            log.write(f"---- start {self.starts} {extra_env or ''}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "framework.cli", "run", self.target, *self.args],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
            )
        self.starts += 1
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self, timeout_s: float = 60) -> int:
        """SIGTERM and wait: the service takes a final checkpoint and leaves the group."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout_s)

    def wait_exit(self, timeout_s: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout_s)

    def endpoint(self, timeout_s: float = 60, supervisor: bool = False) -> str:
        """The member's status endpoint, from the address it logs at start (this start's);
        ``supervisor``: the one a ``--processes N`` supervisor serves for all its children."""
        found: list[str] = []
        pattern = r"status endpoint http://[^:\s]+:(\d+)" + (" for all" if supervisor else "")

        def logged() -> bool:
            text = self.log_text().rsplit("---- start", 1)[-1]
            found[:] = re.findall(pattern, text)
            return bool(found)

        wait_until(logged, timeout_s, "the status endpoint's address in the log", self.log_text)
        return f"http://127.0.0.1:{found[-1]}"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


def service_env(bootstrap: str, suffix: str, *, guarantee: str = "exactly_once",
                checkpoint_interval_ms: int = 100, batch_size: int = 200) -> dict[str, str]:
    """A test service's environment: the broker, the suffix of its topic and group names,
    its guarantee, short checkpoints and small batches (crashes land between many
    checkpoints), and a 6 s session timeout (a killed member's partitions move on soon)."""
    return {
        "FW_BOOTSTRAP_SERVERS": bootstrap,
        "FW_TEST_SUFFIX": suffix,
        "FW_GUARANTEE": guarantee,
        "FW_PROCESSING__CHECKPOINT_INTERVAL_MS": str(checkpoint_interval_ms),
        "FW_PROCESSING__CONSUME_BATCH_SIZE": str(batch_size),
        "FW_KAFKA_CONSUMER__SESSION_TIMEOUT_MS": "6000",
    }


def produce(bootstrap: str, topic: str, records: Iterable[tuple[bytes | None, bytes | None]]) -> int:
    producer = Producer({"logger": CLIENT_LOG, "bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 20, "partitioner": "murmur2_random"})
    n = 0
    for key, value in records:
        while True:
            try:
                producer.produce(topic, key=key, value=value)
                break
            except BufferError:
                producer.poll(0.1)
        n += 1
        if n % 5000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    return n


def read_topic(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[Record]:
    """Every record of ``topic`` visible at ``isolation``, up to the end of each partition."""
    return read_topics(bootstrap, [topic], isolation)[topic]


def read_topics(bootstrap: str, topics: Iterable[str], isolation: str = "read_committed") -> dict[str, list[Record]]:
    """Every record of each of ``topics`` visible at ``isolation``, up to the end of each
    partition: one consumer for all of them."""
    names = list(dict.fromkeys(topics))
    md = admin_client({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    assignment = [TopicPartition(t, p, OFFSET_BEGINNING)
                  for t in names if t in md.topics for p in md.topics[t].partitions]
    consumer = Consumer({
        "logger": CLIENT_LOG, "bootstrap.servers": bootstrap, "group.id": f"reader-{time.time_ns()}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "isolation.level": isolation, "enable.partition.eof": True,
        "fetch.wait.max.ms": 10,  # the broker answers a fetch at the end of the log at once
    })
    # assigned, not subscribed: no group to join, each partition from its beginning
    consumer.assign(assignment)
    out: dict[str, list[Record]] = {t: [] for t in names}
    at_end: set[tuple[str, int]] = set()
    deadline = time.monotonic() + 60
    while len(at_end) < len(assignment):
        assert time.monotonic() < deadline, f"reading {names} did not reach the end"
        # a short wait: consume() waits out its timeout unless 10,000 records come, and the
        # end of every partition (EOF) is what ends the loop
        for msg in consumer.consume(10_000, 0.1):
            err = msg.error()
            if err is not None:
                assert err.code() == KafkaError._PARTITION_EOF, err
                at_end.add(cast("tuple[str, int]", (msg.topic(), msg.partition())))  # an EOF event names them
                continue
            topic, partition, offset, headers = located(msg)
            at_end.discard((topic, partition))
            out[topic].append(Record(partition, offset, msg.key(), msg.value(), headers))
    consumer.close()
    return out


def get_json(url: str) -> tuple[int, Any]:
    """GET ``url``: the HTTP status and the JSON body (also of a 503)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def metric_values(url: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples of metric ``name`` at ``url`` (a /metrics page), by their sorted labels."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return {tuple(sorted(s.labels.items())): s.value for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == name}


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str,
               on_timeout: Callable[[], str] = lambda: "") -> None:
    """Poll ``condition`` (a real observation, e.g. committed output) until true."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}\n{on_timeout()}")
        time.sleep(0.5)


def replication(bootstrap: str, topic: str) -> tuple[set[int], str]:
    """The replica counts of ``topic``'s partitions, and its effective min.insync.replicas,
    once the metadata lists the topic's partitions (a node other than the controller learns
    of a topic just created a moment later)."""
    admin = admin_client({"bootstrap.servers": bootstrap})
    listed: dict[int, Any] = {}

    def partitions_listed() -> bool:
        listed.update(admin.list_topics(topic, timeout=10).topics[topic].partitions)
        return bool(listed)

    wait_until(partitions_listed, 30, f"the metadata's partitions of {topic}")
    [configs] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
    return {len(p.replicas) for p in listed.values()}, configs.result(10)["min.insync.replicas"].value


def kill_at_random_after(svc: ServiceProcess, progressed: Callable[[], bool], rng: Any, what: str,
                         max_delay_s: float = 1.0) -> None:
    """Once ``progressed()`` holds, SIGKILL ``svc`` at a random moment within ``max_delay_s``
    (the moment is random on purpose: no result may depend on it)."""
    wait_until(progressed, 120, what, svc.log_text)
    time.sleep(rng.uniform(0.0, max_delay_s))
    svc.kill()


class Tail:
    """A read_committed reader that accumulates a topic's records as they become visible.

    It is assigned every partition (once the topic exists) rather than subscribed in a
    group: a group member that outlives a broker outage longer than its session would be
    given its partitions again from the start (it commits nothing) after waiting out its
    predecessor's session, reading every record twice and late."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.records: list[Record] = []
        self._c = Consumer({
            "logger": CLIENT_LOG, "bootstrap.servers": bootstrap, "group.id": f"tail-{time.time_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "isolation.level": "read_committed",
        })
        self._assigned = False

    def _assign(self) -> bool:
        if not self._assigned:
            try:
                info = self._c.list_topics(self.topic, timeout=10).topics.get(self.topic)
            except KafkaException:
                return False  # the broker is away: nothing to read now
            if info is None or info.error is not None or not info.partitions:
                return False  # not created yet (the service creates its outputs)
            self._c.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in info.partitions])
            self._assigned = True
        return True

    def drain(self, max_s: float = float("inf")) -> int:
        """Read what is visible now; return the total count. ``max_s`` bounds the reading
        while new records keep arriving (a steady input never lets the topic go quiet)."""
        deadline = time.monotonic() + max_s
        if not self._assign():
            return 0
        while True:
            msgs = self._c.consume(10_000, 0.5)
            for msg in msgs:
                if msg.error() is None:
                    _topic, partition, offset, headers = located(msg)
                    self.records.append(Record(partition, offset, msg.key(), msg.value(), headers, msg.timestamp()[1]))
            if not msgs or time.monotonic() >= deadline:
                return len(self.records)

    def close(self) -> None:
        self._c.close()



# -- event time: records to chosen partitions, committed offsets, committed timers ----------

def produce_to_partitions(bootstrap: str, topic: str, records: Iterable[tuple[Any, ...]]) -> int:
    """Produce ``(partition, key, value)``, ``(partition, key, value, headers)`` or
    ``(partition, key, value, headers, timestamp)`` records, each to its partition, in order
    within it."""
    producer = Producer({"logger": CLIENT_LOG, "bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    n = 0
    for partition, key, value, *rest in records:
        extra = {"timestamp": rest[1]} if len(rest) > 1 else {}
        while True:
            try:
                producer.produce(topic, key=key, value=value, partition=partition,
                                 headers=rest[0] if rest else None, **extra)
                break
            except BufferError:
                producer.poll(0.1)
        n += 1
    assert producer.flush(60) == 0
    return n


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The consumer group's committed next offset of each partition of ``topic``; 0 where it
    committed none (services start at the earliest offset)."""

    md = admin_client({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    tps = [TopicPartition(topic, p) for p in md.topics[topic].partitions]
    from confluent_kafka import KafkaException

    consumer = Consumer({"logger": CLIENT_LOG, "bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    answer: list[dict[int, int]] = []

    def asked() -> bool:  # a group's coordinator may still be loading: NOT_COORDINATOR, then an answer
        try:
            answer.append({tp.partition: max(tp.offset, 0) for tp in consumer.committed(tps, timeout=10)})
        except KafkaException as exc:
            if exc.args[0].code() not in (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                          KafkaError.COORDINATOR_NOT_AVAILABLE):
                raise
            return False
        return True

    try:
        wait_until(asked, 30, f"the committed offsets of {group}")
        return answer[0]
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """The high watermark of each partition of ``topic``."""

    md = admin_client({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    consumer = Consumer({"logger": CLIENT_LOG, "bootstrap.servers": bootstrap, "group.id": f"ends-{time.time_ns()}"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in md.topics[topic].partitions}
    finally:
        consumer.close()


def committed_timers(bootstrap: str, service: str, step: str) -> list[tuple[int, bytes]]:
    """The event-time timers ``(timestamp, key bytes)`` pending in the committed changelog of
    ``step`` of ``service``: what a restarted task restores."""
    from framework.state.cache import CachedPartition
    from framework.state.memory import MemoryBackend
    from framework.time.timers import list_timers

    backend = MemoryBackend()
    by_partition: dict[int, dict[bytes, bytes | None]] = {}
    for r in read_topic(bootstrap, f"{service}-{step}-changelog"):
        by_partition.setdefault(r.partition, {})[r.key or b""] = r.value  # the latest value per key
    timers: list[tuple[int, bytes]] = []
    for p, latest in by_partition.items():
        store = backend.open(service, step, p)
        store.write_batch(latest, None)
        timers += [(ts, key) for ts, key, _ in list_timers(CachedPartition(store), "event")]
    return sorted(timers)


class Tails:
    """One read_committed reader over several topics, keeping each topic's visible records."""

    def __init__(self, bootstrap: str, topics: Iterable[str]) -> None:
        self.records: dict[str, list[Record]] = {t: [] for t in topics}
        self._c = Consumer({
            "logger": CLIENT_LOG, "bootstrap.servers": bootstrap, "group.id": f"tails-{time.time_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "isolation.level": "read_committed",
        })
        self._c.subscribe(list(self.records))

    def drain(self) -> int:
        """Read what is visible now; return the total count over the topics."""
        while True:
            msgs = self._c.consume(10_000, 0.5)
            for msg in msgs:
                if msg.error() is None:
                    topic, partition, offset, headers = located(msg)
                    self.records[topic].append(Record(partition, offset, msg.key(), msg.value(), headers))
            if not msgs:
                return sum(len(r) for r in self.records.values())

    def close(self) -> None:
        self._c.close()


# -- a broker of a test's own, killed ------------------------------------------------------

def sigkill_broker(broker: LocalBroker) -> None:
    """SIGKILL the broker's JVM and wait until it is gone: no shutdown, no final flush."""
    pid = broker.status().pid
    assert pid is not None, f"the broker of {broker.instance_dir} is not running"
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not broker.status().running and not _exists(pid), 30, f"broker pid {pid} gone")


def _exists(pid: int) -> bool:
    """Whether ``pid`` is a live process (reaping it if it is our zombie child)."""
    try:
        os.waitpid(pid, os.WNOHANG)  # our child (the JVM LocalBroker launched): reap it
    except ChildProcessError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


# -- the even/odd pipeline's audit (tests.integration.pipelines:even_odd) ------------------

def even_odd_inputs(lo: int, hi: int, keys: int) -> list[tuple[bytes, bytes]]:
    """The numbers ``lo`` to ``hi - 1``, each keyed by ``n % keys``."""
    return [(str(n % keys).encode(), str(n).encode()) for n in range(lo, hi)]


class EvenOddOutputs:
    """read_committed tails of the even/odd pipeline's three outputs for inputs 1 to ``n``."""

    def __init__(self, bootstrap: str, suffix: str, n: int) -> None:
        self.n = n
        self.seen = Tail(bootstrap, f"seen-{suffix}")
        self.counts = Tail(bootstrap, f"counts-{suffix}")
        self.sums = Tail(bootstrap, f"sums-{suffix}")

    def drain(self, max_s: float = float("inf")) -> tuple[int, int, int]:
        return self.seen.drain(max_s), self.counts.drain(max_s), self.sums.drain(max_s)

    def complete(self) -> bool:
        return min(self.drain()) >= self.n

    def close(self) -> None:
        for tail in (self.seen, self.counts, self.sums):
            tail.close()


def _sum_steps(out: EvenOddOutputs, which: str) -> list[int]:
    """What each output of the ``which`` ("even", "odd") running sum added to the one before
    (in offset order: one key, one partition)."""
    sums = [json.loads(present(r.value)) for r in sorted(out.sums.records, key=lambda r: r.offset)
            if r.key == which.encode()]
    return [b - a for a, b in zip([0, *sums], sums)]


def check_exactly_once(out: EvenOddOutputs, n: int, keys: int) -> None:
    """Every input 1..n exactly once in the echo, each key's counts 1, 2, ... in order, and
    each parity's running sum adding each of its numbers once."""
    from tests.integration.pipelines import parity

    out.drain()
    seen = [int(json.loads(present(r.value))) for r in out.seen.records]
    assert sorted(seen) == list(range(1, n + 1)), "every input exactly once in the echo"
    per_key: dict[bytes | None, list[int]] = {}
    for r in sorted(out.counts.records, key=lambda r: (r.partition, r.offset)):
        per_key.setdefault(r.key, []).append(json.loads(present(r.value)))
    expected_counts: Counter[bytes | None] = Counter(str(i % keys).encode() for i in range(1, n + 1))
    assert {k: len(v) for k, v in per_key.items()} == dict(expected_counts)
    for key, counts in per_key.items():
        assert counts == list(range(1, expected_counts[key] + 1)), f"count outputs of key {key!r}"
    for p in ("even", "odd"):
        steps = sorted(_sum_steps(out, p))
        assert steps == [i for i in range(1, n + 1) if parity(i) == p], f"{p} sums add each number once"


def even_odd_anomalies(out: EvenOddOutputs, n: int, keys: int) -> dict[str, dict[str, int]]:
    """Per output, how many outputs are ``duplicates`` (one input's effect seen more than once)
    and ``missing`` (an input without its effect): the counting form of
    ``check_exactly_once``, for a report."""
    out.drain()
    found: dict[str, dict[str, int]] = {}

    def tally(name: str, got: Counter[Any], expected: Counter[Any]) -> None:
        found[name] = {"duplicates": sum((got - expected).values()), "missing": sum((expected - got).values())}

    tally("seen", Counter(int(json.loads(present(r.value))) for r in out.seen.records),
          Counter(range(1, n + 1)))
    expected_per_key = Counter(str(i % keys).encode() for i in range(1, n + 1))
    tally("counts", Counter((r.key, json.loads(present(r.value))) for r in out.counts.records),
          Counter((k, c) for k, total in expected_per_key.items() for c in range(1, total + 1)))
    tally("sums", Counter(step for p in ("even", "odd") for step in _sum_steps(out, p)),
          Counter(range(1, n + 1)))
    return found


def check_final_state(bootstrap: str, suffix: str, n: int, keys: int) -> None:
    """The compacted changelogs hold the state of a crash-free run over inputs 1 to ``n``."""
    from framework.state.cache import decode_value
    from framework.state.keys import split_keyed, state_prefix

    def state(store: str) -> dict[str, object]:
        last: dict[bytes | None, bytes | None] = {}
        for r in read_topic(bootstrap, f"eo-{suffix}-{store}-changelog"):
            last[r.key] = r.value
        return {split_keyed(state_prefix("acc"), k)[0].decode(): decode_value(v)
                for k, v in last.items() if k is not None and v is not None and k.startswith(state_prefix("acc"))}

    assert state("sums") == {'"even"': sum(range(2, n + 1, 2)), '"odd"': sum(range(1, n + 1, 2))}
    expected = Counter(str(i % keys) for i in range(1, n + 1))
    assert state("counts") == dict(expected)
