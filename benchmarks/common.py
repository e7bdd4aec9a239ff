"""What every system of the benchmark suite shares: the workloads' parameters, the Avro
schemas and the settings an app receives from the runner (standard library only, so the
Quix Streams venv imports it too).

An app is started by ``benchmarks/suite.py`` with these environment variables:

    BENCH_BOOTSTRAP   the broker              BENCH_WORKLOAD   w1 | w2 | w3 | w4 | j1
    BENCH_GUARANTEE   exactly_once | at_least_once
    BENCH_INPUT       input topic             BENCH_OUTPUT     output topic (4 partitions)
    BENCH_GROUP       consumer group / application id / service name
    BENCH_STATE_DIR   a fresh directory for local state
    BENCH_COMMIT_MS   checkpoint / commit interval (1000)
    BENCH_TABLE       j1 only: the customers topic (the table; BENCH_INPUT holds the orders)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
AVRO_DIR = HERE / "avro"

KEYS = 10_000            # distinct keys in the data
WINDOW_MS = 10_000       # W3: tumbling window size
BOUND_MS = 2_000         # watermark out-of-orderness bound = grace period everywhere
GAP_MS = 1_001           # W4: session gap (odd: data timestamps are even, so no gap ties)
MAX_JITTER_MS = 998      # how far a record's ts lies behind its position's time (< BOUND_MS)
RECORDS_PER_2MS = 20     # event time advances 2 ms every 20 records (10 records per ms)
SENTINEL_KEY = "~end"    # one record per partition far in the future: closes every window
SENTINEL_AHEAD_MS = 600_000

WORKLOADS = {
    "w1": "stateless: Avro decode -> filter -> map -> Avro encode",
    "w2": "keyed rolling count and sum per key",
    "w3": "event-time tumbling window (10 s) average per key",
    "w4": "event-time session windows (gap 1001 ms) count and sum per key",
    "j1": "stream-table join: each order enriched with its customer's value as of the order's time (left join)",
}
JOIN_WORKLOADS = ("j1",)  # read two topics: orders (BENCH_INPUT) and customers (BENCH_TABLE)
JOIN_KEYS = 100_000      # j1: customers, each updated JOIN_VERSIONS times; JOIN_DELETE_EVERY-th deleted
JOIN_VERSIONS = 3
JOIN_DELETE_EVERY = 100
HISTORY_MS = 86_400_000  # j1: how long each system keeps a customer's versions (one day: the whole data)
GUARANTEES = ("exactly_once", "at_least_once")


def keep(value: int) -> bool:
    """W1's filter."""
    return value % 5 != 0


def passes_nothing(_value: object) -> bool:
    """The filter of an app whose outputs are not measured (a pipeline needs a sink)."""
    return False


def mapped(value: int) -> int:
    """W1's map of the value field."""
    return value * 3 + 1


def schema(name: str) -> dict:
    """One of the Avro schemas in benchmarks/avro (event, agg, window_avg, session)."""
    return json.loads((AVRO_DIR / f"{name}.avsc").read_text())


OUTPUT_SCHEMA = {"w1": "event", "w2": "agg", "w3": "window_avg", "w4": "session", "j1": "enriched"}


def enrich(order: dict, customer: dict | None) -> dict:
    """j1's output: the order with its customer's value as of the order's time (None: no
    customer then, or deleted)."""
    return {**order, "customer_value": None if customer is None else customer["value"]}


@dataclass(frozen=True)
class AppSettings:
    bootstrap: str
    workload: str
    guarantee: str
    input: str
    output: str
    group: str
    state_dir: str
    commit_ms: int
    table: str = ""

    @property
    def exactly_once(self) -> bool:
        return self.guarantee == "exactly_once"


def settings(env: dict[str, str] | None = None) -> AppSettings:
    e = os.environ if env is None else env
    return AppSettings(e["BENCH_BOOTSTRAP"], e["BENCH_WORKLOAD"], e["BENCH_GUARANTEE"], e["BENCH_INPUT"],
                       e["BENCH_OUTPUT"], e["BENCH_GROUP"], e.get("BENCH_STATE_DIR", "/tmp/bench-state"),
                       int(e.get("BENCH_COMMIT_MS", "1000")), e.get("BENCH_TABLE", ""))
