"""The hot loop alone: W1 and W2 of the suite through the task runner, without a broker, in CPU
seconds per million records. Not part of the test suite.

    .venv/bin/python benchmarks/hot_loop.py                    # W1 and W2, 300,000 records, 5 rounds
    .venv/bin/python benchmarks/hot_loop.py --records 500000 --rounds 7 --workloads w2

Each round runs the suite's pipeline (``benchmarks/apps/fw_app.py``, the suite's data) over the
same Avro records, one partition, in batches of 5,000 through ``TaskRunner.process`` as the Kafka
runtime calls it (with a checkpoint deadline), into an output that drops what it is given, with a
checkpoint every 100,000 records into in-memory state. CPU time (``time.process_time``), not wall
time, so another process on the machine changes the figure little: it compares two versions of
the runner's per-record path, each run in its own checkout. Prints the median and the range.
"""

from __future__ import annotations

import argparse
import inspect
import os
import statistics
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.suite import Avro, generate
from framework.engine.record import Record
from framework.engine.runner import TaskRunner
from framework.state.memory import MemoryBackend

BATCH, CHECKPOINT_EVERY = 5_000, 100_000


class Dropped:
    """An output that keeps nothing (the producer's work is not what is measured here)."""

    def produce(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int, headers: Any = None,
                partition: int | None = None) -> None:
        pass

    def produce_changelog(self, topic: str, partition: int, key: bytes, value: bytes | None, headers: Any) -> None:
        pass


class Commit:
    def commit(self, positions: Mapping[tuple[str, int], int]) -> Mapping[tuple[str, int], int]:
        return {}


def round_cpu_s(workload: str, records: list[Record]) -> float:
    os.environ.update({"BENCH_BOOTSTRAP": "-", "BENCH_WORKLOAD": workload, "BENCH_GUARANTEE": "exactly_once",
                       "BENCH_INPUT": "in", "BENCH_OUTPUT": "out", "BENCH_GROUP": f"hot-{workload}"})
    from benchmarks.apps.fw_app import pipeline

    runner = TaskRunner(pipeline(), MemoryBackend(), Dropped(), partitions=1)
    runner.start(0)
    timed = "until" in inspect.signature(runner.process).parameters  # a runner from before time-bounded batches
    started = time.process_time()
    for i in range(0, len(records), BATCH):
        batch = records[i:i + BATCH]
        if timed:
            runner.process(batch, until=time.monotonic() + 1.0)
        else:
            runner.process(batch)
        runner.end_batch()
        if (i + BATCH) % CHECKPOINT_EVERY == 0:
            runner.checkpoint({("in", 0): i + BATCH}, Commit())
    took = time.process_time() - started
    runner.close()
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workloads", default="w1,w2")
    args = ap.parse_args()
    avro = Avro("event")
    records = [Record("in", 0, i, k.encode(), avro.encode({"key": k, "value": v, "ts": ts}), ts)
               for i, (k, v, ts) in enumerate(generate(args.records))]
    for workload in args.workloads.split(","):
        per_million = sorted(round_cpu_s(workload, records) / len(records) * 1e6 for _ in range(args.rounds))
        print(f"{workload}: {statistics.median(per_million):.3f} CPU s per million records "
              f"(min {per_million[0]:.3f}, max {per_million[-1]:.3f}, {args.rounds} rounds of {args.records:,})")


if __name__ == "__main__":
    main()
