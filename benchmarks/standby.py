"""Warm-standby benchmark: a member SIGKILLed with 1,000,000 keys of state; seconds until the
survivor's output resumes for the moved partitions, with and without a warm standby, and the
survivor's restore throughput. Not part of the test suite.

    .venv/bin/python benchmarks/standby.py                    # both scenarios, 2 repetitions (about 12 min)
    .venv/bin/python benchmarks/standby.py --keys 200000 --reps 1

Per repetition, on fresh topics and a fresh group: W2 of the suite (a keyed rolling count and
sum, RocksDB + changelog, exactly-once, 1 s checkpoints) runs as two dynamic members, ``a`` and
``b``. Once each runs two of the four partitions, ``--keys`` records with distinct keys are
produced and processed: every key is then a state entry and a changelog record. With
``processing.standby_replicas = 1`` (the ``standby`` scenario) the members' copies of each
other's tasks are awaited (``/status``: every copy current). Then a steady ``--rate`` feed over
the suite's 10,000 keys runs for ``--warmup`` s, ``b`` is SIGKILLed and stays dead; its
partitions move to ``a`` when its session (10 s) times out.

Measured: ``takeover`` (seconds from the SIGKILL until ``a`` runs every partition of ``b``:
its session timeout, then the restore; from ``a``'s log), ``resume`` (until the first output, for
an input produced after the kill, of each of ``b``'s partitions is visible to a read_committed
reader: the slowest partition; ``b``'s open transaction holds its output partitions until the
broker aborts it, so the members run with an 11 s transaction timeout), and the restore of
``b``'s partitions in ``a``: changelog records applied, seconds from the first "restoring" line
to the last "restored" line, and records/s. The output is checked exactly once against
the reference, preloaded records included.

Writes ``benchmarks/results/<timestamp>-standby.json``; logs under
``benchmarks/results/logs/<timestamp>/``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from benchmarks.failover import (
    Feed,
    Member,
    Scenario,
    Watch,
    _assignment,
    _drain,
    _figures,
    _observe,
    summary,
)
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
)
from framework.config import Config

# The killed member's open transaction holds its outputs' partitions (read_committed) until the
# broker aborts it: a transaction timeout near the session timeout keeps that from hiding the rest.
_TXN = {"FW_KAFKA__TRANSACTION_TIMEOUT_MS": "11000"}
SCENARIOS = {
    "restore": Scenario("no standby: the survivor restores the moved tasks from their changelogs",
                        ("--dynamic-membership",), _TXN, False, 2),
    "standby": Scenario("processing.standby_replicas = 1: the survivor holds warm copies of the moved tasks",
                        ("--dynamic-membership",), {**_TXN, "FW_PROCESSING__STANDBY_REPLICAS": "1"}, False, 2),
}
_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*?(?:(restoring|restored) [\w-]+\[(\d+)\]"
                   r"(?:: (\d+) records)?|partition (\d+) (restored and running))")


def _preload(bootstrap: str, topic: str, keys: int) -> list[tuple[str, int, int]]:
    """``keys`` records, one per distinct key: the state the failover has to move."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 20,
                  "partitioner": "murmur2_random", "compression.type": "lz4"})
    ts = int(time.time() * 1000)
    events = []
    for i in range(keys):
        k = f"p{i:07d}"
        value = _avro_long(len(k)) + k.encode() + _avro_long(i % 1000) + _avro_long(ts)
        while True:
            try:
                p.produce(topic, value, k.encode(), -1, None, None, ts)
                break
            except BufferError:
                p.poll(0.05)
        events.append((k, i % 1000, ts))
    if p.flush(120):
        raise SystemExit("the preload did not flush")
    return events


