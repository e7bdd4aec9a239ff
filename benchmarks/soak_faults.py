"""Fault soak: hundreds of random faults under a running exactly-once service, then an audit
of everything it wrote. Not part of the test suite, not run in CI (about 14 minutes).

    .venv/bin/python benchmarks/soak_faults.py                            # 110 faults, 600,000 records
    .venv/bin/python benchmarks/soak_faults.py --faults 10 --records 20000  # a smoke run, 2-3 minutes

The service is the chaos tests' even/odd pipeline (``tests.integration.pipelines:even_odd``:
an echo, a count per key, and even/odd running sums behind a repartition topic; RocksDB state
with changelogs, exactly-once, 200 ms checkpoints, a 6 s session) run as two static members
(``fw run --instance-id 0`` and ``1``) on a broker of its own (``LocalBroker`` on its own
ports, so a running suite broker is left alone). The input, the numbers 1 to ``--records``
keyed by ``n % 1000``, is produced all along at ``--rate`` records/s (idempotent; at most
one share per fault ahead, the rest at once after the last fault), so faults land while
records are in flight (counted per fault as ``in_flight``). Once more inputs are echoed
(read_committed) than right after the previous fault, so the service works again, the next
fault comes at a random moment within a second (seeded by ``--seed``). The faults, drawn at
random:

  member_kill             SIGKILL a member and start it again at once
  member_kill_state_lost  the same, its state directory deleted while it is dead: it
                          rebuilds its stores from the changelogs
  member_stop             SIGSTOP a member until the group has removed it (past its
                          session timeout; its partitions move to the other member), then
                          SIGCONT: a zombie with an open transaction, to be fenced
  broker_restart          SIGKILL the broker's JVM and start it again on the same directory

A member that exits without being killed counts as an unexpected exit (started again, and
the soak fails); no new echo within ``--stuck-timeout`` seconds (180) ends the soak as stuck. After the last fault the rest of the input is fed, every output awaited, both members
stopped with SIGTERM, and the audit reads back (read_committed):

  input     every number exactly once in the input topic (the feed itself is clean)
  outputs   per output topic, duplicates (an input's effect seen more than once) and missing
            (an input without its effect): 0 and 0 is exactly once; then the strict checks of
            the chaos tests (``check_exactly_once``: every echo once, each key's counts 1, 2,
            ... in order, each running sum adding each number once)
  state     the compacted changelogs equal the state of a run without faults

Writes ``benchmarks/results/<timestamp>-soak-faults.json`` (summary, the fault schedule and
the audit) and copies the members' and the broker's logs to
``benchmarks/results/logs/<timestamp>-soak-faults/``. Exit status 0 only when the audit holds
and no member exited on its own.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from framework.broker.local import KAFKA_VERSION, LocalBroker, free_port_pair
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from tests.integration.harness import (
    EvenOddOutputs,
    ServiceProcess,
    check_exactly_once,
    check_final_state,
    even_odd_anomalies,
    even_odd_inputs,
    read_topic,
    service_env,
    sigkill_broker,
    wait_until,
)

RESULTS = ROOT / "benchmarks" / "results"
TARGET = "tests.integration.pipelines:even_odd"
KEYS = 1_000
PARTITIONS = 4
# How often each fault is drawn: member faults are cheap (seconds), a broker restart costs
# about 25 s (JVM start, log recovery, every member rejoining).
_READ_S = 0.2  # how long one look at the outputs reads on while the steady input keeps them coming
KINDS = {"member_kill": 0.35, "member_kill_state_lost": 0.25, "member_stop": 0.25, "broker_restart": 0.15}


class Feeder(threading.Thread):
    """Produces the numbers 1 to ``records`` at ``rate`` records/s, never past ``allowed`` (the
    fault loop raises it one share per fault), with one idempotent producer that rides out
    broker restarts (librdkafka retries; the broker drops what it already has)."""

    def __init__(self, bootstrap: str, topic: str, records: int, rate: int) -> None:
        super().__init__(name="feeder", daemon=True)
        self.topic, self.records, self.rate = topic, records, rate
        self.allowed = 0
        self.produced = 0
        self.failed_deliveries = 0
        self.error: str | None = None
        self._p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20,
                            "partitioner": "murmur2_random", "message.timeout.ms": 600_000,
                            "error_cb": self._on_error})

    def run(self) -> None:
        try:
            next_at = time.monotonic()
            while self.produced < self.records and self.error is None:
                upto = min(self.allowed, self.produced + max(1, self.rate // 10))
                for key, value in even_odd_inputs(self.produced + 1, upto + 1, KEYS):
                    self._produce(key, value)
                self.produced = max(self.produced, upto)
                self._p.poll(0)
                next_at += 0.1
                time.sleep(max(0.0, next_at - time.monotonic()))
            if self._p.flush(600):
                self.error = "the feed's last records were not delivered within 600 s"
        except Exception as exc:  # noqa: BLE001 - reported by the soak
            self.error = f"{type(exc).__name__}: {exc}"

    def _produce(self, key: bytes, value: bytes) -> None:
        while True:
            try:
                self._p.produce(self.topic, key=key, value=value, on_delivery=self._on_delivery)
                return
            except BufferError:
                self._p.poll(0.1)

    def _on_delivery(self, err: KafkaError | None, _: Message) -> None:
        if err is not None:
            self.failed_deliveries += 1

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.error = f"feed producer: {err}"


class Soak:
    """The broker, the two members and the outputs' readers of one soak run."""

    def __init__(self, work: Path, suffix: str, records: int, rate: int, seed: str,
                 stuck_timeout_s: float) -> None:
        self.work, self.suffix, self.records = work, suffix, records
        self.rng = random.Random(seed)
        self.stuck_timeout_s = stuck_timeout_s
        self.broker = LocalBroker(work / "broker", free_port_pair(29900))
        self.broker.start()
        self.bootstrap = self.broker.bootstrap
        ensure_topics(admin_client({"bootstrap.servers": self.bootstrap}), [TopicSpec(f"numbers-{suffix}", PARTITIONS)])
        env = service_env(self.bootstrap, suffix, checkpoint_interval_ms=200, batch_size=1000)
        self.members = [ServiceProcess(TARGET, work, str(i), env) for i in range(2)]
        for member in self.members:
            member.start()
        self.out = EvenOddOutputs(self.bootstrap, suffix, records)
        self.feeder = Feeder(self.bootstrap, f"numbers-{suffix}", records, rate)
        self.feeder.start()
        self.schedule: list[dict[str, Any]] = []
        self.unexpected_exits: list[dict[str, Any]] = []

    # -- the run -------------------------------------------------------------------------

    def progressed(self, since: int, what: str) -> None:
        """Wait until more inputs are echoed (visible) than ``since``, restarting a member that
        exited on its own meanwhile."""
        def grew() -> bool:
            self._check()
            return self.out.seen.drain(_READ_S) > since

        wait_until(grew, self.stuck_timeout_s, what, self._diagnostics)

    def fault(self, number: int, faults: int) -> None:
        """Allow the feed its next share (one ahead, so it never waits on a fault); once
        outputs grew since the last fault, inject one random fault at a random moment."""
        self.feeder.allowed = self.records * (number + 1) // (faults + 1)
        since = self.schedule[-1]["echoed_after"] if self.schedule else 0
        self.progressed(since, f"outputs before fault {number}")
        time.sleep(self.rng.uniform(0.0, 1.0))  # the moment is random on purpose
        kind = self.rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
        member = self.rng.randrange(len(self.members))
        echoed = self.out.seen.drain(_READ_S)
        in_flight = self.feeder.produced - echoed  # fed, not yet read back: work the fault lands in
        started = time.monotonic()
        detail = getattr(self, kind)(member)
        self.schedule.append({"fault": number, "kind": kind, "member": None if kind == "broker_restart" else member,
                              "echoed_before": echoed, "in_flight": in_flight,
                              "seconds": round(time.monotonic() - started, 2),
                              "echoed_after": self.out.drain(_READ_S)[0], **detail})
        print(f"fault {number:4d} {kind:24s} {'' if kind == 'broker_restart' else f'member {member}':9s}"
              f" echoed {echoed:>9,}, in flight {in_flight:>6,}", flush=True)

    def finish(self) -> None:
        """Feed the rest at once, await every output, stop both members (SIGTERM)."""
        self.feeder.rate, self.feeder.allowed = 100_000, self.records

        def complete() -> bool:
            self._check()
            return self.out.complete()

        wait_until(complete, max(self.stuck_timeout_s, 600), "every output", self._diagnostics)
        self.feeder.join(60)
        codes = [member.stop() for member in self.members]
        if any(codes):
            raise AssertionError(f"members stopped with exit codes {codes}\n{self._diagnostics()}")

    # -- the faults ------------------------------------------------------------------------

    def member_kill(self, i: int) -> dict[str, Any]:
        self.members[i].kill()
        self.members[i].start()
        return {}

    def member_kill_state_lost(self, i: int) -> dict[str, Any]:
        self.members[i].kill()
        shutil.rmtree(self.members[i].state_dir, ignore_errors=True)
        self.members[i].start()
        return {}

    def member_stop(self, i: int) -> dict[str, Any]:
        """SIGSTOP until the group has removed the member (its session timed out), then SIGCONT."""
        stopped = self.members[i]
        assert stopped.proc is not None
        stopped.proc.send_signal(signal.SIGSTOP)
        try:
            wait_until(lambda: not self._in_group(stopped.instance), 120, f"the group to remove member {i}",
                       self._diagnostics)
        finally:
            stopped.proc.send_signal(signal.SIGCONT)
        return {}

    def _in_group(self, instance: str) -> bool:
        """Whether the group lists a member with ``group.instance.id`` ``instance`` (true while
        the coordinator cannot say). A new admin client each time: after a broker restart an
        old one's group-coordinator lookups can hang on a retired broker handle (librdkafka
        issue #5511, the one the services' producer avoids)."""
        group = f"eo-{self.suffix}"
        try:
            admin = admin_client({"bootstrap.servers": self.bootstrap})
            desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
        except KafkaException:
            return True
        return any(m.group_instance_id == instance for m in desc.members)

    def broker_restart(self, _: int) -> dict[str, Any]:
        sigkill_broker(self.broker)
        started = time.monotonic()
        self.broker.start()
        return {"broker_start_seconds": round(time.monotonic() - started, 2)}

    # -- bookkeeping -----------------------------------------------------------------------

    def _check(self) -> None:
        """Stop on a failed feed; start again a member that exited on its own."""
        if self.feeder.error:
            raise AssertionError(f"the feed failed: {self.feeder.error}")
        for i, member in enumerate(self.members):
            if member.proc is not None and not member.alive:
                code = member.proc.returncode
                self.unexpected_exits.append({"member": i, "exit_code": code, "after_fault": len(self.schedule),
                                              "log_tail": member.log_text()[-2000:]})
                print(f"member {i} exited on its own with {code}: started again", flush=True)
                member.start()

    def _diagnostics(self) -> str:
        parts = [f"outputs visible (seen, counts, sums): {self.out.drain(_READ_S)}"]
        parts += [f"member {i}:\n{m.log_text()[-3000:]}" for i, m in enumerate(self.members)]
        return "\n".join(parts)

    def audit(self) -> dict[str, Any]:
        """Read back the input, the outputs and the changelogs."""
        numbers = Counter(int(json.loads(r.value)) for r in read_topic(self.bootstrap, f"numbers-{self.suffix}")
                          if r.value is not None)
        expected = Counter(range(1, self.records + 1))
        result: dict[str, Any] = {
            "input": {"duplicates": sum((numbers - expected).values()), "missing": sum((expected - numbers).values()),
                      "failed_deliveries": self.feeder.failed_deliveries},
            "outputs": even_odd_anomalies(self.out, self.records, KEYS),
            "output_records": dict(zip(("seen", "counts", "sums"), self.out.drain())),
        }
        for name, check in (("exactly_once", lambda: check_exactly_once(self.out, self.records, KEYS)),
                            ("final_state", lambda: check_final_state(self.bootstrap, self.suffix, self.records,
                                                                      KEYS))):
            try:
                check()
                result[name] = "ok"
            except AssertionError as exc:
                result[name] = f"FAILED: {str(exc)[:500]}"
        return result

    def close(self, logs: Path) -> None:
        for member in self.members:
            if member.alive:
                member.kill()
            if member.log_path.exists():
                shutil.copy(member.log_path, logs / member.log_path.name)
        self.out.close()
        if self.broker.log_file.exists():
            shutil.copy(self.broker.log_file, logs / "broker.log")
        self.broker.wipe()


