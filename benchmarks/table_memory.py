"""The memory of a table of 1,000,000 keys with history: one ``fw run`` process of
``apps/table_app.py`` (the customers topic as a table in RocksDB with its changelog, as j1's
table) fills it from a topic of ``--keys`` keys x ``--versions`` versions, on the broker of
``FW_BOOTSTRAP_SERVERS``.

    .venv/bin/python benchmarks/table_memory.py                       # 1,000,000 keys x 3 versions
    .venv/bin/python benchmarks/table_memory.py --keys 100000 --versions 3

Measured: VmRSS of the process once its group is stable and before any record (the empty
service), VmHWM (peak) while it fills the table, VmRSS once the group has committed every
record (the full table, held open), and the size on disk of its state directory then and
after the process has stopped (RocksDB closed: memtables flushed, write-ahead log gone).
The table has no changelog: its topic is its changelog. Then the state directory is deleted
and a new process rebuilds the table from its topic up to the committed offsets: the seconds
from its start to its last ``restored customers[p]`` line, and its RSS then. Version v of every key is produced before version
v + 1 (timestamps 1 s apart), so each key's versions arrive spread over the whole fill, as
updates do. Results go to ``results/<timestamp>-table-memory.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from benchmarks.suite import (
    BASE_TS,
    PY,
    RESULTS,
    GroupProgress,
    ProcTree,
    _avro_long,
    _backlog_producer,
    create_topics,
    launch_spec,
    log,
    machine,
    stop,
)
from framework.config import Config

APP = "benchmarks.apps.table_app:pipeline"


def produce_versions(bootstrap: str, topic: str, keys: int, versions: int) -> int:
    """``keys`` x ``versions`` Avro ``bench.Customer`` records (pre-encoded: the generator shares
    the cores with the service), version by version."""
    p = _backlog_producer(bootstrap)
    names = [f"c{i:07d}".encode() for i in range(keys)]
    prefix = [_avro_long(len(k)) + k for k in names]
    n = 0
    for v in range(versions):
        ts = BASE_TS + 1000 * v
        tail = _avro_long(ts)
        for i in range(keys):
            while True:
                try:
                    p.produce(topic, prefix[i] + _avro_long((i * 7 + v) % 1_000_000) + tail, names[i], -1, None,
                              None, ts)
                    break
                except BufferError:
                    p.poll(0.05)
            n += 1
            if n % 10_000 == 0:
                p.poll(0)
    if p.flush(300):
        raise SystemExit("producing the table's records did not finish in 300 s")
    return n


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def group_stable(admin: AdminClient, group: str) -> bool:
    try:
        desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
    except KafkaException:
        return False
    return str(desc.state).endswith("STABLE") and bool(desc.members)


def await_group(admin: AdminClient, group: str, proc: subprocess.Popen, log_name: str) -> None:
    """Wait until ``proc``'s group is stable with members (up to 120 s)."""
    deadline = time.monotonic() + 120
    while not group_stable(admin, group):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the service did not join its group (log {log_name})")
        time.sleep(0.5)


def await_committed(bootstrap: str, group: str, topic: str, out: str, total: int, proc: subprocess.Popen,
                    deadline: float, what: str, log_name: str, each: Callable[[], Any] = lambda: None) -> None:
    """Wait until ``group`` has committed ``total`` records of ``topic`` (``each`` between asks)."""
    prog = GroupProgress(bootstrap, group, [topic], out)
    try:
        while prog.committed() < total:
            each()
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{what} did not fill: {prog.committed():,} of {total:,} (log {log_name})")
            time.sleep(0.5)
    finally:
        prog.close()


def restart(cmd: list[str], env: dict[str, str], state: Path, log_path: Path, timeout_s: float,
            store: str) -> tuple[float, int, int]:
    """A lost disk: the state directory deleted, a new process restores ``store``. Seconds from
    its start to its last ``restored <store>[p]`` line (one per partition of 4), its RSS then
    and its peak RSS."""
    subprocess.run(["rm", "-rf", str(state)], check=True)
    with open(log_path, "w") as logf:  # the service writes to its own copy of the descriptor
        t0 = time.monotonic()
        proc = subprocess.Popen([*cmd[:-1], "INFO"], env=env, cwd=ROOT, stdout=logf, stderr=subprocess.STDOUT,
                                start_new_session=True)
    tree = ProcTree(proc.pid)
    try:
        deadline = t0 + timeout_s
        while log_path.read_text().count(f"restored {store}[") < 4:
            tree.sample()
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"store {store} was not restored (log {log_path})")
            time.sleep(0.2)
        took = time.monotonic() - t0
        _, rss, hwm = tree.sample()
    finally:
        stop(proc)
    return took, rss, hwm


