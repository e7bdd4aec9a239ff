"""How long a small ``fw replay`` takes from the command to its end: warm (a machine that ran
one before: the connector, the class archive and the code's zip are cached) and first run
(a fresh ``FW_HOME``, so the connector is copied out of Maven's local repository and the
JVM writes its class archive, after the command's end: waited for, not counted), each repeated.

    .venv/bin/python benchmarks/replay_start.py                # 4,000 records, 3 repeats
    .venv/bin/python benchmarks/replay_start.py --records 10000 --repeat 3 --cases keyed-none

Uses the broker ``FW_BOOTSTRAP_SERVERS`` names, else starts a local broker of its own on free
ports (and stops it). The cases (``--cases``, comma-separated):

- ``keyed-none``: a count per key, no repartition, ``--output none``;
- ``keyed-topic``: the same, ``--output topic --output-suffix -x<run>`` (new topics each run: the
  same backfill again writes nothing);
- ``repartition-topic``: even/odd sums through a repartition topic (two stages) and the count,
  ``--output topic --output-suffix -x<run>``.

Those run with ``--allow-nondeterministic``: no order check. Two more cases run it (a count
per key after a ``key_by`` on the source's own key: a rolling aggregate after a repartition,
each key from one upstream partition, so the check passes), and their lines give the check's
own seconds too (its ``[replay] checked the order ...`` line):

- ``checked-none``: ``--output none`` (plain RDD jobs, no Spark SQL);
- ``checked-parquet``: ``--output parquet:<new path>`` (Spark SQL, as the README's replay of the
  sensors service).

This module is also the pipelines' module (``benchmarks.replay_start:keyed``): importing it
does nothing else. Prints one line per run and a table of the medians (also as JSON with
``--json``). Nothing here is asserted anywhere: the figures go to docs/replay.md by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from framework.pipeline import Pipeline, Topic
from framework.serde import JsonSerde, StringSerde

ROOT = Path(__file__).resolve().parents[1]
_TOPIC = "BENCH_REPLAY_TOPIC"
_PARQUET = "parquet:"  # a new path under the benchmark's own directory each run
CASES = {  # target, arguments, whether the order check runs
    "keyed-none": ("keyed", ["--output", "none"], False),
    "keyed-topic": ("keyed", ["--output", "topic", "--output-suffix", "-x"], False),
    "repartition-topic": ("repartitioned", ["--output", "topic", "--output-suffix", "-x"], False),
    "checked-none": ("rekeyed", ["--output", "none"], True),
    "checked-parquet": ("rekeyed", ["--output", _PARQUET], True),
}


def _source(p: Pipeline):  # type: ignore[no-untyped-def]
    return p.source(Topic(os.environ[_TOPIC], key_serde=StringSerde(), value_serde=JsonSerde(), partitions=4),
                    name="numbers")


def _parity(r: dict[str, int]) -> str:
    return "even" if r["n"] % 2 == 0 else "odd"


def keyed() -> Pipeline:
    """A count per source key: one stage."""
    p = Pipeline(f"rs-keyed-{os.environ[_TOPIC]}")
    _source(p).count(name="counts").to(Topic(f"{os.environ[_TOPIC]}-counts"), name="to-counts")
    return p


def repartitioned() -> Pipeline:
    """Even/odd sums through a repartition topic (two stages), and the count per key."""
    p = Pipeline(f"rs-parity-{os.environ[_TOPIC]}")
    numbers = _source(p)
    numbers.key_by(_parity, name="parity").sum(lambda r: r["n"], name="sums").to(
        Topic(f"{os.environ[_TOPIC]}-sums"), name="to-sums")
    numbers.count(name="counts").to(Topic(f"{os.environ[_TOPIC]}-counts"), name="to-counts")
    return p


def _same_key(r: dict[str, int]) -> str:
    return f"k{r['n'] % 100}"  # the key _produce gives the record: each key from one partition


def rekeyed() -> Pipeline:
    """A count per key after a key_by on the source's own key: two stages, and an order-sensitive
    step after a repartition, which the order check looks at (and passes)."""
    p = Pipeline(f"rs-rekeyed-{os.environ[_TOPIC]}")
    _source(p).key_by(_same_key, name="same").count(name="counts").to(
        Topic(f"{os.environ[_TOPIC]}-recounts"), name="to-counts")
    return p


def _fw(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "framework.cli", *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, check=False)


def _start_broker(env: dict[str, str]) -> str:
    from framework.broker.local import free_port_pair

    env["FW_BROKER_DIR"] = tempfile.mkdtemp(prefix="fw-bench-broker-")
    env["FW_BROKER_PORT"] = str(free_port_pair())
    for step in (("broker", "fetch"), ("broker", "start")):
        done = _fw(*step, env=env)
        if done.returncode != 0:
            raise SystemExit(f"fw {' '.join(step)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout.strip().splitlines()[-1]


def _produce(bootstrap: str, topic: str, records: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 4, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    for i in range(records):
        producer.produce(topic, key=f"k{i % 100}".encode(), value=json.dumps({"n": i}).encode())
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(60):
        raise SystemExit(f"could not produce {records} records to {topic}")


def _replay(case: str, env: dict[str, str]) -> tuple[float, float | None, float | None]:
    """Seconds from the command to its end, the job's own seconds (its ``done`` line) and the
    order check's (its ``checked the order`` line; None without one)."""
    target, args, checked = CASES[case]
    # a backfill into topics of its own each time: the same one again would write nothing
    run = uuid.uuid4().hex[:8]
    out = Path(env["FW_HOME"]) / "bench-parquet" / run
    args = [f"-x{run}" if a == "-x" else f"{_PARQUET}{out}" if a == _PARQUET else a for a in args]
    started = time.monotonic()
    done = _fw("replay", f"benchmarks.replay_start:{target}", *([] if checked else ["--allow-nondeterministic"]),
               *args, env=env)
    wall = time.monotonic() - started
    shutil.rmtree(out.parent, ignore_errors=True)
    if done.returncode != 0:
        raise SystemExit(f"{case}: fw replay failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    job = re.search(r"\[replay\] done: .*?, seconds ([\d.]+)", done.stdout)  # not "processing seconds"
    check = re.search(r"\[replay\] checked the order of .*?([\d.]+) s\)$", done.stdout, re.MULTILINE)
    return wall, float(job.group(1)) if job else None, float(check.group(1)) if check else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=4_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--runs", default="first,warm", help="first, warm or both (first runs go first)")
    parser.add_argument("--json", action="store_true", help="Also print the results as JSON.")
    opts = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FW_REPLAY_PROGRESS": "lines"}
    broker = None if env.get("FW_BOOTSTRAP_SERVERS") else _start_broker(env)
    try:
        bootstrap = env.get("FW_BOOTSTRAP_SERVERS") or broker or ""
        env["FW_BOOTSTRAP_SERVERS"] = bootstrap
        env[_TOPIC] = f"rs-{uuid.uuid4().hex[:8]}"
        _produce(bootstrap, env[_TOPIC], opts.records)
        results = _measure(opts, env)
    finally:
        if broker is not None:
            _fw("broker", "stop", "--wipe", env=env)
    _report(results, opts)


def _measure(opts: argparse.Namespace, env: dict[str, str]) -> dict[str, dict[str, list[list[float | None]]]]:
    """Each case's runs: ``[wall s, job s, check s]``. First runs each get a fresh ``FW_HOME``; warm runs
    share one of the benchmark's own (not the user's cache, which other checkouts' runs change),
    primed by an uncounted run of each case."""
    from framework.replay.launch import wait_for_archives  # here: the executors import this module

    results: dict[str, dict[str, list[list[float | None]]]] = {}
    warm = {**env, "FW_HOME": tempfile.mkdtemp(prefix="fw-bench-home-")}
    try:
        for kind in [k for k in ("first", "warm") if k in opts.runs.split(",")]:
            for case in opts.cases.split(","):
                runs = results.setdefault(case, {}).setdefault(kind, [])
                if kind == "warm":
                    _replay(case, warm)  # the cache as a machine that ran one before has it
                    wait_for_archives(Path(warm["FW_HOME"]) / "spark-cds")  # its JVM's exit writes the archive
                for i in range(opts.repeat):
                    if kind == "first":  # a machine's first replay: nothing cached by fw
                        home = tempfile.mkdtemp(prefix="fw-bench-home-")
                        wall, job, check = _replay(case, {**env, "FW_HOME": home})
                        # not counted: the archive its JVM writes after the command (the next run
                        # would share the cores with it)
                        wait_for_archives(Path(home) / "spark-cds")
                        shutil.rmtree(home, ignore_errors=True)
                    else:
                        wall, job, check = _replay(case, warm)
                    runs.append([round(wall, 1), job, check])
                    checking = "" if check is None else f", order check {check} s"
                    print(f"{case} {kind} #{i + 1}: {wall:.1f} s from the command to its end (job {job} s{checking}; "
                          f"load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        shutil.rmtree(warm["FW_HOME"], ignore_errors=True)
    return results


def _report(results: dict[str, dict[str, list[list[float | None]]]], opts: argparse.Namespace) -> None:
    print(f"\n{opts.records:,} records, 4 partitions, local[*], {os.cpu_count()} cores; median of {opts.repeat}")
    print("| case | first run s | warm s | order check s (warm) |")
    print("|---|---|---|---|")
    for case, kinds in results.items():
        cells = [_cell([run[0] for run in kinds.get(kind, [])]) for kind in ("first", "warm")]
        cells.append(_cell([run[2] for run in kinds.get("warm", []) if len(run) > 2]))
        print(f"| {case} | {' | '.join(cells)} |")
    if opts.json:
        print(json.dumps({"records": opts.records, "repeat": opts.repeat, "results": results}))


def _cell(values: list[float | None]) -> str:
    """The median and the runs' values, or ``-`` when none has one."""
    known = [v for v in values if v is not None]
    return f"{statistics.median(known):.1f} ({', '.join(f'{v:.1f}' for v in known)})" if known else "-"


if __name__ == "__main__":
    main()
