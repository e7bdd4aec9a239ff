"""Async steps: a step that calls a local HTTP service of fixed latency (docs/async.md). Not
part of the test suite.

    .venv/bin/python benchmarks/async_calls.py                  # 10 ms, capacity 100 (about 2 minutes)
    .venv/bin/python benchmarks/async_calls.py --latency-ms 10 --capacity 100 --records 50000 --label x

One member (``fw run``, exactly-once, 1 s checkpoints) over a one-partition input, so one task:
the ideal rate is ``capacity / latency`` (10,000/s at 100 and 10 ms). The service
(``benchmarks/apps/latency_service.py``, a process of its own: a minimal asyncio HTTP server,
or with ``--service aiohttp`` an aiohttp one) answers every call after exactly ``--latency-ms``;
the step (``benchmarks/apps/async_app.py``) calls it with aiohttp.

- **backlog**: ``--records`` produced first, then the member starts; records/s over the middle
  80% of the outputs (from the 10th to the 90th percentile of the times they became visible to a
  read_committed reader), and the member's and the service's CPU seconds per 1,000 records
  over that span;
- **latency**: ``--rate-share`` (0.5) of that rate, produced at a fixed rate for
  ``--latency-seconds``; p50/p95/p99/max from each input's timestamp (its produce time) to its
  output becoming visible, and the member's peak RSS;
- **sync**: the same calls from a plain ``map`` (one at a time, one kept-alive connection),
  ``--sync-records`` of a backlog: records/s, for comparison.

Every output is checked: each input exactly once, its price right. Writes
``benchmarks/results/<timestamp>-async-calls.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer, TopicPartition

from benchmarks.suite import RESULTS, log, machine
from framework.broker import LocalBroker
from framework.broker.registry import free_port
from framework.testing.kafka import ServiceRun

BUILDER = "benchmarks.apps.async_app:build_pipeline"


class Outputs(threading.Thread):
    """A read_committed reader of the output topic: when each output became visible."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.seen: list[tuple[float, int, int, int]] = []  # (visible at, n, price, input timestamp ms)
        self.stopping = False
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex}",
                           "isolation.level": "read_committed", "enable.auto.commit": False,
                           "fetch.wait.max.ms": 5})
        self.c.assign([TopicPartition(topic, 0, 0)])

    def run(self) -> None:
        while not self.stopping:
            for msg in self.c.consume(10_000, 0.05):
                value = msg.value()
                if msg.error() is None and value is not None:
                    v = json.loads(value)
                    self.seen.append((time.time(), v["n"], v["price"], msg.timestamp()[1]))
        self.c.close()

    def wait_for(self, n: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.seen) < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(self.seen)} of {n} outputs after {timeout_s} s")
            time.sleep(0.05)


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kb / 1024


def produce(bootstrap: str, topic: str, numbers: range, rate: float | None = None) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    started = time.monotonic()
    for i, n in enumerate(numbers):
        if rate is not None:
            wait = started + i / rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        while True:
            try:
                p.produce(topic, key=str(n).encode(), value=json.dumps({"n": n}).encode(), partition=0,
                          timestamp=int(time.time() * 1000))
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0


def check(seen: list[tuple[float, int, int, int]], numbers: range) -> None:
    ns = sorted(n for _, n, _, _ in seen)
    assert ns == list(numbers), f"outputs are not each input once: {len(ns)} outputs for {len(numbers)} inputs"
    assert all(price == 10 * n for _, n, price, _ in seen), "a wrong price"