def rebuild(cmd: list[str], env: dict[str, str], state: Path, log_path: Path, timeout_s: float) -> dict[str, Any]:
    """The table rebuilt from its topic after a lost disk (``restart``)."""
    took, rss, hwm = restart(cmd, env, state, log_path, timeout_s, "customers")
    log(f"rebuilt from the topic in {took:.1f}s, RSS {rss / 2**20:.0f} MB")
    return {"rebuild_s": round(took, 1), "rss_rebuilt_mb": round(rss / 2**20, 1),
            "peak_rss_rebuild_mb": round(hwm / 2**20, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--versions", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds for the fill")
    ap.add_argument("--bootstrap", default=Config.load().kafka.bootstrap_servers)
    args = ap.parse_args()
    run = time.strftime("%Y%m%d-%H%M%S")
    tag = uuid.uuid4().hex[:8]
    topic, out, group = f"bench-mem-{tag}-customers", f"bench-mem-{tag}-out", f"bench-mem-{tag}"
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    create_topics(admin, [topic, out])
    state = Path(tempfile.mkdtemp(prefix="bench-state-"))
    spec = launch_spec("fw-1", "table", "exactly_once", args.bootstrap, out, out, group, str(state), 1000, 1, 1, topic)
    cmd = [PY, "-m", "framework.cli", "run", APP, "--log-level", "WARNING"]
    logs = RESULTS / "logs" / run
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / f"{group}.log", "w") as logf:  # the service writes to its own copy of the descriptor
        proc = subprocess.Popen(cmd, env=spec.env, cwd=ROOT, stdout=logf, stderr=subprocess.STDOUT,
                                start_new_session=True)
    tree = ProcTree(proc.pid)
    res: dict[str, Any] = {"run": run, "machine": machine(), "keys": args.keys, "versions": args.versions,
                           "command": f"fw run {APP}", "loadavg_before": os.getloadavg()}
    try:
        await_group(admin, group, proc, logf.name)
        _, rss_empty, _ = tree.sample()
        res["rss_empty_mb"] = round(rss_empty / 2**20, 1)
        log(f"service up, RSS {res['rss_empty_mb']} MB; producing {args.keys:,} keys x {args.versions} versions")
        t0 = time.monotonic()
        total = produce_versions(args.bootstrap, topic, args.keys, args.versions)
        log(f"produced {total:,} records in {time.monotonic() - t0:.1f}s")
        await_committed(args.bootstrap, group, topic, out, total, proc, time.monotonic() + args.timeout,
                        "the table", logf.name, tree.sample)
        fill_s = time.monotonic() - t0
        _, rss_full, hwm = tree.sample()
        res.update(records=total, fill_s=round(fill_s, 1), rss_full_mb=round(rss_full / 2**20, 1),
                   peak_rss_mb=round(hwm / 2**20, 1), disk_running_mb=round(du(state) / 2**20, 1))
    finally:
        stop(proc)
    res["disk_stopped_mb"] = round(du(state) / 2**20, 1)
    res.update(rebuild(cmd, spec.env, state, logs / f"{group}-rebuild.log", args.timeout))
    res["per_key_rss_bytes"] = round((res["rss_full_mb"] - res["rss_empty_mb"]) * 2**20 / args.keys)
    res["per_key_disk_bytes"] = round(res["disk_stopped_mb"] * 2**20 / args.keys)
    res["loadavg_after"] = os.getloadavg()
    admin.delete_topics([t for t in admin.list_topics(timeout=10).topics if t.startswith(group)], operation_timeout=30)
    subprocess.run(["rm", "-rf", str(state)], check=False)
    path = RESULTS / f"{run}-table-memory.json"
    path.write_text(json.dumps(res, indent=1) + "\n")
    log(json.dumps({k: v for k, v in res.items() if k != "machine"}))
    print(path)


if __name__ == "__main__":
    main()