def _status(member: Member) -> dict[str, Any] | None:
    """The member's /status, from the endpoint its log names (None until it is up)."""
    text = (member.logs / f"{member.group}-{member.name}-{member.starts - 1}.log").read_text(errors="replace")
    found = re.findall(r"status endpoint http://[^:\s]+:(\d+)", text)
    if not found:
        return None
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{found[-1]}/status", timeout=5) as r:
            return json.loads(r.read())["members"][0]
    except urllib.error.HTTPError as e:  # 503 while not ready still carries the document
        return json.loads(e.read())["members"][0]
    except OSError:
        return None


def _copies_current(member: Member, partitions: set[int]) -> bool:
    st = _status(member)
    copies = (st or {}).get("standby", [])
    return {c["partition"] for c in copies} == partitions and all(c["current"] for c in copies)


def _restore_figures(log_text: str, kill_ms: int, moved: set[int]) -> dict[str, Any]:
    """The survivor's restore of ``moved`` after the kill, from its log lines."""
    first = last = None
    records = 0
    running: dict[int, float] = {}
    for line in log_text.splitlines():
        m = _LINE.match(line)
        if not m or int(m.group(3) or m.group(5)) not in moved:
            continue
        at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() * 1000
        if at < kill_ms:
            continue
        if m.group(6):
            running.setdefault(int(m.group(5)), at)
        elif m.group(2) == "restoring":
            first = at if first is None else min(first, at)
        else:
            last = at if last is None else max(last, at)
            records += int(m.group(4))
    seconds = (last - first) / 1000 if first is not None and last is not None else 0.0
    takeover = round((max(running.values()) - kill_ms) / 1000, 2) if set(running) == moved else None
    return {"takeover_s": takeover, "restored_records": records, "restore_s": round(seconds, 2),
            "restore_records_per_s": round(records / seconds) if seconds > 0 else None}


def repetition(args: argparse.Namespace, name: str, scenario: Scenario, rep: int, admin: AdminClient,
               logs: Path) -> dict[str, Any]:
    group = f"bench-standby-{uuid.uuid4().hex[:8]}"
    in_topic, out_topic = f"{group}-in", f"{group}-out"
    create_topics(admin, [in_topic, out_topic])
    spec = launch_spec("fw-1", "w2", "exactly_once", args.bootstrap, in_topic, out_topic, group, "", 1000, 1, 1)
    cmd = [c if c != "WARNING" else "INFO" for c in spec.cmd]  # the restore lines are INFO
    a, b = (Member(n, scenario, spec.env, cmd, logs, group) for n in ("a", "b"))
    watch = Watch(args.bootstrap, out_topic)
    watch.start()
    res: dict[str, Any] = {"scenario": name, "rep": rep, "group": group, "keys": args.keys}
    preload: list[tuple[str, int, int]] = []
    feed = None
    try:
        a.start()
        b.start()
        owned = _wait_split(admin, group, in_topic, args.timeout)
        res["partitions"] = {k: sorted(v) for k, v in owned.items()}
        t0 = time.monotonic()
        preload = _preload(args.bootstrap, in_topic, args.keys)
        if not _drain(len(preload), watch, args.timeout * 4):
            raise SystemExit(f"{group}: the preload was not processed within {args.timeout * 4:.0f}s")
        res["preload_processed_s"] = round(time.monotonic() - t0, 1)
        if scenario.env.get("FW_PROCESSING__STANDBY_REPLICAS"):
            t1 = time.monotonic()
            deadline = t1 + args.timeout
            while not _copies_current(a, owned["b"]):
                if time.monotonic() > deadline:
                    raise SystemExit(f"{group}: a's copies of {sorted(owned['b'])} not current: {_status(a)}")
                time.sleep(0.5)
            res["copies_current_after_s"] = round(time.monotonic() - t1, 1)
        feed = Feed(args.bootstrap, in_topic, args.rate)
        settle = time.monotonic() + args.warmup
        while time.monotonic() < settle:
            feed.pump()
            time.sleep(0.005)
        kill_ms = int(time.time() * 1000)
        b.kill()
        resumed = _observe(args, owned, kill_ms, feed, watch)
        res.update(_figures(owned, kill_ms, resumed, watch.seen))
        feed.close()
        res["inputs"] = len(preload) + len(feed.events)
        res["drained"] = _drain(res["inputs"], watch, args.drain_timeout)
    finally:
        res["exit_codes"] = {"a": a.stop(), "b": b.stop()}
        watch.close()
    a_log = (logs / f"{group}-a-0.log").read_text(errors="replace")
    res.update(_restore_figures(a_log, kill_ms, set(owned["b"])))
    got = reduce_outputs("w2", read_all(args.bootstrap, out_topic))
    res["check"] = compare(reference("w2", preload + (feed.events if feed else [])), got)
    mine = [t for t in admin.list_topics(timeout=10).topics if t.startswith(group)]
    admin.delete_topics(mine, operation_timeout=30)
    return res


