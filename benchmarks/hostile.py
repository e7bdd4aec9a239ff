"""Memory and completeness of one service under hostile load (P37), on a real broker.

Three phases, each a fresh ``fw run`` process of ``benchmarks/apps/hostile_app.py`` (a step
that sleeps per record, then one output per record and a count per key) whose memory is
sampled from ``/proc/<pid>/status`` (VmRSS, VmHWM) every second:

- ``flood``: ``--flood`` records (1,000,000) produced at once, much faster than the step takes
  them: RSS must plateau while the service works through the backlog; every record's output
  exactly once and every key's final count are audited.
- ``txn``: an upstream transactional producer writes to partition 0 and neither commits nor
  aborts for ``--open-txn-seconds`` (180); plain records go to every partition before and
  during the hold. The read_committed service stops at that transaction on partition 0 (its
  committed offset stays there), the other partitions flow, the stall warning
  (``processing.stall_warning_ms``) speaks when nothing else is left; then the transaction
  commits and everything is processed, exactly once.
- ``large``: ``--large`` records of ``--large-mb`` MB (10) with the producer's
  ``message.max.bytes`` raised, through to the output.

    .venv/bin/python benchmarks/hostile.py                        # all phases, the issue's sizes
    .venv/bin/python benchmarks/hostile.py --phases flood --flood 100000 --step-us 50

The broker is the configuration's (``FW_BOOTSTRAP_SERVERS``, else the local broker's address); its
``transaction.max.timeout.ms`` must allow the hold (the local broker's is 900000). Results go
to ``benchmarks/results/<timestamp>-hostile.json`` and are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from framework.config import Config
from framework.engine.partitioner import partition_for

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PARTITIONS = 4
KEYS = 1000
MB = 1024 * 1024
KEYED: list[list[bytes]] = [[] for _ in range(PARTITIONS)]  # KEYS keys, by the partition they go to
for _k in range(KEYS):
    KEYED[partition_for(f"k{_k}".encode(), PARTITIONS)].append(f"k{_k}".encode())


def log(msg: str) -> None:
    print(f"[hostile {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# -- the service and its memory -------------------------------------------------------------

def memory_kb(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in kB; (0, 0) once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if line.startswith(("VmRSS", "VmHWM")))
    except OSError:
        return 0, 0
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


class Service:
    """One ``fw run`` of the slow pipeline, its log in a file, its memory sampled every second
    together with the group's committed offsets on the input."""

    def __init__(self, bootstrap: str, name: str, workdir: Path, env: dict[str, str]) -> None:
        self.bootstrap, self.name = bootstrap, name
        self.input, self.output = f"{name}-in", f"{name}-out"
        self.log_path = workdir / f"{name}.log"
        full = {**os.environ, "PYTHONPATH": str(ROOT), "FW_BOOTSTRAP_SERVERS": bootstrap,
                "FW_STATE_DIR": str(workdir / f"state-{name}"), "FW_OBSERVE__PORT": "0",
                "BENCH_HX_GROUP": name, "BENCH_HX_INPUT": self.input, "BENCH_HX_OUTPUT": self.output, **env}
        with open(self.log_path, "wb") as out:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "framework.cli", "run", "benchmarks.apps.hostile_app:pipeline"],
                stdout=out, stderr=subprocess.STDOUT, env=full, cwd=ROOT)
        self.samples: list[dict[str, Any]] = []
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._offsets = Consumer({"bootstrap.servers": bootstrap, "group.id": name, "enable.auto.commit": False})
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def committed(self) -> dict[int, int]:
        """The group's committed offset per input partition (0 where none)."""
        try:
            parts = self._offsets.committed([TopicPartition(self.input, p) for p in range(PARTITIONS)], timeout=5)
        except Exception:  # noqa: BLE001 - the coordinator may be loading; the next sample asks again
            return {}
        return {tp.partition: max(tp.offset, 0) for tp in parts}

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            rss, hwm = memory_kb(self.proc.pid)
            committed = self.committed()
            self.samples.append({"t": round(time.monotonic() - self.started, 1), "rss_mb": round(rss / 1024, 1),
                                 "hwm_mb": round(hwm / 1024, 1), "committed": committed,
                                 "processed": sum(committed.values())})

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> dict[str, Any]:
        """SIGTERM; the memory figures and the exit status."""
        rss, hwm = memory_kb(self.proc.pid)
        self._stop.set()
        self._thread.join()
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(120)
        self._offsets.close()
        peak = max([hwm] + [int(s["hwm_mb"] * 1024) for s in self.samples]) / 1024
        return {"exit_code": code, "peak_rss_mb": round(peak, 1), "rss_at_end_mb": round(rss / 1024, 1)}


