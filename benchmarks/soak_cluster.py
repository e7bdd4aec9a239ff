"""Soak: two exactly-once members on a three-node cluster while its nodes are SIGKILLed, one
at a time, every ``--every`` seconds for ``--minutes``.

Starts a three-node KRaft cluster of its own (``LocalCluster``: every node broker and
controller, RF 3, min ISR 2, on free ports in a temporary directory), two members of the
even/odd test service (the default 45 s session, 200 ms checkpoints) and a producer that
keeps writing numbers at ``--rate`` records/s. Every ``--every`` seconds it SIGKILLs a node
(in turn: the one leading the input's partition 0, the one coordinating member 0's
transactions, the group's coordinator, then round again; the first of those that is not the
node killed last; ``--only`` one of them) and starts it again 5-20 s later (random,
``--seed``). Per fault it prints the node and what it led, how long it was down, when the
cluster fenced it (its metadata no longer lists the node: its leaders and coordinators are
elected elsewhere then), the longest pause in the outputs from the kill to the next fault (the
longest time between two checkpoints a member committed: its outputs become visible when one
commits) and the /health and /ready answers meanwhile. At the end: the pauses and how much
longer than the election they were, every output awaited, both members stopped, the
exactly-once audit (``even_odd_anomalies``), whether either member exited or restarted, and
the latency of the echo's outputs (``Latency``) in the calm before the first fault (in
windows of 30 s, but for its last 20 s, whose outputs wait out the first fault's pause) and
in each fault's window.

    .venv/bin/python benchmarks/soak_cluster.py                      # 10 minutes, a SIGKILL a minute
    .venv/bin/python benchmarks/soak_cluster.py --minutes 3 --every 45
    .venv/bin/python benchmarks/soak_cluster.py --only "group coordinator" --minutes 4 --every 40

Outside the test suite; its figures are in docs/operations.md ("A service while nodes fail
and restart").
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.soak_outage import KEYS, Feeder, _health
from framework.broker.cluster import LocalCluster
from framework.broker.local import free_ports
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from framework.observe.endpoint import StatusUnavailable, fetch_status
from tests.integration.harness import (
    EvenOddOutputs,
    ServiceProcess,
    Tail,
    even_odd_anomalies,
    service_env,
    wait_until,
)
from tests.integration.test_cluster_faults import _coordinator, _leader

TARGET = "tests.integration.pipelines:even_odd"
_SETTLE_S = 20.0  # the calm's last seconds, in no latency window (their outputs wait out the first fault)


class CommitWatch(threading.Thread):
    """The longest time between two checkpoints a member committed, over ``urls``, from
    ``since`` until ``stop``; each member's /status asked every 0.25 s."""

    def __init__(self, urls: list[str], since: float) -> None:
        super().__init__(daemon=True)
        self.last = {url: (self._completed(url), since) for url in urls}
        self.longest = 0.0
        self.halt = threading.Event()
        self.start()

    @staticmethod
    def _completed(url: str) -> int:
        try:
            return int(fetch_status(url, 2.0)["members"][0]["checkpoint"]["completed"])
        except (StatusUnavailable, KeyError, IndexError, TypeError, ValueError):
            return -1  # no answer: counts as no commit

    def run(self) -> None:
        while not self.halt.wait(0.25):
            for url, (count, _since) in self.last.items():
                now_count, at = self._completed(url), time.monotonic()
                if now_count > count:
                    self.last[url] = (now_count, at)
                self.longest = max(self.longest, at - self.last[url][1])

    def stop(self) -> float:
        self.halt.set()
        self.join()
        return self.longest


class Fenced(threading.Thread):
    """When the cluster fenced node ``node``, SIGKILLed at ``since``: the first time its
    metadata, asked every 0.1 s, no longer lists the node. Its partitions' leaders and the
    coordinators it hosted are elected elsewhere in the same step, so this is the election
    time a member's pause is compared with."""

    def __init__(self, bootstrap: str, node: int, since: float) -> None:
        super().__init__(daemon=True)
        self.admin, self.node, self.since = admin_client({"bootstrap.servers": bootstrap}), node, since
        self.after: float | None = None
        self.halt = threading.Event()
        self.start()

    def run(self) -> None:
        while self.after is None and not self.halt.wait(0.1):
            try:
                brokers = self.admin.list_topics(timeout=1.0).brokers
            except Exception:  # noqa: BLE001 - no answer now: asked again
                brokers = {}
            if brokers and self.node not in brokers:
                self.after = time.monotonic() - self.since

    def stop(self) -> float | None:
        self.halt.set()
        self.join()
        return self.after