def _wait_split(admin: AdminClient, group: str, topic: str, timeout_s: float) -> dict[str, set[int]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        owned = _assignment(admin, group, topic)
        if set(owned) == {"a", "b"} and all(len(v) == PARTITIONS // 2 for v in owned.values()):
            return owned
        time.sleep(0.5)
    raise SystemExit(f"{group}: the partitions were not split within {timeout_s}s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma-separated, of {list(SCENARIOS)}")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--keys", type=int, default=1_000_000, help="distinct keys of state before the kill")
    ap.add_argument("--rate", type=int, default=1000, help="input records per second around the kill")
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--after", type=float, default=2.0)
    ap.add_argument("--timeout", type=float, default=150.0)
    ap.add_argument("--drain-timeout", type=float, default=120.0)
    ap.add_argument("--bootstrap", default=Config.load().kafka.bootstrap_servers)
    args = ap.parse_args()
    names = [s for s in args.scenarios.split(",") if s]
    run_id = time.strftime("%Y%m%d-%H%M%S")
    logs = RESULTS / "logs" / run_id
    logs.mkdir(parents=True, exist_ok=True)
    out_file = RESULTS / f"{run_id}-standby.json"
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    results: dict[str, Any] = {
        "run": run_id, "machine": machine(), "loadavg_at_start": os.getloadavg(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "config": {"workload": "w2", "guarantee": "exactly_once", "partitions": PARTITIONS, "members": 2,
                   "keys": args.keys, "rate": args.rate, "checkpoint_interval_ms": 1000},
        "scenarios": {}}
    for name in names:
        sc = SCENARIOS[name]
        runs = []
        for rep in range(args.reps or sc.reps):
            log(f"{name} {rep + 1} ...")
            r = repetition(args, name, sc, rep, admin, logs)
            runs.append(r)
            log(f"  -> takeover {r['takeover_s']} s, resume {r['resume_s']} s, restored {r['restored_records']} records in {r['restore_s']} s "
                f"({r['restore_records_per_s']} records/s), check {'ok' if r['check']['ok'] else r['check']}")
            results["scenarios"][name] = {"what": sc.what, "env": sc.env, "takeover_s": summary(runs, "takeover_s"),
                                          "resume_s": summary(runs, "resume_s"),
                                          "restore_s": summary(runs, "restore_s"),
                                          "restore_records_per_s": summary(runs, "restore_records_per_s"),
                                          "runs": runs}
            out_file.write_text(json.dumps(results, indent=1) + "\n")
    results["loadavg_at_end"] = os.getloadavg()
    out_file.write_text(json.dumps(results, indent=1) + "\n")
    for name in names:
        s = results["scenarios"][name]
        log(f"{name:8} takeover median {s['takeover_s']['median']} s  resume median {s['resume_s']['median']} s  restore median {s['restore_s']['median']} s "
            f"at {s['restore_records_per_s']['median']} records/s")
    log(f"results: {out_file}")


if __name__ == "__main__":
    main()