def wait_for(condition: Any, timeout_s: float, what: str, svc: Service) -> float:
    """Poll ``condition`` (an observation of the broker) until true; the seconds it took."""
    start = time.monotonic()
    while not condition():
        if svc.proc.poll() is not None:
            raise SystemExit(f"the service exited while waiting for {what}:\n{svc.log_text()[-3000:]}")
        if time.monotonic() - start > timeout_s:
            raise SystemExit(f"timed out after {timeout_s:.0f}s waiting for {what}:\n{svc.log_text()[-3000:]}")
        time.sleep(1.0)
    return time.monotonic() - start


# -- producing and auditing ----------------------------------------------------------------------

def create_topic(bootstrap: str, name: str, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1, config=config or {})])[name].result()


def key_of(n: int) -> bytes:
    """Record ``n``'s key: the Java client's partitioner puts it in partition ``n % 4``, so a
    record sent to a chosen partition has a key of that partition (counts are per key)."""
    return KEYED[n % PARTITIONS][(n // PARTITIONS) % len(KEYED[n % PARTITIONS])]


def produce(producer: Producer, topic: str, numbers: range) -> None:
    """``{"i": n}`` keyed by ``key_of(n)``, in the partition of that key."""
    for n in numbers:
        value = json.dumps({"i": n}).encode()
        while True:
            try:
                producer.produce(topic, value, key_of(n), n % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.1)
        if n % 10_000 == 0:
            producer.poll(0)


def read_all(bootstrap: str, topic: str) -> list[Any]:
    """Every committed record of ``topic``: ``(key, value)``."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"hostile-read-{uuid.uuid4().hex[:8]}",
                  "isolation.level": "read_committed", "enable.auto.commit": False, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    out: list[Any] = []
    eof: set[int] = set()
    while len(eof) < PARTITIONS:
        for m in c.consume(10_000, 1.0):
            err = m.error()
            if err is None:
                out.append((m.key(), m.value()))
                eof.discard(m.partition())
            elif err.code() == KafkaError._PARTITION_EOF:
                eof.add(cast(int, m.partition()))  # an end-of-partition event names its partition
    c.close()
    return out


def audit(bootstrap: str, svc: Service, expected: Iterable[int]) -> dict[str, Any]:
    """Each input's output exactly once, and each key's last count = its inputs."""
    seen = Counter(json.loads(v)["i"] for _, v in read_all(bootstrap, svc.output))
    want = Counter(expected)
    counts: dict[bytes, int] = {}
    for k, v in read_all(bootstrap, f"{svc.output}-counts"):
        counts[k] = max(counts.get(k, 0), json.loads(v))
    want_counts = Counter(key_of(n) for n in want.elements())
    return {"outputs": sum(seen.values()), "missing": len(want - seen), "duplicates": sum((seen - want).values()),
            "counts_match": counts == dict(want_counts), "ok": seen == want and counts == dict(want_counts)}


def summary(samples: list[dict[str, Any]], points: int = 24) -> list[dict[str, Any]]:
    """At most ``points`` samples, evenly spaced, for the report."""
    step = max(1, len(samples) // points)
    return [{k: v for k, v in s.items() if k != "committed"} for s in samples[::step]]


def plateau(samples: list[dict[str, Any]]) -> dict[str, float]:
    """RSS over the first and the second half of the work: equal maxima mean a plateau."""
    rss = [s["rss_mb"] for s in samples if s["rss_mb"]]
    half = len(rss) // 2
    return {"max_rss_first_half_mb": max(rss[:half] or [0]), "max_rss_second_half_mb": max(rss[half:] or [0])}


# -- the phases -----------------------------------------------------------------------------------

def flood(args: argparse.Namespace, bootstrap: str, workdir: Path) -> dict[str, Any]:
    name = f"hostile-flood-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, f"{name}-in")
    svc = Service(bootstrap, name, workdir, {"BENCH_HX_STEP_US": str(args.step_us)})
    log(f"flood: producing {args.flood:,} records at once into {name}-in (the step sleeps {args.step_us} µs each)")
    t0 = time.monotonic()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4",
                         "enable.idempotence": True})
    produce(producer, svc.input, range(args.flood))
    producer.flush(120)
    produced_s = time.monotonic() - t0
    log(f"flood: produced in {produced_s:.1f} s; the service works through them")
    took = wait_for(lambda: sum(svc.committed().values()) >= args.flood, args.timeout, "the flood processed", svc)
    figures = svc.stop()
    result = {"records": args.flood, "step_us": args.step_us, "produce_s": round(produced_s, 1),
              "processed_s": round(produced_s + took, 1),
              "records_per_s": round(args.flood / (produced_s + took)), **figures, **plateau(svc.samples),
              "audit": audit(bootstrap, svc, range(args.flood)), "samples": summary(svc.samples)}
    log(f"flood: {json.dumps({k: v for k, v in result.items() if k != 'samples'})}")
    return result


def txn(args: argparse.Namespace, bootstrap: str, workdir: Path) -> dict[str, Any]:
    name = f"hostile-txn-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, f"{name}-in")
    svc = Service(bootstrap, name, workdir, {"BENCH_HX_STEP_US": "0",
                                             "FW_PROCESSING__STALL_WARNING_MS": str(args.stall_warning_ms)})
    held, burst = args.txn_records, args.burst
    upstream = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{name}-upstream",
                         "transaction.timeout.ms": min(900_000, int(args.open_txn_seconds * 1000) + 120_000)})
    upstream.init_transactions(30)
    upstream.begin_transaction()
    numbers = [range(0, held * PARTITIONS, PARTITIONS),  # n % 4 == 0: all in partition 0
               range(held * PARTITIONS, held * PARTITIONS + burst),
               range(held * PARTITIONS + burst, held * PARTITIONS + 2 * burst)]
    produce(upstream, svc.input, numbers[0])
    upstream.flush(60)
    opened = time.monotonic()
    log(f"txn: a transaction holds {held:,} records on {svc.input}[0], open for {args.open_txn_seconds:.0f} s")
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    produce(plain, svc.input, numbers[1])  # to every partition, behind the transaction on 0
    plain.flush(60)
    wait_for(lambda: all(svc.committed().get(p, 0) > 0 for p in range(1, PARTITIONS)), 120,
             "the other partitions to flow", svc)
    at_half = max(0.0, args.open_txn_seconds / 2 - (time.monotonic() - opened))
    time.sleep(at_half)  # the hold is the scenario: half of it, then more records everywhere
    produce(plain, svc.input, numbers[2])
    plain.flush(60)
    during = svc.committed()
    time.sleep(max(0.0, args.open_txn_seconds - (time.monotonic() - opened)))
    before_commit = svc.committed()
    warnings = [line for line in svc.log_text().splitlines() if "no input record for" in line]
    upstream.commit_transaction(60)
    committed_at = time.monotonic()
    log(f"txn: committed after {committed_at - opened:.0f} s; {len(warnings)} stall warnings so far")
    total = held + 2 * burst
    drained = wait_for(lambda: sum(svc.committed().values()) >= total, args.timeout,
                       "everything processed after the commit", svc)
    figures = svc.stop()
    result = {"open_s": round(committed_at - opened, 1), "held_records": held, "plain_records": 2 * burst,
              "committed_mid_hold": during, "committed_before_commit": before_commit,
              "partition_0_held": before_commit.get(0, 0) == 0,
              "stall_warnings": len(warnings), "first_warning": warnings[0] if warnings else None,
              "drained_after_commit_s": round(drained, 1), **figures,
              "audit": audit(bootstrap, svc, [n for r in numbers for n in r]), "samples": summary(svc.samples)}
    log(f"txn: {json.dumps({k: v for k, v in result.items() if k != 'samples'})}")
    return result


def large(args: argparse.Namespace, bootstrap: str, workdir: Path) -> dict[str, Any]:
    name = f"hostile-large-{uuid.uuid4().hex[:6]}"
    limit = str((args.large_mb + 6) * MB)
    for topic in (f"{name}-in", f"{name}-out", f"{name}-out-counts", f"{name}-dead-letter"):
        create_topic(bootstrap, topic, {"max.message.bytes": limit})
    svc = Service(bootstrap, name, workdir, {"BENCH_HX_STEP_US": "0", "FW_KAFKA_PRODUCER__MESSAGE_MAX_BYTES": limit})
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": int(limit), "linger.ms": 5})
    pad = "x" * (args.large_mb * MB)
    t0 = time.monotonic()
    for n in range(args.large):
        while True:
            try:
                producer.produce(svc.input, json.dumps({"i": n, "pad": pad}).encode(), f"k{n % KEYS}".encode())
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(300)
    took = wait_for(lambda: sum(svc.committed().values()) >= args.large, args.timeout, "the large records", svc)
    figures = svc.stop()
    outputs = read_all(bootstrap, svc.output)
    sizes = sorted({len(v) for _, v in outputs})
    result = {"records": args.large, "mb_each": args.large_mb, "processed_s": round(time.monotonic() - t0, 1),
              "wait_s": round(took, 1), **figures, "outputs": len(outputs), "output_sizes": sizes[:3],
              "ok": sorted(json.loads(v)["i"] for _, v in outputs) == list(range(args.large)),
              "samples": summary(svc.samples)}
    log(f"large: {json.dumps({k: v for k, v in result.items() if k != 'samples'})}")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phases", default="flood,txn,large", help="comma-separated: flood, txn, large")
    ap.add_argument("--flood", type=int, default=1_000_000, help="records produced at once (flood)")
    ap.add_argument("--step-us", type=int, default=100, help="microseconds the slow step sleeps per record")
    ap.add_argument("--open-txn-seconds", type=float, default=180.0, help="how long the upstream transaction stays open")
    ap.add_argument("--txn-records", type=int, default=10_000, help="records in the open transaction (partition 0)")
    ap.add_argument("--burst", type=int, default=40_000, help="plain records to every partition, twice during the hold")
    ap.add_argument("--stall-warning-ms", type=int, default=15_000, help="the service's processing.stall_warning_ms")
    ap.add_argument("--large", type=int, default=50, help="large records (large)")
    ap.add_argument("--large-mb", type=int, default=10, help="size of each large record, MB")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds a phase may take to drain")
    args = ap.parse_args()
    bootstrap = Config.load().kafka.bootstrap_servers
    phases = {"flood": flood, "txn": txn, "large": large}
    results: dict[str, Any] = {"command": " ".join(sys.argv), "bootstrap": bootstrap,
                               "cpus": os.cpu_count(), "python": sys.version.split()[0]}
    with tempfile.TemporaryDirectory(prefix="fw-hostile-") as tmp:
        for phase in args.phases.split(","):
            results[phase] = phases[phase](args, bootstrap, Path(tmp))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{time.strftime('%Y%m%d-%H%M%S')}-hostile.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    log(f"results in {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
