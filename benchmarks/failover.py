"""Failover benchmark: seconds from a member's SIGKILL until the output of its partitions
resumes, for each way the framework can run a consumer group. Not part of the test suite.

    .venv/bin/python benchmarks/failover.py                       # every scenario (about 13 min)
    .venv/bin/python benchmarks/failover.py --scenarios static,dynamic-restart --reps 5

Per repetition, on fresh topics and a fresh group: W2 of the suite (``benchmarks/apps/fw_app.py``:
a keyed rolling count and sum, RocksDB + changelog, exactly-once, 1 s checkpoints) runs as two
members, ``a`` and ``b``, over a 4-partition input fed at a steady ``--rate`` (each record's
timestamp is its produce time, and its output copies it). A read_committed consumer in this
process notes when each output becomes visible, per partition. Once both members run two
partitions each and every partition has shown output, ``b`` is SIGKILLed and, in the
``-restart`` and ``static`` scenarios, started again at once with the same arguments.

Measured (seconds after the SIGKILL):
  resume      per partition of ``b``, when the first output of an input produced after the kill
              becomes visible; the repetition's figure is its slowest partition
  stall       per partition of ``a`` (the survivor), the longest time without a new visible
              output from 2 s before the kill to the end (about the checkpoint interval when
              the partition is never stopped); the figure is the worst partition
Then the input stops, every input's output is awaited, both members stop (SIGTERM), and the
output is checked exactly once against the reference (the suite's ``reference('w2', ...)``).

Writes ``benchmarks/results/<timestamp>-failover.json``; logs under
``benchmarks/results/logs/<timestamp>/``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from benchmarks.common import KEYS
from benchmarks.suite import (
    PARTITIONS,
    RESULTS,
    _avro_long,
    compare,
    create_topics,
    launch_spec,
    log,
    machine,
    read_all,
    reduce_outputs,
    reference,
    stop,
)
from framework.config import Config


@dataclass(frozen=True)
class Scenario:
    what: str
    args: tuple[str, ...]  # after ``--instance-id a|b``
    env: dict[str, str]
    restart: bool
    reps: int  # default repetitions (--reps overrides)


_CONSUMER = {"FW_KAFKA_CONSUMER__GROUP_PROTOCOL": "consumer"}
SCENARIOS = {
    "dynamic": Scenario("classic protocol, eager range, dynamic members; the killed member stays dead "
                        "(the default of fw run)", ("--dynamic-membership",), {}, False, 3),
    "dynamic-restart": Scenario("classic protocol, eager range, dynamic members; the killed member is "
                                "restarted at once with the same transactional id (as fw run --processes "
                                "restarts a child)", ("--dynamic-membership",), {}, True, 3),
    "static": Scenario("classic protocol, eager range, static members (--instance-id); the killed member "
                       "is restarted at once", (), {}, True, 5),
    "consumer": Scenario("consumer group protocol (KIP-848, the broker's range assignor), dynamic members; "
                         "the killed member stays dead", (), _CONSUMER, False, 3),
    "consumer-restart": Scenario("consumer group protocol, dynamic members; the killed member is restarted "
                                 "at once with the same transactional id", (), _CONSUMER, True, 2),
}


class Watch(threading.Thread):
    """A read_committed consumer of the output topic: ``(partition, seen ms, record ts ms)``
    for every output as it becomes visible."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.seen: list[tuple[int, int, int]] = []
        self._halt = threading.Event()
        self._c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-failover-{uuid.uuid4().hex[:8]}",
                            "isolation.level": "read_committed", "enable.auto.commit": False,
                            "fetch.wait.max.ms": 10})
        self._c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])

    def run(self) -> None:
        while not self._halt.is_set():
            msgs = self._c.consume(1000, 0.05)
            now = time.time_ns() // 1_000_000
            self.seen.extend((m.partition() or 0, now, m.timestamp()[1]) for m in msgs if m.error() is None)
        self._c.close()

    def close(self) -> None:
        self._halt.set()
        self.join(10)


