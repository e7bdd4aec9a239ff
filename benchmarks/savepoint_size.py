"""The time and size of a savepoint of 1,000,000 keys: one ``fw run`` process of
``apps/count_app.py`` (a count per key, in RocksDB with its changelog) counts a topic of
``--keys`` keys, once each, on the broker of ``FW_BOOTSTRAP_SERVERS``; once it has committed
every record it is stopped, and

- ``fw savepoint create`` is timed (seconds from the command to its end, its CPU seconds and
  peak RSS), and the savepoint's size on disk measured; with ``--master``, also ``fw savepoint
  create --master`` (the stores made by Spark), with the command's own peak RSS beside its
  process tree's (Spark's JVM and Python workers);
- ``fw savepoint restore`` of it onto the stopped service is timed the same way;
- a new ``fw run`` process (its state directory deleted) restores the state from the
  changelogs the savepoint wrote: the seconds to its last ``restored counts[p]`` line.

    .venv/bin/python benchmarks/savepoint_size.py                 # 1,000,000 keys
    .venv/bin/python benchmarks/savepoint_size.py --keys 100000
    .venv/bin/python benchmarks/savepoint_size.py --master 'local[2]'

Results go to ``results/<timestamp>-savepoint-size.json``.
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka.admin import AdminClient

from benchmarks.suite import (
    PY,
    RESULTS,
    ProcTree,
    create_topics,
    launch_spec,
    log,
    machine,
    stop,
)
from benchmarks.table_memory import await_committed, await_group, du, produce_versions, restart
from framework.config import Config

APP = "benchmarks.apps.count_app:pipeline"


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, float, float]:
    """Seconds from ``cmd``'s start to its end, its CPU seconds, its peak RSS in MB (the sum
    of its process tree's peaks, sampled) and its own process's peak RSS in MB."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    tree = ProcTree(proc.pid)
    cpu, hwm = 0.0, 0
    while proc.poll() is None:
        cpu, _, hwm = tree.sample()  # both kept per process, so they only grow
        time.sleep(0.1)
    took = time.monotonic() - t0
    output = proc.stdout.read().decode() if proc.stdout else ""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[2:])} failed: {output[-3000:]}")
    return took, cpu, hwm / 2**20, tree.hwm.get(proc.pid, 0) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds for the fill")
    ap.add_argument("--bootstrap", default=Config.load().kafka.bootstrap_servers)
    ap.add_argument("--master", default=None, help="also a savepoint made by Spark on this master")
    args = ap.parse_args()
    run = time.strftime("%Y%m%d-%H%M%S")
    tag = uuid.uuid4().hex[:8]
    topic, out, group = f"bench-sp-{tag}-customers", f"bench-sp-{tag}-out", f"bench-sp-{tag}"
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    create_topics(admin, [topic, out])
    work = Path(tempfile.mkdtemp(prefix="bench-savepoint-"))
    state, saved = work / "state", work / "savepoint"
    spec = launch_spec("fw-1", "w2", "exactly_once", args.bootstrap, topic, out, group, str(state), 1000, 1, 1)
    env = {**spec.env, "FW_LOG_LEVEL": "WARNING"}
    cmd = [PY, "-m", "framework.cli", "run", APP, "--log-level", "WARNING"]
    logs = RESULTS / "logs" / run
    logs.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"run": run, "machine": machine(), "keys": args.keys, "command": f"fw run {APP}",
                           "loadavg_before": os.getloadavg()}
    with open(logs / f"{group}.log", "w") as logf:  # the service writes to its own copy of the descriptor
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        await_group(admin, group, proc, logf.name)
        t0 = time.monotonic()
        total = produce_versions(args.bootstrap, topic, args.keys, 1)
        await_committed(args.bootstrap, group, topic, out, total, proc, t0 + args.timeout, "the counts", logf.name)
        res.update(records=total, fill_s=round(time.monotonic() - t0, 1))
    finally:
        stop(proc)
    log(f"{total:,} keys counted in {res['fill_s']} s; the service stopped")
    fw = [PY, "-m", "framework.cli"]
    took, cpu, rss, _ = timed([*fw, "savepoint", "create", APP, "--path", str(saved)], env)
    res.update(create_s=round(took, 1), create_cpu_s=round(cpu, 1), create_peak_rss_mb=round(rss, 1),
               savepoint_mb=round(du(saved) / 2**20, 1))
    log(f"savepoint created in {took:.1f} s, {res['savepoint_mb']} MB on disk")
    if args.master:
        by_spark = work / "savepoint-spark"
        took, cpu, rss, own = timed([*fw, "savepoint", "create", APP, "--path", str(by_spark), "--master",
                                     args.master], env)
        res.update(master=args.master, spark_create_s=round(took, 1), spark_create_cpu_s=round(cpu, 1),
                   spark_create_tree_peak_rss_mb=round(rss, 1), spark_create_command_peak_rss_mb=round(own, 1),
                   spark_savepoint_mb=round(du(by_spark) / 2**20, 1))
        log(f"savepoint created by Spark ({args.master}) in {took:.1f} s, {res['spark_savepoint_mb']} MB on disk")
    took, cpu, rss, _ = timed([*fw, "savepoint", "restore", APP, str(saved)], env)
    res.update(restore_s=round(took, 1), restore_cpu_s=round(cpu, 1), restore_peak_rss_mb=round(rss, 1))
    log(f"savepoint restored in {took:.1f} s")
    took, _, _ = restart(cmd, env, state, logs / f"{group}-restart.log", args.timeout, "counts")
    res["member_restore_s"] = round(took, 1)
    log(f"a member restored the savepoint's state in {res['member_restore_s']} s")
    res["loadavg_after"] = os.getloadavg()
    admin.delete_topics([t for t in admin.list_topics(timeout=10).topics if t.startswith(group)], operation_timeout=30)
    subprocess.run(["rm", "-rf", str(work)], check=False)
    path = RESULTS / f"{run}-savepoint-size.json"
    path.write_text(json.dumps(res, indent=1) + "\n")
    log(json.dumps({k: v for k, v in res.items() if k != "machine"}))
    print(path)


if __name__ == "__main__":
    main()