def _machine() -> dict[str, Any]:
    import confluent_kafka

    with open("/proc/meminfo") as f:
        mem = next((int(line.split()[1]) for line in f if line.startswith("MemTotal")), 0)
    return {"cores": os.cpu_count(), "memory_gib": round(mem / 2**20, 1), "python": platform.python_version(),
            "kafka": f"{KAFKA_VERSION} (KRaft, one broker, same machine)",
            "confluent_kafka": confluent_kafka.__version__, "librdkafka": confluent_kafka.libversion()[0]}


def _summary(result: dict[str, Any]) -> str:
    audit = result.get("audit", {})
    kinds = Counter(f["kind"] for f in result["faults"])
    in_flight = sum(1 for f in result["faults"] if f["in_flight"] > 0)
    lines = [
        f"fault soak {result['run']}: {'PASSED' if result['passed'] else 'FAILED'} in {result['wall_seconds'] / 60:.1f} min",
        f"  faults      {len(result['faults'])}: " + ", ".join(f"{k} {kinds[k]}" for k in KINDS),
        f"  records     {result['config']['records']:,} inputs; {in_flight} faults found records in flight",
        f"  unexpected  member exits {len(result['unexpected_exits'])}",
    ]
    if audit:
        outputs = audit["outputs"]

        def per_topic(what: str) -> str:
            each = ", ".join(f"{topic} {found[what]}" for topic, found in outputs.items())
            return f"{sum(found[what] for found in outputs.values())} ({each})"

        lines += [
            "  outputs     " + ", ".join(f"{t} {n:,}" for t, n in audit["output_records"].items()),
            f"  duplicates  {per_topic('duplicates')}",
            f"  missing     {per_topic('missing')}",
            f"  input       duplicates {audit['input']['duplicates']}, missing {audit['input']['missing']}",
            f"  checks      exactly once: {audit['exactly_once']}; final state: {audit['final_state']}",
        ]
    if result.get("error"):
        lines.append(f"  error       {result['error'][:300]}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--faults", type=int, default=110, help="how many faults to inject (default 110)")
    ap.add_argument("--records", type=int, default=600_000, help="input records, 1..N (default 600,000)")
    ap.add_argument("--rate", type=int, default=400,
                    help="input records per second while faults are injected (default 400; below one share "
                         "per fault cycle, so every fault finds records in flight); the rest is fed at the end")
    ap.add_argument("--seed", default=None, help="seed of the fault schedule and moments (default: random, recorded)")
    ap.add_argument("--stuck-timeout", type=float, default=180.0,
                    help="seconds without new outputs after which the soak ends as stuck (default 180)")
    ap.add_argument("--label", default="soak-faults")
    args = ap.parse_args()
    seed = args.seed or uuid.uuid4().hex[:8]
    run = time.strftime("%Y%m%d-%H%M%S")
    logs = RESULTS / "logs" / f"{run}-{args.label}"
    logs.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="fw-soak-faults-"))
    result: dict[str, Any] = {"run": run, "label": args.label, "machine": _machine(), "command": sys.argv,
                              "config": {"faults": args.faults, "records": args.records, "rate": args.rate, "seed": seed, "keys": KEYS,
                                         "partitions": PARTITIONS, "members": 2, "checkpoint_interval_ms": 200,
                                         "session_timeout_ms": 6000, "fault_weights": KINDS},
                              "faults": [], "unexpected_exits": [], "passed": False}
    started = time.monotonic()
    soak: Soak | None = None
    try:
        soak = Soak(work, uuid.uuid4().hex[:10], args.records, args.rate, seed, args.stuck_timeout)
        for number in range(1, args.faults + 1):
            soak.fault(number, args.faults)
        soak.finish()
        result["audit"] = soak.audit()
        audit = result["audit"]
        result["passed"] = (audit["exactly_once"] == audit["final_state"] == "ok" and not soak.unexpected_exits
                            and all(o["duplicates"] == o["missing"] == 0 for o in audit["outputs"].values()))
    except Exception as exc:  # noqa: BLE001 - the run's result says what went wrong
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if soak is not None:
            result["faults"], result["unexpected_exits"] = soak.schedule, soak.unexpected_exits
            soak.close(logs)
        shutil.rmtree(work, ignore_errors=True)
        result["wall_seconds"] = round(time.monotonic() - started, 1)
        RESULTS.mkdir(exist_ok=True)
        path = RESULTS / f"{run}-{args.label}.json"
        path.write_text(json.dumps(result, indent=2) + "\n")
    print(_summary(result))
    print(f"result: {path.relative_to(ROOT)}; logs: {logs.relative_to(ROOT)}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