@dataclass
class Feed:
    """The steady input: ``rate`` records/s, random keys, timestamp = produce time."""

    bootstrap: str
    topic: str
    rate: int
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    events: list[tuple[str, int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                           "linger.ms": 1, "partitioner": "murmur2_random", "compression.type": "lz4"})
        self.keys = [f"k{i:04d}" for i in range(KEYS)]
        self.key_parts = [_avro_long(len(k)) + k.encode() for k in self.keys]  # bench.Event: key, value, ts
        self.t0 = time.time()

    def pump(self) -> None:
        """Produce what is due by now."""
        now = time.time()
        ts = int(now * 1000)
        for _ in range(int((now - self.t0) * self.rate) - len(self.events)):
            i, v = self.rng.randrange(KEYS), self.rng.randrange(1000)
            value = self.key_parts[i] + _avro_long(v) + _avro_long(ts)
            while True:
                try:
                    self.p.produce(self.topic, value, self.keys[i].encode(), -1, None, None, ts)
                    break
                except BufferError:
                    self.p.poll(0.01)
            self.events.append((self.keys[i], v, ts))
        self.p.poll(0)

    def close(self) -> None:
        if self.p.flush(30):
            raise SystemExit("the input did not flush")


class Member:
    def __init__(self, name: str, scenario: Scenario, base_env: dict[str, str], cmd: list[str], logs: Path,
                 group: str) -> None:
        self.name, self.group, self.logs = name, group, logs
        self.cmd = [*cmd, "--instance-id", name, *scenario.args]
        # the classic group's session of the recorded results (the default is 45 s)
        session = ({} if scenario.env.get("FW_KAFKA_CONSUMER__GROUP_PROTOCOL") == "consumer"
                   else {"FW_KAFKA_CONSUMER__SESSION_TIMEOUT_MS": "10000"})
        self.env = {**base_env, "FW_STATE_DIR": tempfile.mkdtemp(prefix=f"bench-failover-{name}-"),
                    "FW_OBSERVE__PORT": "0", **session, **scenario.env}
        self.starts = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.logs / f"{self.group}-{self.name}-{self.starts}.log", "wb") as out:
            self.proc = subprocess.Popen(self.cmd, env=self.env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self.starts += 1

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        stop(self.proc, 60)
        shutil.rmtree(self.env["FW_STATE_DIR"], ignore_errors=True)
        return self.proc.returncode


def _assignment(admin: AdminClient, group: str, topic: str) -> dict[str, set[int]]:
    """Partitions of ``topic`` per member, by instance (its client.id is ``<group>-<instance>@...``)."""
    [future] = admin.describe_consumer_groups([group], request_timeout=10).values()
    try:
        members = future.result(timeout=15).members
    except Exception:  # noqa: BLE001 - the group is being created or rebalanced: ask again
        return {}
    out: dict[str, set[int]] = {}
    for m in members:
        name = m.client_id.split("@", 1)[0].removeprefix(f"{group}-")
        out[name] = {tp.partition for tp in m.assignment.topic_partitions if tp.topic == topic}
    return out


def repetition(args: argparse.Namespace, name: str, scenario: Scenario, rep: int, admin: AdminClient,
               logs: Path) -> dict[str, Any]:
    group = f"bench-failover-{uuid.uuid4().hex[:8]}"
    in_topic, out_topic = f"{group}-in", f"{group}-out"
    create_topics(admin, [in_topic, out_topic])
    spec = launch_spec("fw-1", "w2", "exactly_once", args.bootstrap, in_topic, out_topic, group, "", 1000, 1, 1)
    cmd = [c if c != "WARNING" else "INFO" for c in spec.cmd]  # --log-level: the logs say what moved when
    a, b = (Member(n, scenario, spec.env, cmd, logs, group) for n in ("a", "b"))
    watch, feed = Watch(args.bootstrap, out_topic), Feed(args.bootstrap, in_topic, args.rate)
    watch.start()
    res: dict[str, Any] = {"scenario": name, "rep": rep, "group": group}
    try:
        a.start()
        b.start()
        owned = _wait_steady(args, admin, group, in_topic, feed, watch)
        res["partitions"] = {k: sorted(v) for k, v in owned.items()}
        kill_ms = int(time.time() * 1000)
        b.kill()
        if scenario.restart:
            b.start()
        resumed = _observe(args, owned, kill_ms, feed, watch)
        res.update(_figures(owned, kill_ms, resumed, watch.seen))
        feed.close()
        res["inputs"] = len(feed.events)
        res["drained"] = _drain(len(feed.events), watch, args.drain_timeout)
    finally:
        res["exit_codes"] = {"a": a.stop(), "b": b.stop()}
        watch.close()
    got = reduce_outputs("w2", read_all(args.bootstrap, out_topic))
    res["check"] = compare(reference("w2", feed.events), got)
    mine = [t for t in admin.list_topics(timeout=10).topics if t.startswith(group)]  # the changelog too
    admin.delete_topics(mine, operation_timeout=30)
    return res


def _wait_steady(args: argparse.Namespace, admin: AdminClient, group: str, topic: str, feed: Feed,
                 watch: Watch) -> dict[str, set[int]]:
    """Feed until each member owns two partitions and every partition has shown output since;
    then ``--warmup`` seconds more. The assignment."""
    deadline = time.monotonic() + args.timeout
    owned: dict[str, set[int]] = {}
    since = next_ask = 0.0
    while time.monotonic() < deadline:
        feed.pump()
        now = time.monotonic()
        if now >= next_ask:
            next_ask = now + 0.5
            current = _assignment(admin, group, topic)
            if current != owned:
                owned, since = current, time.time() * 1000
        split = set(owned) == {"a", "b"} and all(len(v) == 2 for v in owned.values())
        if split and {p for p, seen, _ in watch.seen[-2000:] if seen > since} == set(range(PARTITIONS)):
            settle = time.monotonic() + args.warmup
            while time.monotonic() < settle:
                feed.pump()
                time.sleep(0.005)
            return owned
        time.sleep(0.005)
    raise SystemExit(f"{group}: no steady split of the partitions within {args.timeout}s: {owned}")


def _observe(args: argparse.Namespace, owned: dict[str, set[int]], kill_ms: int, feed: Feed,
             watch: Watch) -> dict[int, int]:
    """Feed until every partition of ``b`` and ``a`` shows output of an input produced after the
    kill, then ``--after`` seconds more; the first such output's visibility per partition."""
    first: dict[int, int] = {}
    scanned = 0
    deadline = time.monotonic() + args.timeout
    done_at = None
    while time.monotonic() < deadline:
        feed.pump()
        seen = watch.seen
        for p, at, ts in seen[scanned:len(seen)]:
            if ts >= kill_ms and p not in first:
                first[p] = at
        scanned = len(seen)
        if done_at is None and len(first) == PARTITIONS:
            done_at = time.monotonic() + args.after
        if done_at is not None and time.monotonic() >= done_at:
            break
        time.sleep(0.005)
    return first


def _figures(owned: dict[str, set[int]], kill_ms: int, first: dict[int, int],
             seen: list[tuple[int, int, int]]) -> dict[str, Any]:
    resume = {p: round((first[p] - kill_ms) / 1000, 2) if p in first else None for p in sorted(owned["b"])}
    stall: dict[int, float] = {}
    for p in sorted(owned["a"]):
        times = sorted(at for q, at, _ in seen if q == p and at >= kill_ms - 2000)
        stall[p] = round(max((y - x for x, y in itertools.pairwise(times)), default=0) / 1000, 2)
    slowest = None if None in resume.values() else max(v for v in resume.values() if v is not None)
    return {"resume_s": slowest, "resume_s_by_partition": resume, "survivor_stall_s": max(stall.values()),
            "survivor_stall_s_by_partition": stall}


def _drain(total: int, watch: Watch, timeout_s: float) -> bool:
    """Wait until every input's output is visible (W2: one per input)."""
    deadline = time.monotonic() + timeout_s
    while len(watch.seen) < total and time.monotonic() < deadline:
        time.sleep(0.1)
    return len(watch.seen) >= total


def summary(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    values = [r[key] for r in runs if r.get(key) is not None]
    if not values:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": round(statistics.median(values), 2), "min": min(values), "max": max(values), "n": len(values)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma-separated, of {list(SCENARIOS)}")
    ap.add_argument("--reps", type=int, default=None, help="repetitions of each scenario (default: per scenario)")
    ap.add_argument("--rate", type=int, default=1000, help="input records per second")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds of steady output before the kill")
    ap.add_argument("--after", type=float, default=2.0, help="seconds observed after every partition resumed")
    ap.add_argument("--timeout", type=float, default=150.0, help="seconds to wait for a steady split, and "
                    "for the resume")
    ap.add_argument("--drain-timeout", type=float, default=90.0)
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="an environment variable for every member (e.g. FW_KAFKA__TRANSACTION_TIMEOUT_MS=15000)")
    ap.add_argument("--bootstrap", default=Config.load().kafka.bootstrap_servers)
    ap.add_argument("--label", default="failover")
    args = ap.parse_args()
    names = [s for s in args.scenarios.split(",") if s]
    for s in names:
        assert s in SCENARIOS, f"unknown scenario {s}; known: {list(SCENARIOS)}"
    extra = dict(kv.split("=", 1) for kv in args.env)
    run_id = time.strftime("%Y%m%d-%H%M%S")
    logs = RESULTS / "logs" / run_id
    logs.mkdir(parents=True, exist_ok=True)
    out_file = RESULTS / f"{run_id}-{args.label}.json"
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    results: dict[str, Any] = {
        "run": run_id, "label": args.label, "machine": machine(), "loadavg_at_start": os.getloadavg(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "config": {"workload": "w2", "guarantee": "exactly_once", "partitions": PARTITIONS, "members": 2,
                   "rate": args.rate, "checkpoint_interval_ms": 1000, "warmup_s": args.warmup, "env": extra},
        "scenarios": {}}
    for name in names:
        sc = SCENARIOS[name]
        sc = Scenario(sc.what, sc.args, {**sc.env, **extra}, sc.restart, args.reps or sc.reps)
        runs = []
        for rep in range(sc.reps):
            log(f"{name} {rep + 1}/{sc.reps} ...")
            r = repetition(args, name, sc, rep, admin, logs)
            runs.append(r)
            log(f"  -> resume {r['resume_s']} s {r['resume_s_by_partition']}, survivor stall "
                f"{r['survivor_stall_s']} s, check {'ok' if r['check']['ok'] else r['check']}")
            results["scenarios"][name] = {"what": sc.what, "restart": sc.restart, "env": sc.env,
                                          "resume_s": summary(runs, "resume_s"),
                                          "survivor_stall_s": summary(runs, "survivor_stall_s"), "runs": runs}
            out_file.write_text(json.dumps(results, indent=1) + "\n")
    results["loadavg_at_end"] = os.getloadavg()
    out_file.write_text(json.dumps(results, indent=1) + "\n")
    for name in names:
        s = results["scenarios"][name]
        log(f"{name:17} resume median {s['resume_s']['median']} s [{s['resume_s']['min']}, {s['resume_s']['max']}]"
            f"   survivor stall median {s['survivor_stall_s']['median']} s "
            f"[{s['survivor_stall_s']['min']}, {s['survivor_stall_s']['max']}]")
    log(f"results: {out_file}")


if __name__ == "__main__":
    main()
