"""The benchmark suite: every system, every workload, both guarantees, on one broker and one
data set, in one run. Started by ``benchmarks/run`` (which bootstraps what it needs); see
benchmarks/README.md. Not part of the test suite.

Per run:
  1. generate the data once (Avro ``bench.Event`` records, 10,000 keys, event time with
     bounded disorder, one far-future sentinel per partition that closes every window) and
     produce it to a 4-partition input topic;
  2. compute the expected results in plain Python (the reference);
  3. throughput phase: each (system, workload, guarantee) consumes the whole backlog with a
     fresh consumer group and output topic; we sample the group's committed offsets, the
     output topic's end offsets, and CPU time and memory of the system's processes;
     its output is read back (read_committed), reduced and compared with the reference;
  4. latency phase: each (system, workload, guarantee) on a fresh topic fed at a fixed rate
     (half the framework's best throughput for that workload and guarantee); a separate
     read_committed consumer notes when each output becomes visible;
  5. replay phase (``--phases ...,replay``): each workload replayed with ``fw replay`` on Spark
     (each master of ``--replay-masters``, each reader of ``--replay-readers``) over the throughput phase's input topic, written
     exactly once to a fresh topic; wall time of the spark-submit, the job's own numbers, CPU
     of the process tree, and the output checked against the reference as above;
  6. results as JSON in benchmarks/results/, then docs/benchmarks.md and the plot.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import pickle
import platform
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import fastavro
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.common import (
    AVRO_DIR,
    BOUND_MS,
    GAP_MS,
    GUARANTEES,
    JOIN_DELETE_EVERY,
    JOIN_KEYS,
    JOIN_VERSIONS,
    JOIN_WORKLOADS,
    KEYS,
    MAX_JITTER_MS,
    OUTPUT_SCHEMA,
    RECORDS_PER_2MS,
    SENTINEL_AHEAD_MS,
    SENTINEL_KEY,
    WINDOW_MS,
    WORKLOADS,
    keep,
    mapped,
    schema,
)
from framework.config import Config

BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results"
PARTITIONS = 4
BASE_TS = 1_700_000_000_000  # fixed event-time origin (even), so runs are reproducible
SYSTEMS = ("fw-1", "fw-n", "quix", "kstreams", "flink-1", "flink-2", "pyflink", "raw")
FLINK_SYSTEMS = ("flink-1", "flink-2", "pyflink")
SYSTEM_NAMES = {
    "fw-1": "this framework, 1 process",
    "fw-n": "this framework, 1 process per core",
    "quix": "Quix Streams",
    "kstreams": "Kafka Streams",
    "flink-1": "Apache Flink (Java DataStream), parallelism 1",
    "flink-2": "Apache Flink (Java DataStream), parallelism 2",
    "pyflink": "PyFlink (Python DataStream), parallelism 1",
    "raw": "raw confluent-kafka loop (ceiling)",
}
CLK_TCK = os.sysconf("SC_CLK_TCK")
PY = str(ROOT / ".venv" / "bin" / "python")
QUIX_PY = str(BENCH / ".venv-quix" / "bin" / "python")
KS_DIR = BENCH / "kstreams"
FLINK_DIR = BENCH / "flink"
PYFLINK_PY = str(BENCH / ".venv-pyflink" / "bin" / "python")


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- data -------------------------------------------------------------------------------

def generate(n: int, seed: int = 42, n_keys: int = KEYS) -> list[tuple[str, int, int]]:
    """``n`` events (key, value, ts): ``n_keys`` keys (10,000), event time advancing 2 ms every
    20 records, each ts up to 998 ms behind its position (even timestamps throughout)."""
    rng = random.Random(seed)
    keys = [f"k{i:04d}" for i in range(n_keys)]
    out = []
    for i in range(n):
        nominal = BASE_TS + 2 * (i // RECORDS_PER_2MS)
        out.append((keys[rng.randrange(n_keys)], rng.randrange(1000), nominal - 2 * rng.randrange(MAX_JITTER_MS // 2 + 1)))
    return out


class Avro:
    def __init__(self, name: str) -> None:
        self.parsed = fastavro.parse_schema(schema(name))

    def encode(self, v: Any) -> bytes:
        buf = BytesIO()
        fastavro.schemaless_writer(buf, self.parsed, v)
        return buf.getvalue()

    def decode(self, b: bytes) -> Any:
        return fastavro.schemaless_reader(BytesIO(b), self.parsed)


def _backlog_producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 20,
                     "partitioner": "murmur2_random", "compression.type": "lz4",
                     "queue.buffering.max.messages": 1_000_000})


def produce_backlog(bootstrap: str, topic: str, events: list[tuple[str, int, int]]) -> None:
    enc = Avro("event").encode
    p = _backlog_producer(bootstrap)
    errors: list[Any] = []

    def dr(err: Any, _m: Any) -> None:
        if err is not None:
            errors.append(err)

    def put(**kw: Any) -> None:
        while True:
            try:
                p.produce(topic, on_delivery=dr, **kw)
                return
            except BufferError:
                p.poll(0.05)

    for i, (k, v, ts) in enumerate(events):
        put(key=k.encode(), value=enc({"key": k, "value": v, "ts": ts}), timestamp=ts)
        if i % 10_000 == 0:
            p.poll(0)
    end = max(ts for _, _, ts in events) if events else BASE_TS
    for part in range(PARTITIONS):  # closes every real window on every partition, in every system
        ts = end + SENTINEL_AHEAD_MS
        put(key=SENTINEL_KEY.encode(), value=enc({"key": SENTINEL_KEY, "value": 1, "ts": ts}), timestamp=ts,
            partition=part)
    if p.flush(120) or errors:
        raise SystemExit(f"producing the backlog failed: {errors[:3]}")


@dataclass
class JoinData:
    """j1's input: customers updates ``(key, value or None for a delete, ts)`` in the order
    they are produced, and orders ``(id, customer, amount, ts)``."""
    customers: list[tuple[str, int | None, int]]
    orders: list[tuple[int, str, int, int]]


def generate_join(n_orders: int, keys: int = JOIN_KEYS, seed: int = 42) -> JoinData:
    """Orders keyed by customer, event time as in ``generate`` (10 orders per ms, each ts up to
    998 ms behind its position). Each customer gets ``JOIN_VERSIONS`` values at distinct random
    even times from a quarter of the span before the first order to the last, so early orders
    find no customer yet and each later one finds one of its versions; every
    ``JOIN_DELETE_EVERY``-th customer is deleted after its last value. Updates are produced in
    the order of ts + up to 998 ms (disorder below the 2 s bound, so none is late)."""
    rng = random.Random(seed)
    span = max(2, 2 * (n_orders // RECORDS_PER_2MS))
    names = [f"c{i:06d}" for i in range(keys)]
    orders = []
    for i in range(n_orders):
        nominal = BASE_TS + 2 * (i // RECORDS_PER_2MS)
        orders.append((i, names[rng.randrange(keys)], 1 + rng.randrange(1000),
                       nominal - 2 * rng.randrange(MAX_JITTER_MS // 2 + 1)))
    first, slots = BASE_TS - span // 4, (span + span // 4) // 2
    updates: list[tuple[int, str, int | None, int]] = []  # (arrival, key, value, ts)
    for i, name in enumerate(names):
        times = sorted(first + 2 * s for s in rng.sample(range(slots), JOIN_VERSIONS + 1))
        for ts in times[:JOIN_VERSIONS]:
            updates.append((ts + rng.randrange(MAX_JITTER_MS + 1), name, rng.randrange(1_000_000), ts))
        if i % JOIN_DELETE_EVERY == 0:
            updates.append((times[-1] + rng.randrange(MAX_JITTER_MS + 1), name, None, times[-1]))
    updates.sort(key=lambda u: u[0])
    return JoinData([(k, v, ts) for _, k, v, ts in updates], orders)


def produce_join(bootstrap: str, customers_topic: str, orders_topic: str, data: JoinData) -> None:
    """The customers topic (a delete is a record without a value; Kafka timestamp = ts), then
    the orders topic, keyed by customer like the customers; each with one sentinel per
    partition 10 minutes ahead, which takes every system's table, and its stream's time, past
    the last order (Kafka Streams' grace buffer and the framework's held orders are released
    by the stream's time)."""
    p = _backlog_producer(bootstrap)
    enc_c, enc_o = Avro("customer").encode, Avro("order").encode
    errors: list[Any] = []

    def dr(err: Any, _m: Any) -> None:
        if err is not None:
            errors.append(err)

    def put(topic: str, **kw: Any) -> None:
        while True:
            try:
                p.produce(topic, on_delivery=dr, **kw)
                return
            except BufferError:
                p.poll(0.05)

    for i, (k, v, ts) in enumerate(data.customers):
        put(customers_topic, key=k.encode(), value=None if v is None else enc_c({"id": k, "value": v, "ts": ts}),
            timestamp=ts)
        if i % 10_000 == 0:
            p.poll(0)
    end = max(ts for *_, ts in data.orders) + SENTINEL_AHEAD_MS if data.orders else BASE_TS
    for part in range(PARTITIONS):
        put(customers_topic, key=SENTINEL_KEY.encode(), value=enc_c({"id": SENTINEL_KEY, "value": 0, "ts": end}),
            timestamp=end, partition=part)
    for i, (oid, k, amount, ts) in enumerate(data.orders):
        put(orders_topic, key=k.encode(), value=enc_o({"id": oid, "customer": k, "amount": amount, "ts": ts}),
            timestamp=ts)
        if i % 10_000 == 0:
            p.poll(0)
    for part in range(PARTITIONS):
        put(orders_topic, key=SENTINEL_KEY.encode(),
            value=enc_o({"id": -1 - part, "customer": SENTINEL_KEY, "amount": 0, "ts": end}), timestamp=end,
            partition=part)
    if p.flush(120) or errors:
        raise SystemExit(f"producing the join's backlog failed: {errors[:3]}")


def join_reference(data: JoinData) -> Counter:
    """j1's expected outputs: ``(order id, the customer's value as of the order's ts)``, the
    newest version at or before it (None: none yet, or a delete)."""
    versions: dict[str, list[tuple[int, int | None]]] = {}
    for k, v, ts in data.customers:
        versions.setdefault(k, []).append((ts, v))
    for vs in versions.values():
        vs.sort(key=lambda x: x[0])  # distinct times per key
    out: Counter = Counter()
    for oid, k, _amount, ts in data.orders:
        vs = versions.get(k, [])
        i = bisect.bisect_right(vs, ts, key=lambda x: x[0])
        out[(oid, vs[i - 1][1] if i else None)] += 1
    return out


# --- the reference and the comparable form of outputs -------------------------------------

def reference(workload: str, events: list[tuple[str, int, int]]) -> Counter:
    """The expected outputs, reduced to a multiset of comparable tuples (sentinel excluded)."""
    out: Counter = Counter()
    if workload == "w1":
        for k, v, ts in events:
            if keep(v):
                out[(k, mapped(v), ts)] += 1
    elif workload == "w2":  # one update per record, in each key's order (one key, one partition)
        acc: dict[str, list[int]] = {}
        for k, v, _ts in events:
            a = acc.setdefault(k, [0, 0])
            a[0] += 1
            a[1] += v
            out[(k, a[0], a[1])] += 1
    elif workload == "w3":
        wins: dict[tuple[str, int], list[int]] = {}
        for k, v, ts in events:
            a = wins.setdefault((k, ts - ts % WINDOW_MS), [0, 0])
            a[0] += 1
            a[1] += v
        for (k, start), (c, s) in wins.items():
            out[(k, start, start + WINDOW_MS, round(s / c, 9))] += 1
    elif workload == "w4":
        by_key: dict[str, list[tuple[int, int]]] = {}
        for k, v, ts in events:
            by_key.setdefault(k, []).append((ts, v))
        for k, recs in by_key.items():
            recs.sort()
            start, last, c, s = recs[0][0], recs[0][0], 0, 0
            for ts, v in recs:
                if ts - last > GAP_MS:
                    out[(k, start, last + GAP_MS, c, s)] += 1
                    start, c, s = ts, 0, 0
                last, c, s = ts, c + 1, s + v
            out[(k, start, last + GAP_MS, c, s)] += 1
    return out


def reduce_outputs(workload: str, records: list[tuple[bytes | None, bytes | None, int]]) -> Counter:
    dec = Avro(OUTPUT_SCHEMA[workload]).decode
    out: Counter = Counter()
    for kb, vb, _ts in records:
        if kb is None or vb is None:
            continue
        k = kb.decode()
        if k == SENTINEL_KEY:
            continue
        v = dec(vb)
        if workload == "w1":
            out[(k, v["value"], v["ts"])] += 1
        elif workload == "j1":
            out[(v["id"], v["customer_value"])] += 1
        elif workload == "w2":
            out[(k, v["count"], v["sum"])] += 1
        elif workload == "w3":
            out[(k, v["start"], v["end"], round(v["value"], 9))] += 1
        else:
            out[(k, v["start"], v["end"], v["value"]["count"], v["value"]["sum"])] += 1
    return out


def compare(expected: Counter, got: Counter) -> dict[str, Any]:
    missing, extra = expected - got, got - expected
    return {
        "ok": not missing and not extra,
        "expected": sum(expected.values()),
        "outputs": sum(got.values()),
        "missing": sum(missing.values()),
        "extra": sum(extra.values()),
        "examples_missing": [list(t) for t in list(missing)[:3]],
        "examples_extra": [list(t) for t in list(extra)[:3]],
    }


# --- Kafka helpers ------------------------------------------------------------------------

def create_topics(admin: AdminClient, names: list[str]) -> None:
    fs = admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in names], operation_timeout=30)
    for f in fs.values():
        f.result()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=10)
        if all(n in md.topics and len(md.topics[n].partitions) == PARTITIONS for n in names):
            return
        time.sleep(0.1)
    raise SystemExit(f"topics {names} not visible")