class Latency(threading.Thread):
    """How long after its input was written each echo output became visible to a
    read_committed reader of its own: the output keeps its input's timestamp (the feeder's
    clock at produce), and this thread, doing nothing else, stamps each record as a drain of
    its reader returns it (a drain waits at most half a second for more)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.tail = Tail(bootstrap, topic)
        self.samples: list[tuple[float, float]] = []  # (input's time, seconds until visible)
        self.halt = threading.Event()
        self.start()

    def run(self) -> None:
        stamped = 0
        while not self.halt.is_set():
            self.tail.drain(0.2)
            now, records = time.time(), self.tail.records
            self.samples.extend((r.timestamp / 1000, now - r.timestamp / 1000) for r in records[stamped:])
            stamped = len(records)
            if not records:
                time.sleep(0.2)  # the topic not created yet

    def stop(self) -> None:
        self.halt.set()
        self.join()
        self.tail.close()

    def p99(self, start: float, end: float) -> str:
        """The 99th percentile and the most of the outputs whose inputs were written in
        [``start``, ``end``) (wall clock), in words."""
        got = sorted(lat for at, lat in self.samples if start <= at < end)
        if not got:
            return "no outputs"
        return f"p99 {got[min(len(got) - 1, int(len(got) * 0.99))]:.1f} s, most {got[-1]:.1f} s of {len(got):,} outputs"


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2] if values else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="how long nodes are killed")
    ap.add_argument("--every", type=float, default=60.0, help="seconds from one SIGKILL to the next")
    ap.add_argument("--rate", type=int, default=2000, help="input records per second")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", choices=["input leader", "transaction coordinator", "group coordinator"],
                    help="kill only the node in this role each time (the default: the three in turn)")
    ap.add_argument("--debug", action="store_true", help="the members log at DEBUG")
    ap.add_argument("--calm", type=float, default=30.0, help="seconds of load without faults first (the latency's "
                                                            "baseline)")
    args = ap.parse_args()
    rng = random.Random(args.seed)

    work = Path(tempfile.mkdtemp(prefix="fw-soak-cluster-"))
    cluster = LocalCluster(work / "cluster", free_ports(29600, 29990, 6), nodes=3)
    cluster.start()
    bootstrap = cluster.bootstrap
    suffix = f"soakc{os.getpid()}"
    source = f"numbers-{suffix}"
    ensure_topics(admin_client({"bootstrap.servers": bootstrap}), [TopicSpec(source, 4)])
    env = service_env(bootstrap, suffix, checkpoint_interval_ms=200, batch_size=1000)
    del env["FW_KAFKA_CONSUMER__SESSION_TIMEOUT_MS"]  # the default's 45 s, as a production member has
    env["FW_OBSERVE__PORT"] = "0"
    debug = ["--log-level", "DEBUG"] if args.debug else []
    members = [ServiceProcess(TARGET, work, str(i), env, ["--instance-id", str(i), *debug]).start() for i in range(2)]
    urls = [m.endpoint() for m in members]
    feeder = Feeder(bootstrap, source, args.rate)
    feeder.start()
    out = EvenOddOutputs(bootstrap, suffix, 0)
    roles = {
        "input leader": lambda: _leader(bootstrap, source, 0),
        "transaction coordinator": lambda: _coordinator(bootstrap, "__transaction_state", f"eo-{suffix}-0"),
        "group coordinator": lambda: _coordinator(bootstrap, "__consumer_offsets", f"eo-{suffix}"),
    }
    rc, last, pauses, beyond = 0, 0, [], []
    latency = Latency(bootstrap, f"seen-{suffix}")
    windows: list[tuple[str, float, float]] = []  # (label, wall clock start, end)
    try:
        wait_until(lambda: sum(out.drain()) > 1000, 120, "first outputs", members[0].log_text)
        calm_from, calm_end = time.time(), time.monotonic() + args.calm
        while time.monotonic() < calm_end:
            out.drain(0.5)
            time.sleep(0.25)
        # the calm in windows of 30 s at most, but for its last seconds: their outputs wait out
        # the first fault's pause
        calm_until = calm_from + args.calm - min(_SETTLE_S, args.calm / 2)
        windows.extend(("calm, no fault", calm_from + i * 30, min(calm_from + (i + 1) * 30, calm_until))
                       for i in range(math.ceil((calm_until - calm_from) / 30)))
        end = time.monotonic() + args.minutes * 60
        turn = 0
        while time.monotonic() < end and all(m.alive for m in members):
            names = [args.only] if args.only else list(roles)[turn % 3:] + list(roles)[:turn % 3]
            turn += 1
            now = {r: find() for r, find in roles.items()}  # each asked of the cluster once this turn
            role, node = next(((r, now[r]) for r in names if now[r] != last), (names[0], now[names[0]]))
            led = [r for r in roles if now[r] == node]
            down_s = rng.uniform(5, 20)
            fault_at, fault_wall = time.monotonic(), time.time()
            cluster.stop(node, kill=True)
            fenced = Fenced(bootstrap, node, fault_at)
            last = node
            codes: dict[str, set[int]] = {"health": set(), "ready": set()}
            # A member's outputs become visible when its checkpoint commits: the pause is the
            # longest time between two committed checkpoints of a member from the kill, as its
            # /status counts them, asked every 0.25 s beside this loop (a reader of the outputs
            # adds pauses of its own: it fetches from the same leaders).
            watch = CommitWatch(urls, fault_at)
            started = False
            while time.monotonic() - fault_at < args.every and all(m.alive for m in members):
                if not started and time.monotonic() - fault_at >= down_s:
                    cluster.start(node)
                    started = True
                out.drain(0.5)
                for url in urls:
                    codes["health"].add(_health(url + "/health"))
                    codes["ready"].add(_health(url + "/ready"))
                time.sleep(0.25)
            longest, elected = watch.stop(), fenced.stop()
            if not started:
                cluster.start(node)
            pauses.append(longest)
            if elected is not None:
                beyond.append(longest - elected)
            windows.append((f"SIGKILL node {node} ({', '.join(led) or role})", fault_wall, time.time()))
            when = f"fenced after {elected:.1f} s" if elected is not None else "not fenced while down"
            print(f"{time.strftime('%H:%M:%S', time.localtime(fault_wall))} SIGKILL node {node} "
                  f"({', '.join(led) or role}) for {down_s:.0f} s, {when}: longest pause in the "
                  f"outputs {longest:.1f} s; /health {sorted(codes['health'])}, /ready {sorted(codes['ready'])}",
                  flush=True)
        feeder.halt.set()
        feeder.join()
        n = feeder.next - 1
        out.n = n
        alive = [m.alive for m in members]
        if all(alive):
            wait_until(out.complete, 600, "every output", lambda: str(out.drain()))
        for m in members:
            if m.alive:
                m.stop()
        anomalies = even_odd_anomalies(out, n, KEYS)
        clean = all(v == 0 for a in anomalies.values() for v in a.values())
        print(f"{len(pauses)} node SIGKILLs in {args.minutes:.0f} min; longest pause in the outputs "
              f"{max(pauses, default=0):.1f} s (median {_median(pauses):.1f} s), beyond the node's fencing (its "
              f"leaders' election) at most {max(beyond, default=0):.1f} s (median {_median(beyond):.1f} s); "
              f"members alive throughout: {all(alive)}, started once each: {[m.starts for m in members] == [1, 1]}; "
              f"{n:,} inputs; exactly-once audit {'clean' if clean else 'FAILED'}: {anomalies}", flush=True)
        if all(alive):
            wait_until(lambda: len(latency.tail.records) >= n, 120, "the latency reader at every output")
        latency.stop()
        print("latency of the echo's outputs, input written to output visible:", flush=True)
        for label, start, stop in windows:
            print(f"  {label}: {latency.p99(start, stop)}", flush=True)
        rc = 0 if clean and all(alive) else 1
    finally:
        feeder.halt.set()
        latency.halt.set()
        for m in members:
            if m.alive:
                m.kill()
        out.close()
        cluster.wipe()
        print(f"member logs: {', '.join(str(m.log_path) for m in members)}", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