def phase(bootstrap: str, workdir: Path, mode: str, capacity: int, url: str, numbers: range,
          rate: float | None, label: str, service_pid: int) -> dict[str, Any]:
    """One member over ``numbers``: a backlog (``rate`` None) or a feed at ``rate`` records/s."""
    suffix = f"-{label}-{uuid.uuid4().hex[:6]}"
    run = ServiceRun(BUILDER, bootstrap, workdir / suffix.strip("-"), suffix=suffix, root=ROOT, env={
        "BENCH_SERVICE_URL": url, "BENCH_MODE": mode, "BENCH_CAPACITY": str(capacity),
        "FW_PROCESSING__CHECKPOINT_INTERVAL_MS": "1000", "FW_OBSERVE__PORT": "0"})
    run.create_topics()
    topic_in, topic_out = f"bench-async-in{suffix}", f"bench-async-out{suffix}"
    outputs = Outputs(bootstrap, topic_out)
    outputs.start()
    if rate is None:
        produce(bootstrap, topic_in, numbers)
    run.start()
    assert run.proc is not None
    pid, peak = run.proc.pid, 0.0
    try:
        if rate is not None:
            feeder = threading.Thread(target=produce, args=(bootstrap, topic_in, numbers, rate))
            feeder.start()
        cpu_marks: list[tuple[int, float, float]] = []  # outputs, member and service CPU s
        deadline = time.monotonic() + 900
        while len(outputs.seen) < len(numbers):
            if time.monotonic() > deadline or run.proc.poll() is not None:
                raise RuntimeError(f"{label}: {len(outputs.seen)} of {len(numbers)} outputs\n{run.log_tail()}")
            cpu_marks.append((len(outputs.seen), cpu_s(pid), cpu_s(service_pid)))
            peak = max(peak, rss_mb(pid))
            time.sleep(0.2)
        if rate is not None:
            feeder.join()
    finally:
        outputs.stopping = True
        run.stop()
    outputs.join(10)
    seen = outputs.seen
    check(seen, numbers)
    times = sorted(t for t, _, _, _ in seen)
    lo, hi = times[len(times) // 10], times[len(times) * 9 // 10]
    rate_mid = (len(times) * 8 // 10) / max(hi - lo, 1e-6)
    result: dict[str, Any] = {"mode": mode, "capacity": capacity if mode == "async" else 1, "records": len(numbers),
                              "records_per_s": round(rate_mid), "peak_rss_mb": round(peak, 1)}
    n10, n90 = len(numbers) // 10, len(numbers) * 9 // 10
    marks = [m for m in cpu_marks if n10 <= m[0] <= n90]
    if len(marks) >= 2:
        (n0, member0, service0), (n1, member1, service1) = marks[0], marks[-1]
        result["cpu_s_per_1000"] = round((member1 - member0) / max(n1 - n0, 1) * 1000, 3)
        result["service_cpu_s_per_1000"] = round((service1 - service0) / max(n1 - n0, 1) * 1000, 3)
    if rate is not None:
        lat = sorted(t * 1000 - ts for t, _, _, ts in seen)
        result.update({"rate": rate, "latency_ms": {q: round(lat[min(int(len(lat) * f), len(lat) - 1)], 1) for q, f in
                                                     (("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("max", 1.0))}})
    log(f"{label}: {result}")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--latency-ms", type=float, default=10.0)
    ap.add_argument("--capacity", type=int, default=100)
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--latency-seconds", type=float, default=20.0)
    ap.add_argument("--rate-share", type=float, default=0.5)
    ap.add_argument("--sync-records", type=int, default=500)
    ap.add_argument("--label", default="async-calls")
    ap.add_argument("--service", choices=("asyncio", "aiohttp"), default="asyncio",
                    help="the HTTP service called (benchmarks/apps/latency_service.py)")
    args = ap.parse_args()

    bootstrap = os.environ.get("FW_BOOTSTRAP_SERVERS") or LocalBroker().start().bootstrap
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    workdir = RESULTS / "logs" / f"{stamp}-{args.label}"
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port(start=29650, count=100)
    url = f"http://127.0.0.1:{port}"
    service = subprocess.Popen([sys.executable, "-m", "benchmarks.apps.latency_service", str(port),
                                str(args.latency_ms), args.service], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(f"{url}/price?n=1", timeout=2).read()
                break
            except OSError:
                time.sleep(0.1)
        ideal = args.capacity / (args.latency_ms / 1000)
        backlog = phase(bootstrap, workdir, "async", args.capacity, url, range(args.records), None, "backlog",
                        service.pid)
        rate = round(backlog["records_per_s"] * args.rate_share)
        n = int(rate * args.latency_seconds)
        fixed = phase(bootstrap, workdir, "async", args.capacity, url, range(n), rate, "latency", service.pid)
        sync = phase(bootstrap, workdir, "sync", 1, url, range(args.sync_records), None, "sync", service.pid)
    finally:
        service.terminate()
        service.wait(30)
    doc = {"run": stamp, "label": args.label, "machine": machine(), "load_before": os.getloadavg(),
           "config": {"latency_ms": args.latency_ms, "capacity": args.capacity, "partitions": 1,
                      "service": args.service,
                      "checkpoint_interval_ms": 1000, "guarantee": "exactly_once"},
           "ideal_records_per_s": round(ideal), "backlog": backlog, "latency": fixed, "sync": sync,
           "share_of_ideal": round(backlog["records_per_s"] / ideal, 3)}
    out = RESULTS / f"{stamp}-{args.label}.json"
    out.write_text(json.dumps(doc, indent=2) + "\n")
    log(f"ideal {ideal:,.0f}/s; async {backlog['records_per_s']:,}/s ({doc['share_of_ideal']:.0%}); "
        f"sync {sync['records_per_s']:,}/s; p99 {fixed['latency_ms']['p99']} ms at {rate:,}/s -> {out}")


if __name__ == "__main__":
    main()