def read_all(bootstrap: str, topic: str, timeout_s: float = 300) -> list[tuple[bytes | None, bytes | None, int]]:
    """Every committed record of ``topic`` (read_committed, to the end of each partition)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-read-{uuid.uuid4().hex[:8]}",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        out: list[tuple[bytes | None, bytes | None, int]] = []
        eof: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(eof) < PARTITIONS and time.monotonic() < deadline:
            for m in c.consume(10_000, 0.5):
                err = m.error()
                if err is None:
                    out.append((m.key(), m.value(), m.timestamp()[1]))
                    eof.discard(m.partition())
                elif err.code() == KafkaError._PARTITION_EOF:
                    eof.add(cast(int, m.partition()))  # an end-of-partition event names its partition
        return out
    finally:
        c.close()


class GroupProgress:
    """Committed offsets of a consumer group on the input topics, and end offsets of the output."""

    def __init__(self, bootstrap: str, group: str, input_topics: list[str], output_topic: str) -> None:
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                           "isolation.level": "read_committed"})
        self.tps = [TopicPartition(t, p) for t in input_topics for p in range(PARTITIONS)]
        self.out = [TopicPartition(output_topic, p) for p in range(PARTITIONS)]

    def committed(self) -> int:
        try:
            return sum(max(tp.offset, 0) for tp in self.c.committed(self.tps, timeout=5))
        except Exception:  # noqa: BLE001 - transient while a transaction's offsets are pending
            return -1

    def output_end(self) -> int:
        return sum(self.c.get_watermark_offsets(tp, timeout=5, cached=False)[1] for tp in self.out)

    def close(self) -> None:
        self.c.close()


def end_offsets(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-probe"})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS))
    finally:
        c.close()


# --- processes ----------------------------------------------------------------------------

def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def read_stat(path: str) -> tuple[str, float]:
    """The name and CPU seconds (utime + stime) in a process's or thread's ``/proc/.../stat``
    at ``path`` (OSError: it is gone)."""
    with open(path) as f:
        st = f.read()
    fields = st[st.rindex(")") + 2:].split()
    return st[st.index("(") + 1:st.rindex(")")], (int(fields[11]) + int(fields[12])) / CLK_TCK


def broker_cpu() -> float | None:
    """CPU seconds the local broker has used so far (``BENCH_BROKER_PID``, set by ``run`` when
    it uses the local broker), or None: it shares the cores with what is measured, and a
    ``local[2]`` replay can only scale as far as the cores the broker leaves."""
    pid = os.environ.get("BENCH_BROKER_PID")
    try:
        return read_stat(f"/proc/{pid}/stat")[1] if pid else None
    except OSError:
        return None


class ProcTree:
    """CPU seconds (utime + stime) and memory (VmRSS, VmHWM) of a process and its descendants;
    a process's last reading is kept after it exits."""

    def __init__(self, pid: int, detail: bool = False) -> None:
        self.pid = pid
        self.cpu: dict[int, float] = {}
        self.hwm: dict[int, int] = {}
        self.detail = detail  # also each process's command line, and CPU per thread (threads())
        self.cmdline: dict[int, str] = {}
        self.thread_cpu: dict[tuple[int, int], tuple[str, float]] = {}  # (pid, tid) -> (thread name, CPU s)
        self.pids: list[int] = []
        self.rss_now = 0

    def sample(self) -> tuple[float, int, int]:
        kids, pids, stack = _children(), [], [self.pid]
        while stack:
            p = stack.pop()
            pids.append(p)
            stack.extend(kids.get(p, ()))
        rss = 0
        for p in pids:
            try:
                self.cpu[p] = read_stat(f"/proc/{p}/stat")[1]
                if self.detail:  # read each time (spark-submit's bash script execs the JVM); empty: a zombie
                    with open(f"/proc/{p}/cmdline", "rb") as f:
                        cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
                    self.cmdline[p] = cmdline or self.cmdline.get(p, "")
                with open(f"/proc/{p}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            self.hwm[p] = max(self.hwm.get(p, 0), int(line.split()[1]) * 1024)
                        elif line.startswith("VmRSS:"):
                            rss += int(line.split()[1]) * 1024
            except (OSError, ValueError, IndexError):
                continue
        self.rss_now = rss
        self.pids = pids
        return sum(self.cpu.values()), rss, sum(self.hwm.values())

    def sample_threads(self) -> None:
        """CPU seconds of every thread of the tree's processes (as of the last ``sample``)."""
        for p in self.pids:
            try:
                tids = os.listdir(f"/proc/{p}/task")
            except OSError:
                continue
            for t in tids:
                try:
                    self.thread_cpu[(p, int(t))] = read_stat(f"/proc/{p}/task/{t}/stat")
                except OSError:
                    continue

    def threads(self, role: Any) -> dict[str, float]:
        """CPU seconds by ``role(command line)`` and thread name (digits dropped: pools summed)."""
        out: Counter[str] = Counter()
        for (p, _t), (name, cpu) in self.thread_cpu.items():
            part = f"{role(self.cmdline.get(p, ''))}: {re.sub(r'[0-9]+', '#', name)}"
            out[part] += cpu  # type: ignore[assignment]  # CPU seconds: a Counter sums floats too
        return {k: round(v, 2) for k, v in out.most_common() if v >= 0.05}


@dataclass
class Launch:
    cmd: list[str]
    env: dict[str, str]
    status_url: str | None = None  # fw-1's status endpoint: its checkpoints' phases (``checkpoint_phases``)


def launch_spec(system: str, workload: str, guarantee: str, bootstrap: str, input_topic: str, output_topic: str,
                group: str, state_dir: str, commit_ms: int, cores: int, ks_threads: int, table_topic: str = "") -> Launch:
    env = dict(os.environ)
    env.update(BENCH_BOOTSTRAP=bootstrap, BENCH_WORKLOAD=workload, BENCH_GUARANTEE=guarantee,
               BENCH_INPUT=input_topic, BENCH_OUTPUT=output_topic, BENCH_GROUP=group, BENCH_STATE_DIR=state_dir,
               BENCH_COMMIT_MS=str(commit_ms), BENCH_AVRO_DIR=str(AVRO_DIR), BENCH_THREADS=str(ks_threads),
               BENCH_TABLE=table_topic, PYTHONPATH=str(ROOT))
    if system in ("fw-1", "fw-n"):
        env.update(FW_BOOTSTRAP_SERVERS=bootstrap, FW_GUARANTEE=guarantee, FW_STATE_DIR=state_dir,
                   FW_PROCESSING__CHECKPOINT_INTERVAL_MS=str(commit_ms))
        # BENCH_FW_LAUNCHER: a script standing in for `python -m framework.cli` (same arguments),
        # to measure a proposed change of the framework without editing it (see README).
        launcher = os.environ.get("BENCH_FW_LAUNCHER")
        cmd = [PY, launcher] if launcher else [PY, "-m", "framework.cli"]
        cmd += ["run", "benchmarks.apps.fw_app:pipeline", "--log-level", "WARNING"]
        if system == "fw-n":
            cmd += ["--processes", str(cores)]
            return Launch(cmd, env)
        port = free_port()
        env.update(FW_OBSERVE__HOST="127.0.0.1", FW_OBSERVE__PORT=str(port))
        return Launch(cmd, env, f"http://127.0.0.1:{port}/status")
    if system == "quix":
        return Launch([QUIX_PY, str(BENCH / "apps" / "quix_app.py")], env)
    if system == "kstreams":
        cp = f"{KS_DIR / 'target' / 'kstreams-bench-1.jar'}:{(KS_DIR / 'target' / 'classpath.txt').read_text().strip()}"
        return Launch(["java", "-Xms256m", "-Xmx1g", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                       "-cp", cp, "bench.KStreamsBench"], env)
    if system in ("flink-1", "flink-2"):
        env.update(BENCH_PARALLELISM=system[-1])
        cp = f"{FLINK_DIR / 'target' / 'flink-bench-1.jar'}:{(FLINK_DIR / 'target' / 'classpath.txt').read_text().strip()}"
        return Launch(["java", "-Xms256m", "-Xmx1g", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                       "-cp", cp, "bench.FlinkBench"], env)
    if system == "pyflink":
        env.update(BENCH_PARALLELISM="1", BENCH_FLINK_JARS=os.pathsep.join(
            [str(FLINK_DIR / "target" / "flink-bench-1.jar"), *map(str, (FLINK_DIR / "target" / "pyflink-lib").glob("*.jar"))]))
        return Launch([PYFLINK_PY, str(BENCH / "apps" / "pyflink_app.py")], env)
    if system == "raw":
        return Launch([PY, str(BENCH / "apps" / "raw_app.py")], env)
    raise ValueError(system)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def checkpoint_phases(spec: Launch) -> dict[str, Any] | None:
    """fw-1's checkpoints as its ``/status`` last published them: how many completed and the
    mean milliseconds of each part (``phases_ms``: state, flush, offsets, commit), where a short
    checkpoint interval's time goes. None for other systems, or when it does not answer."""
    if spec.status_url is None:
        return None
    try:
        with urllib.request.urlopen(spec.status_url, timeout=5) as answer:
            member = json.load(answer)["members"][0]["checkpoint"]
    except (OSError, ValueError, KeyError, IndexError):
        return None
    return {k: member.get(k) for k in ("completed", "failed", "phases_ms", "interval_s")}


def stop(proc: subprocess.Popen, timeout_s: float = 30) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


# --- the phases ---------------------------------------------------------------------------

@dataclass
class Ctx:
    args: argparse.Namespace
    bootstrap: str
    run_id: str
    admin: AdminClient
    logs: Path
    cores: int
    results: dict[str, Any] = field(default_factory=dict)
    round: int = 0  # of --repeat: each round's runs have topics and groups of their own


def _names(ctx: Ctx, phase: str, system: str, workload: str, guarantee: str) -> tuple[str, str]:
    g = "eos" if guarantee == "exactly_once" else "alo"
    base = f"bench-{ctx.run_id}-{phase}-{system}-{workload}-{g}" + (f"-r{ctx.round}" if ctx.round else "")
    return base, f"{base}-out"


def throughput_run(ctx: Ctx, system: str, workload: str, guarantee: str, input_topic: str, total: int,
                   expected: Counter, profile: bool = False, table_topic: str = "") -> dict[str, Any]:
    """``total``: the records of the input topic and of ``table_topic`` (j1's customers) together."""
    group, out_topic = _names(ctx, "tp" if not profile else "prof", system, workload, guarantee)
    create_topics(ctx.admin, [out_topic])
    state = tempfile.mkdtemp(prefix="bench-state-")
    spec = launch_spec(system, workload, guarantee, ctx.bootstrap, input_topic, out_topic, group, state,
                       ctx.args.commit_ms, ctx.cores, ctx.args.ks_threads, table_topic)
    with open(ctx.logs / f"{group}.log", "w") as logf:  # the system writes to its own copy of the descriptor
        load_before = os.getloadavg()
        t_launch = time.monotonic()
        proc = subprocess.Popen(spec.cmd, env=spec.env, cwd=ROOT, stdout=logf, stderr=subprocess.STDOUT,
                                start_new_session=True)
    spy = None
    if profile:
        prof_file = ctx.logs / f"profile-{workload}-{guarantee}.txt"
        time.sleep(1.0)
        spy = subprocess.Popen([str(BENCH / ".venv-quix" / "bin" / "py-spy"), "record", "--pid", str(proc.pid),
                                "--rate", "250", "--format", "raw", "--output", str(prof_file), "--nonblocking"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tree = ProcTree(proc.pid)
    prog = GroupProgress(ctx.bootstrap, group, [input_topic] + ([table_topic] if table_topic else []), out_topic)
    # t, committed, out_end, cpu, rss, hwm, the broker's cpu (None: not the local broker)
    samples: list[tuple[float, int, int, float, int, int, float | None]] = []
    deadline = t_launch + ctx.args.run_timeout
    status = "ok"
    try:
        while True:
            committed, out_end = prog.committed(), prog.output_end()
            cpu, rss, hwm = tree.sample()
            now = time.monotonic()
            samples.append((now - t_launch, committed, out_end, cpu, rss, hwm, broker_cpu()))
            if committed >= total:
                break
            if proc.poll() is not None:
                status = f"exited with {proc.returncode} (log {logf.name})"
                break
            if now > deadline:
                status = f"timed out after {ctx.args.run_timeout}s at {committed}/{total} (log {logf.name})"
                break
            time.sleep(0.1)
        if status == "ok" and system in FLINK_SYSTEMS:
            _settle_outputs(prog, tree, t_launch, samples, 2 * ctx.args.commit_ms / 1000 + 1, deadline)
        # the output's end offset settles (transaction markers of the final commits)
        time.sleep(0.5)
        final_out = prog.output_end()
        cpu, rss, hwm = tree.sample()
        samples.append((time.monotonic() - t_launch, prog.committed(), final_out, cpu, rss, hwm, broker_cpu()))
    finally:
        prog.close()
        checkpoints = checkpoint_phases(spec)
        stop(proc)
        if spy is not None:
            try:
                spy.wait(30)
            except subprocess.TimeoutExpired:
                spy.kill()
        shutil.rmtree(state, ignore_errors=True)
    res: dict[str, Any] = {"system": system, "workload": workload, "guarantee": guarantee, "records": total,
                           "status": status, "loadavg_before": load_before, "loadavg_after": os.getloadavg()}
    if status == "ok":
        res.update(_throughput_numbers(samples, total, final_out, workload in ("w1", "w2", "j1"),
                                       outputs_trail=system in FLINK_SYSTEMS))
    elif status.startswith("timed out"):
        res.update(_partial_rate(samples))
    res["peak_rss_mb"] = round(max(s[5] for s in samples) / 2**20, 1) if samples else None
    res["rss_mb_series"] = _series(samples)
    if checkpoints:
        res["checkpoints"] = checkpoints
    if status == "ok":
        got = reduce_outputs(workload, read_all(ctx.bootstrap, out_topic))
        res["check"] = compare(expected, got)
    else:
        res["check"] = {"ok": None, "note": "not checked: the run did not finish"}
    if profile:
        res["profile_file"] = str(ctx.logs / f"profile-{workload}-{guarantee}.txt")
    return res


def _settle_outputs(prog: GroupProgress, tree: ProcTree, t_launch: float, samples: list[tuple], quiet_s: float,
                    deadline: float) -> None:
    """Sample on until the output's end offset has not moved for ``quiet_s``: Flink commits the
    source's offsets and the sink's transaction each on its own once a checkpoint completes, and
    a window fired by the watermark after a checkpoint's barrier (the watermark is emitted
    periodically, not with the sentinel) is written in the next checkpoint's transaction, after
    the group's offsets already cover every input record."""
    last_change, last_out = time.monotonic(), prog.output_end()
    while time.monotonic() - last_change < quiet_s and time.monotonic() < deadline:
        time.sleep(0.1)
        out_end = prog.output_end()
        cpu, rss, hwm = tree.sample()
        now = time.monotonic()
        samples.append((now - t_launch, prog.committed(), out_end, cpu, rss, hwm, broker_cpu()))
        if out_end != last_out:
            last_change, last_out = now, out_end


def _throughput_numbers(samples: list[tuple], total: int, final_out: int, per_record: bool,
                        outputs_trail: bool = False) -> dict[str, Any]:
    """Records per second while the system works through the backlog, start-up excluded.

    Start: for W1/W2 (``per_record``: an output per input from the first record on) the first
    output record appended (0 records done) or the group's first commit, whichever is observed
    first; for W3/W4 (outputs only when windows close, the first after a few % of the backlog)
    the group's first commit (c1 records done). End: the last output record appended, i.e. the
    output's end offset within 8 (the final commits' transaction markers) of its final value;
    or else the moment the group had committed every input offset. ``outputs_trail`` (Flink:
    its last outputs can follow the group's final commit, and the samples go on until they
    settle): the last output record appended, also when it came after that commit."""
    first_commit = next((s for s in samples if s[1] > 0), None)
    done = next((s for s in samples if s[1] >= total), None)
    if first_commit is None or done is None:
        return {"records_per_s": None, "note": "no commit observed"}
    first_out = next((s for s in samples if s[2] > 0), None)
    if per_record and first_out is not None and first_out[0] <= first_commit[0]:
        start, done_at_start = first_out, 0
    else:
        start, done_at_start = first_commit, first_commit[1]
    out_done = next((s for s in samples if s[2] >= final_out - 8), done)
    end = out_done if start[0] < out_done[0] <= done[0] or (outputs_trail and start[0] < out_done[0]) else done
    n = total - done_at_start
    secs = end[0] - start[0]
    if n < total * 0.5 or secs < 1.0:
        return {"records_per_s": None, "note": "too few records to measure (processed within about one commit "
                "interval): use more records"}
    cpu = end[3] - start[3]
    broker = end[6] - start[6] if end[6] is not None and start[6] is not None else None
    return {"records_per_s": round(n / secs), "measured_records": n, "measured_s": round(secs, 3),
            "cpu_s_per_million": round(cpu / n * 1e6, 2), "cpu_s_total": round(samples[-1][3], 2),
            "broker_cpu_s_per_million": round(broker / n * 1e6, 2) if broker is not None else None,
            "start_s": round(start[0], 2), "start_by": "first output" if done_at_start == 0 else "first commit",
            "lag_zero_s": round(done[0], 2)}


def _partial_rate(samples: list[tuple]) -> dict[str, Any]:
    """A run stopped by --run-timeout: the rate of committed progress from the first commit on."""
    first = next((s for s in samples if s[1] > 0), None)
    last = max((s for s in samples if s[1] > 0), key=lambda s: s[1], default=None)
    if first is None or last is None or last[0] <= first[0]:
        return {"records_per_s": None, "note": "timed out before a second commit"}
    n = last[1] - first[1]
    return {"records_per_s": round(n / (last[0] - first[0])), "partial": True, "measured_records": n,
            "measured_s": round(last[0] - first[0], 3), "cpu_s_per_million": round((last[3] - first[3]) / n * 1e6, 2)
            if n else None}


def _series(samples: list[tuple], points: int = 12) -> list[list[float]]:
    if not samples:
        return []
    step = max(1, len(samples) // points)
    picked = samples[::step] + [samples[-1]]
    return [[round(s[0], 1), round(s[4] / 2**20, 1)] for s in picked]


def latency_run(ctx: Ctx, system: str, workload: str, guarantee: str, rate: int) -> dict[str, Any]:
    group, out_topic = _names(ctx, "lat", system, workload, guarantee)
    in_topic = f"{group}-in"
    create_topics(ctx.admin, [in_topic, out_topic])
    state = tempfile.mkdtemp(prefix="bench-state-")
    spec = launch_spec(system, workload, guarantee, ctx.bootstrap, in_topic, out_topic, group, state,
                       ctx.args.commit_ms, ctx.cores, ctx.args.ks_threads)
    with open(ctx.logs / f"{group}.log", "w") as logf:  # the system writes to its own copy of the descriptor
        seen_file = ctx.logs / f"{group}.seen"
        watcher = subprocess.Popen([PY, str(BENCH / "watch.py"), ctx.bootstrap, out_topic, str(seen_file)],
                                   stdout=subprocess.PIPE, start_new_session=True)
        assert watcher.stdout is not None  # a pipe
        watcher.stdout.readline()  # "ready"
        proc = subprocess.Popen(spec.cmd, env=spec.env, cwd=ROOT, stdout=logf, stderr=subprocess.STDOUT,
                                start_new_session=True)
    tree = ProcTree(proc.pid)
    enc = Avro("event").encode
    p = Producer({"bootstrap.servers": ctx.bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 1,
                  "partitioner": "murmur2_random", "compression.type": "lz4"})
    rng = random.Random(7)
    keys = [f"k{i:04d}" for i in range(KEYS)]
    key_bytes = [k.encode() for k in keys]
    # An Avro bench.Event body is string(key) + long(value) + long(ts): built from pre-encoded
    # parts, so the load generator stays cheap (it shares the two cores with the system under test).
    key_parts = [_avro_long(len(b)) + b for b in key_bytes]
    value_parts = [_avro_long(v) for v in range(1000)]
    assert enc({"key": keys[1], "value": 7, "ts": 1_700_000_000_123}) == \
        key_parts[1] + value_parts[7] + _avro_long(1_700_000_000_123)
    warm, measure = ctx.args.latency_warmup, ctx.args.latency_seconds
    t0 = time.time()
    t_warm_end_ms = int((t0 + warm) * 1000)
    t_end = t0 + warm + measure
    produce = p.produce
    tick, sent, rss_samples = 0.005, 0, []
    next_sample = 0.0
    status = "ok"
    try:
        while True:
            now = time.time()
            if now >= t_end:
                break
            due = int((now - t0) * rate) - sent
            ts = int(now * 1000)
            block = (ts // 1000) % 10 * (KEYS // 10)  # each key is active one second in ten
            ts_bytes = _avro_long(ts)  # ts is the record's last field: one encoding per tick
            for _ in range(due):
                i = block + rng.randrange(KEYS // 10)
                while True:
                    try:
                        produce(in_topic, key_parts[i] + value_parts[rng.randrange(1000)] + ts_bytes, key_bytes[i],
                                -1, None, None, ts)
                        break
                    except BufferError:
                        p.poll(0.01)
            sent += max(due, 0)
            p.poll(0)
            if now >= next_sample:
                cpu, rss, hwm = tree.sample()
                rss_samples.append((now - t0, rss, hwm, cpu))
                next_sample = now + 0.5
                if proc.poll() is not None:
                    status = f"exited with {proc.returncode} (log {logf.name})"
                    break
            time.sleep(max(0.0, tick - (time.time() - now)))
        p.flush(30)
        # the last windows of the measured span close once the watermark passes them
        time.sleep(ctx.args.commit_ms / 1000 + BOUND_MS / 1000 + ctx.args.latency_drain)
        cpu, rss, hwm = tree.sample()
        rss_samples.append((time.time() - t0, rss, hwm, cpu))
    finally:
        checkpoints = checkpoint_phases(spec)
        stop(proc)
        watcher.send_signal(signal.SIGTERM)
        watcher.wait(60)
        shutil.rmtree(state, ignore_errors=True)
    with open(seen_file, "rb") as f:
        seen = pickle.load(f)
    seen_file.unlink()
    lat = _latencies(workload, seen, t_warm_end_ms, int(t_end * 1000))
    res = {"system": system, "workload": workload, "guarantee": guarantee, "rate": rate, "produced": sent,
           "status": status, "measured_s": measure, **lat,
           "peak_rss_mb": round(max(s[2] for s in rss_samples) / 2**20, 1) if rss_samples else None,
           "rss_mb_series": [[round(s[0], 1), round(s[1] / 2**20, 1)]
                             for s in rss_samples[:: max(1, len(rss_samples) // 12)]],
           "cpu_s": round(rss_samples[-1][3], 2) if rss_samples else None}
    if checkpoints:
        res["checkpoints"] = checkpoints
    return res


def _avro_long(n: int) -> bytes:
    """Avro's zig-zag varint encoding of a long."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z & ~0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _latencies(workload: str, seen: list[tuple[int, int, bytes]], lo: int, hi: int) -> dict[str, Any]:
    """End-to-end latency per output: from the produce time of the input (W1: its ts field;
    W2: the record timestamp, which every system copies from the input) or, for windows,
    from the moment the window could close (end + bound: the produce time of the first
    record whose timestamp lets the watermark pass it), to visibility in read_committed."""
    dec = Avro(OUTPUT_SCHEMA[workload]).decode
    lats = []
    for seen_ms, ts, vb in seen:
        if vb is None:
            continue
        if workload == "w2":
            origin = ts
        else:
            v = dec(vb)
            origin = v["ts"] if workload == "w1" else v["end"] + BOUND_MS
        if lo <= origin <= hi:
            lats.append(seen_ms - origin)
    if not lats:
        return {"outputs": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    lats.sort()
    return {"outputs": len(lats), "p50_ms": lats[len(lats) // 2], "p99_ms": lats[min(len(lats) - 1, int(len(lats) * 0.99))],
            "max_ms": lats[-1]}


# --- replay on Spark ----------------------------------------------------------------------

_STAGE_LINE = re.compile(r"^\[replay\] stage (\d+) \((.*?)\): (.*)$")
_DONE_LINE = re.compile(r"^\[replay\] done: (.*)$")


def _replay_counts(text: str) -> dict[str, Any]:
    """``records 1,000, seconds 2.5, records/s 400`` (plan.summary()) as a dict of numbers."""
    out: dict[str, Any] = {}
    for part in text.split(", "):
        name, _, value = part.rpartition(" ")
        try:
            out[name] = float(value) if "." in value else int(value.replace(",", ""))
        except ValueError:
            out[name] = value
    return out


def parse_replay_log(text: str) -> dict[str, Any]:
    """The per-stage lines and the final line of ``fw replay``'s output."""
    stages, done = [], None
    for line in text.splitlines():
        m = _STAGE_LINE.match(line.strip())
        if m:
            stages.append({"stage": int(m.group(1)), "topics": m.group(2), **_replay_counts(m.group(3))})
            continue
        m = _DONE_LINE.match(line.strip())
        if m:
            done = _replay_counts(m.group(1))
    return {"stages": stages, "done": done}


def master_cores(master: str) -> int | None:
    """The cores a Spark master runs tasks on: local → 1, local[N] / local[N,F] → N, local[*] → all."""
    if master == "local":
        return 1
    m = re.fullmatch(r"local\[(\*|\d+)(?:,\d+)?\]", master)
    if not m:
        return None
    return (os.cpu_count() or 1) if m.group(1) == "*" else int(m.group(1))


def _replay_role(cmdline: str) -> str:
    """Which part of a replay a process of its tree is."""
    if "pyspark.daemon" in cmdline or "pyspark.worker" in cmdline:
        return "Python workers (the tasks)"
    if "replay/job.py" in cmdline and "SparkSubmit" not in cmdline:
        return "Python driver (job.py)"
    if "java" in cmdline.split(" ", 1)[0]:
        return "JVM (Spark)"
    if "framework.cli" in cmdline or "BENCH" in cmdline:
        return "fw replay command"
    return "other"


def replay_run(ctx: Ctx, workload: str, master: str, input_topic: str, total: int,
               expected: Counter, profile: bool = False, reader: str = "spark") -> dict[str, Any]:
    """``fw replay benchmarks.apps.fw_app:pipeline --master <master> --reader <reader> --output topic`` over the
    throughput phase's input topic: the wall time of the whole spark-submit, the job's own
    numbers from its output, CPU of the process tree (and by part: JVM, Python workers, ...),
    and the output checked. ``profile``: under ``py-spy record --subprocesses`` (not measured)."""
    slug = master.replace("[", "").replace("]", "").replace("*", "all").replace(",", "-") + f"-{reader}"
    group, out_topic = _names(ctx, "rpprof" if profile else "rp", slug, workload, "exactly_once")
    create_topics(ctx.admin, [out_topic])  # `--output-suffix` creates <output><suffix> like <output>
    suffix = f"-replay-{uuid.uuid4().hex[:8]}"
    written = f"{out_topic}{suffix}"
    state = tempfile.mkdtemp(prefix="bench-state-")
    spec = launch_spec("fw-1", workload, "exactly_once", ctx.bootstrap, input_topic, out_topic, group, state,
                       ctx.args.commit_ms, ctx.cores, ctx.args.ks_threads)
    launcher = os.environ.get("BENCH_FW_LAUNCHER")
    cmd = ([PY, launcher] if launcher else [PY, "-m", "framework.cli"]) + [
        "replay", "benchmarks.apps.fw_app:pipeline", "--master", master, "--reader", reader, "--output", "topic",
        "--output-suffix", suffix]
    log_path = ctx.logs / f"{group}.log"
    with open(log_path, "w") as logf:  # the command writes to its own copy of the descriptor
        load_before = os.getloadavg()
        t_launch = time.monotonic()
        proc = subprocess.Popen(cmd, env=spec.env, cwd=ROOT, stdout=logf, stderr=subprocess.STDOUT,
                                start_new_session=True)
    tree = ProcTree(proc.pid, detail=True)
    spy, prof_file = None, ctx.logs / f"profile-replay-{workload}-{slug}.txt"
    if profile:
        spy = subprocess.Popen([str(BENCH / ".venv-quix" / "bin" / "py-spy"), "record", "--pid", str(proc.pid),
                                "--subprocesses", "--rate", "100", "--format", "raw", "--output", str(prof_file),
                                "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    status = "ok"
    # event -> (seconds since launch, CPU seconds then, the broker's CPU seconds then or None)
    marks: dict[str, tuple[float, float, float | None]] = {}
    samples: list[tuple[float, float, int]] = []  # t, cpu, rss
    tail = ""
    try:
        with open(log_path) as log_in:
            while True:
                cpu, rss, _hwm = tree.sample()
                now = time.monotonic() - t_launch
                samples.append((now, cpu, rss))
                if len(samples) % 5 == 0:
                    tree.sample_threads()
                chunk = log_in.read()
                if chunk:
                    tail = tail[-100:] + chunk  # a line may arrive in two reads
                    for event, needle in (("session", "[replay] Spark UI:"), ("stage0", "[replay] stage 0 ("),
                                          ("done", "[replay] done:")):
                        if event not in marks and needle in tail:
                            marks[event] = (now, cpu, broker_cpu())
                if proc.poll() is not None:
                    if proc.returncode != 0:
                        status = f"exited with {proc.returncode} (log {log_path})"
                    break
                if now > ctx.args.replay_timeout:
                    status = f"timed out after {ctx.args.replay_timeout}s (log {log_path})"
                    break
                time.sleep(0.2)
        wall = time.monotonic() - t_launch
    finally:
        stop(proc)
        if spy is not None:
            try:
                spy.wait(60)
            except subprocess.TimeoutExpired:
                spy.kill()
        shutil.rmtree(state, ignore_errors=True)
    by_role: Counter[str] = Counter()
    for pid, cpu in tree.cpu.items():
        by_role[_replay_role(tree.cmdline.get(pid, ""))] += cpu  # type: ignore[assignment]  # a Counter sums floats too
    cpu_total = max(s[1] for s in samples) if samples else None
    parsed = parse_replay_log(log_path.read_text())
    done = parsed["done"] or {}
    cores = master_cores(master)
    job_rps = done.get("records/s")
    res: dict[str, Any] = {
        "workload": workload, "master": master, "reader": reader, "cores": cores, "records": total, "status": status,
        "command": " ".join(["fw"] + cmd[cmd.index("replay"):]), "output_topic": written,
        "wall_s": round(wall, 2),
        "job_s": done.get("seconds"), "job_records_per_s": job_rps,
        "records_per_s_per_core": round(job_rps / cores) if job_rps and cores else None,
        # the tasks alone: from the first task's start to the last one's end (Spark's job start
        # and task launches left out, as the live rate leaves out the service's start)
        "processing_s": done.get("processing seconds"),
        "processing_records_per_s": done.get("records/s while processing"),
        "wall_records_per_s": round(total / wall) if status == "ok" and wall else None,
        "startup_s": round(marks["session"][0], 2) if "session" in marks else None,
        "cpu_s_total": round(cpu_total, 2) if cpu_total is not None else None,
        "cpu_s_per_million": round(cpu_total / total * 1e6, 2) if cpu_total and total else None,
        "peak_rss_mb": round(max(s[2] for s in samples) / 2**20, 1) if samples else None,
        "cpu_s_by_part": {k: round(v, 2) for k, v in by_role.most_common()},
        "cpu_s_by_thread": dict(list(tree.threads(_replay_role).items())[:25]),
        "done": done, "stages": parsed["stages"],
        "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
    }
    if "session" in marks and "done" in marks and marks["done"][1] > marks["session"][1]:
        # the job alone: from the Spark session being up to its final line (0.2 s resolution)
        res["job_cpu_s"] = round(marks["done"][1] - marks["session"][1], 2)
        res["job_cpu_s_per_million"] = round(res["job_cpu_s"] / total * 1e6, 2)
        job_s = max(0.1, marks["done"][0] - marks["session"][0])
        res["job_cores_busy"] = round(res["job_cpu_s"] / job_s, 2)
        if marks["done"][2] is not None and marks["session"][2] is not None:
            broker = marks["done"][2] - marks["session"][2]
            res["job_broker_cpu_s_per_million"] = round(broker / total * 1e6, 2)
            res["job_broker_cores_busy"] = round(broker / job_s, 2)
    if profile:
        res["profile"] = summarize_profile(prof_file)
        res["profile_file"] = str(prof_file)
    if status == "ok" and done:
        got = reduce_outputs(workload, read_all(ctx.bootstrap, written))
        res["check"] = compare(expected, got)
    else:
        res["check"] = {"ok": None, "note": "not checked: the replay did not finish"}
    return res


# --- profile summary --------------------------------------------------------------------

def summarize_profile(path: Path, top: int = 15) -> dict[str, Any]:
    """Self and inclusive sample shares per function from py-spy's collapsed stacks."""
    if not path.exists():
        return {"error": f"{path} missing (py-spy needs ptrace rights)"}
    self_c: Counter = Counter()
    incl: Counter = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack:
            continue
        count = int(n)
        frames = [f.split(" (")[0] + " " + f.split("(")[-1].split(":")[0].rsplit("/", 1)[-1] if "(" in f else f
                  for f in stack.split(";")]
        total += count
        self_c[frames[-1]] += count
        for f in set(frames):
            incl[f] += count
    pct = lambda c: round(100 * c / total, 1)
    return {"samples": total,
            "self": [[f, pct(c)] for f, c in self_c.most_common(top)],
            "inclusive": [[f, pct(c)] for f, c in incl.most_common(top + 10)]}


# --- main -------------------------------------------------------------------------------

def join_throughput(ctx: Ctx, workload: str, systems: list[str], guarantees: list[str], results: dict[str, Any],
                    save: Any) -> None:
    """j1 over its own two topics: ``--join-keys`` customers, ``--records`` orders; every
    (system, guarantee) ``--repeat`` times, in rounds, as the other workloads' live runs."""
    log(f"generating {ctx.args.join_keys:,} customers x {JOIN_VERSIONS} versions and {ctx.args.records:,} orders")
    data = generate_join(ctx.args.records, ctx.args.join_keys)
    customers, orders = f"bench-{ctx.run_id}-customers", f"bench-{ctx.run_id}-orders"
    create_topics(ctx.admin, [customers, orders])
    t = time.monotonic()
    produce_join(ctx.bootstrap, customers, orders, data)
    n_customers, n_orders = end_offsets(ctx.bootstrap, customers), end_offsets(ctx.bootstrap, orders)
    log(f"backlog: {n_customers:,} customer updates in {customers}, {n_orders:,} orders in {orders} "
        f"({time.monotonic() - t:.1f}s)")
    results.setdefault("join_data", {})[workload] = {
        "customer_updates": n_customers, "orders": n_orders, "customers": ctx.args.join_keys,
        "deletes": sum(1 for _, v, _ in data.customers if v is None)}
    expected = join_reference(data)
    del data
    for rnd in range(ctx.args.repeat):
        ctx.round = rnd
        for g in guarantees:
            for s in systems:
                log(f"throughput {workload} {g} {s}{f' (round {rnd + 1})' if ctx.args.repeat > 1 else ''} ...")
                r = {**throughput_run(ctx, s, workload, g, orders, n_customers + n_orders, expected,
                                      table_topic=customers), "round": rnd}
                results["throughput"].append(r)
                save()
                log(f"  -> {r.get('records_per_s')} rec/s, cpu {r.get('cpu_s_per_million')} s/M, "
                    f"rss {r.get('peak_rss_mb')} MB, check {'ok' if r['check']['ok'] else r['check']} [{r['status']}]")
    ctx.round = 0


def machine() -> dict[str, Any]:
    with open("/proc/meminfo") as f:
        mem = next((int(line.split()[1]) for line in f if line.startswith("MemTotal")), 0)
    with open("/proc/cpuinfo") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False).stderr.splitlines()
    quix = subprocess.run([QUIX_PY, "-c", "import quixstreams; print(quixstreams.__version__)"], capture_output=True,
                          text=True, check=False).stdout.strip() if Path(QUIX_PY).exists() else None
    pom = (FLINK_DIR / "pom.xml").read_text()
    flink = "{} (Kafka connector {})".format(*(re.search(f"<{t}>(.*?)</{t}>", pom).group(1)  # type: ignore[union-attr]
                                              for t in ("flink.version", "flink.kafka.version")))
    pyflink = subprocess.run([PYFLINK_PY, "-c", "import pyflink.version; print(pyflink.version.__version__)"],
                             capture_output=True, text=True, check=False).stdout.strip() if Path(PYFLINK_PY).exists() else None
    import confluent_kafka
    return {"cores": os.cpu_count(), "memory_gib": round(mem / 2**20, 1), "cpu": cpu,
            "python": platform.python_version(), "java": java[0] if java else None, "kafka": "4.1.1 (KRaft, same machine)",
            "confluent_kafka": confluent_kafka.__version__, "quixstreams": quix, "flink": flink, "pyflink": pyflink,
            "kernel": platform.release()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000, help="input records (j1: orders)")
    ap.add_argument("--keys", type=int, default=KEYS,
                    help="W1-W4: distinct keys of the backlog (the latency phase keeps 10,000); few keys give "
                         "a small smoke run keyed updates and merging sessions")
    ap.add_argument("--join-keys", type=int, default=JOIN_KEYS,
                    help=f"j1: customers in the table, each updated {JOIN_VERSIONS} times")
    ap.add_argument("--workloads", default="w1,w2,w3,w4")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--guarantees", default=",".join(GUARANTEES))
    ap.add_argument("--phases", default="throughput,latency",
                    help="comma-separated: throughput, latency, replay (fw replay on Spark over the throughput "
                         "phase's input topic)")
    ap.add_argument("--latency-seconds", type=float, default=20)
    ap.add_argument("--latency-warmup", type=float, default=8)
    ap.add_argument("--latency-drain", type=float, default=3, help="seconds to wait for the last outputs")
    ap.add_argument("--latency-rate", type=int, default=None, help="fixed input rate (default: half our max)")
    ap.add_argument("--commit-ms", type=int, default=1000)
    ap.add_argument("--ks-threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--run-timeout", type=float, default=300)
    ap.add_argument("--replay-masters", default="local[1],local[2]",
                    help="replay phase: the Spark masters to replay each workload on")
    ap.add_argument("--replay-readers", default="spark,librdkafka",
                    help="replay phase: fw replay --reader values to run each master with")
    ap.add_argument("--replay-timeout", type=float, default=3600, help="replay phase: seconds per spark-submit")
    ap.add_argument("--replay-profile", action="store_true",
                    help="replay phase: replay each workload once more on the first master with the first reader under py-spy "
                         "(--subprocesses: the Python workers and the driver), top functions into the results")
    ap.add_argument("--profile", action="store_true", help="also profile the framework (1 process) with py-spy")
    ap.add_argument("--bootstrap", default=Config.load().kafka.bootstrap_servers)
    ap.add_argument("--repeat", type=int, default=1,
                    help="throughput and replay phases: run every case this many times, a workload's live runs "
                         "and replays alternating round after round; the report takes the run with the median "
                         "records/s and shows the others")
    ap.add_argument("--label", default="", help="written into the results (e.g. smoke)")
    ap.add_argument("--keep-topics", action="store_true")
    ap.add_argument("--strict", action="store_true",
                    help="exit with status 1 when a throughput run did not finish or its output did not match the "
                         "reference (a smoke test: benchmarks/run --smoke-flink)")
    args = ap.parse_args()

    workloads = [w for w in args.workloads.split(",") if w]
    systems = [s for s in args.systems.split(",") if s]
    guarantees = [g for g in args.guarantees.split(",") if g]
    for w in workloads:
        assert w in WORKLOADS, f"unknown workload {w}; known: {list(WORKLOADS)}"
    for s in systems:
        assert s in SYSTEMS, f"unknown system {s}; known: {SYSTEMS}"
    masters = [m for m in args.replay_masters.split(",") if m] if "replay" in args.phases.split(",") else []
    for m in masters:
        assert master_cores(m), f"--replay-masters: {m} is not local, local[N] or local[*]"
    readers = [r for r in args.replay_readers.split(",") if r]
    for r in readers:
        assert r in ("spark", "librdkafka"), f"--replay-readers: {r} is not spark or librdkafka"
    run_id = time.strftime("%Y%m%d-%H%M%S")
    logs = RESULTS / "logs" / run_id
    logs.mkdir(parents=True, exist_ok=True)
    ctx = Ctx(args, args.bootstrap, run_id.replace("-", ""), AdminClient({"bootstrap.servers": args.bootstrap}), logs,
              os.cpu_count() or 1)
    results: dict[str, Any] = {
        "run": run_id, "label": args.label, "machine": machine(), "loadavg_at_start": os.getloadavg(),
        "config": {"records": args.records, "keys": args.keys, "partitions": PARTITIONS, "commit_interval_ms": args.commit_ms,
                   "window_ms": WINDOW_MS, "watermark_bound_ms": BOUND_MS, "session_gap_ms": GAP_MS,
                   "kstreams_threads": args.ks_threads, "fw_processes_n": ctx.cores,
                   "latency_seconds": args.latency_seconds, "latency_warmup_s": args.latency_warmup,
                   "replay_masters": masters, "replay_readers": readers, "repeat": args.repeat,
                   **({"join_keys": args.join_keys, "join_versions": JOIN_VERSIONS,
                       "join_delete_every": JOIN_DELETE_EVERY,
                       "kstreams_join_grace_ms": int(os.environ.get("BENCH_JOIN_GRACE_MS", BOUND_MS))} if set(workloads) & set(JOIN_WORKLOADS) else {})},
        "systems": {s: SYSTEM_NAMES[s] for s in systems}, "workloads": {w: WORKLOADS[w] for w in workloads},
        "throughput": [], "latency": [], "profile": {},
    }
    if "replay" in args.phases.split(","):
        import pyspark  # the installed pyspark runs the replays

        results["machine"]["pyspark"] = pyspark.__version__
        results["replay"] = []
        results["replay_profile"] = {}
    out_file = RESULTS / f"{run_id}{'-' + args.label if args.label else ''}.json"

    def save() -> None:
        out_file.write_text(json.dumps(results, indent=1) + "\n")

    phases = args.phases.split(",")
    best: dict[tuple[str, str], float] = {}
    joins = [w for w in workloads if w in JOIN_WORKLOADS]
    if joins and ("latency" in phases or "replay" in phases or args.profile):
        log(f"{','.join(joins)}: measured in the throughput phase only (no latency, replay or profile runs)")
    workloads = [w for w in workloads if w not in JOIN_WORKLOADS]
    try:
        if "throughput" in phases:
            join_systems = [s for s in systems if s not in FLINK_SYSTEMS]  # no Flink app for j1
            if joins and join_systems != systems:
                log(f"{','.join(joins)}: without {', '.join(s for s in systems if s in FLINK_SYSTEMS)} (no app for it)")
            for w in joins:
                join_throughput(ctx, w, join_systems, guarantees, results, save)
        if workloads and ("throughput" in phases or "replay" in phases or args.profile):
            log(f"generating {args.records:,} records")
            events = generate(args.records, n_keys=args.keys)
            input_topic = f"bench-{ctx.run_id}-input"
            create_topics(ctx.admin, [input_topic])
            t = time.monotonic()
            produce_backlog(ctx.bootstrap, input_topic, events)
            total = end_offsets(ctx.bootstrap, input_topic)
            log(f"backlog: {total:,} records in {input_topic} ({time.monotonic() - t:.1f}s)")
            for w in workloads:
                expected = reference(w, events)
                for rnd in range(args.repeat):  # live and replay runs alternate, round after round
                    ctx.round = rnd
                    if args.repeat > 1:
                        log(f"{w}: round {rnd + 1} of {args.repeat}")
                    for g in guarantees if "throughput" in phases else ():
                        for s in systems:
                            log(f"throughput {w} {g} {s} ...")
                            r = {**throughput_run(ctx, s, w, g, input_topic, total, expected), "round": rnd}
                            results["throughput"].append(r)
                            save()
                            log(f"  -> {r.get('records_per_s')} rec/s, cpu {r.get('cpu_s_per_million')} s/M, "
                                f"rss {r.get('peak_rss_mb')} MB, check {'ok' if r['check']['ok'] else r['check']} "
                                f"[{r['status']}]")
                            if s.startswith("fw") and r.get("records_per_s"):
                                best[(w, g)] = max(best.get((w, g), 0), r["records_per_s"])
                    for reader in readers if "replay" in phases else ():
                        for m in masters:
                            log(f"replay {w} on {m}, reader {reader} ...")
                            r = {**replay_run(ctx, w, m, input_topic, total, expected, reader=reader), "round": rnd}
                            results["replay"].append(r)
                            save()
                            log(f"  -> job {r.get('job_records_per_s')} rec/s in {r.get('job_s')} s, "
                                f"wall {r['wall_s']} s, cpu {r.get('cpu_s_per_million')} s/M, "
                                f"check {'ok' if r['check']['ok'] else r['check']} [{r['status']}]")
                for g in guarantees if args.profile else ():
                    log(f"profile {w} {g} (fw-1 under py-spy) ...")
                    r = throughput_run(ctx, "fw-1", w, g, input_topic, total, expected, profile=True)
                    results["profile"][f"{w}/{g}"] = {"records_per_s_under_profiler": r.get("records_per_s"),
                                                      **summarize_profile(Path(r["profile_file"]))}
                    save()
                if args.replay_profile and masters:
                    log(f"replay {w} on {masters[0]}, reader {readers[0]}, under py-spy ...")
                    r = replay_run(ctx, w, masters[0], input_topic, total, expected, profile=True, reader=readers[0])
                    results["replay_profile"][f"{w}/{masters[0]}/{readers[0]}"] = {
                        "job_records_per_s_under_profiler": r.get("job_records_per_s"),
                        "cpu_s_by_part": r.get("cpu_s_by_part"), **r.get("profile", {})}
                    save()
            del events
        if "latency" in phases:
            for w in workloads:
                for g in guarantees:
                    rate = args.latency_rate or int(best.get((w, g), 0) / 2) or 2000
                    for s in systems:
                        log(f"latency {w} {g} {s} at {rate:,} records/s ...")
                        r = latency_run(ctx, s, w, g, rate)
                        results["latency"].append(r)
                        save()
                        log(f"  -> p50 {r['p50_ms']} p99 {r['p99_ms']} max {r['max_ms']} ms over {r['outputs']} outputs "
                            f"[{r['status']}]")
    finally:
        results["loadavg_at_end"] = os.getloadavg()
        save()
        if not args.keep_topics:
            md = ctx.admin.list_topics(timeout=10)
            mine = [t for t in md.topics if ctx.run_id in t]
            if mine:
                ctx.admin.delete_topics(mine, operation_timeout=30)
    log(f"results: {out_file}")
    print(out_file)
    failed = [f"{r['system']} {r['workload']} {r['guarantee']}" for r in results["throughput"] if not r["check"]["ok"]]
    if args.strict and failed:
        log(f"--strict: {len(failed)} run(s) failed or did not match the reference: {', '.join(failed)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
