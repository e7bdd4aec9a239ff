"""At-least-once under the same SIGKILLs: nothing is lost; duplicates are allowed."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.harness import ServiceProcess, present, wait_until
from tests.integration.test_exactly_once import (
    CRASH_POINTS,
    CRASH_RUN_ENV,
    KEYS,
    TARGET,
    N,
    Outputs,
    _create_input,
    _env,
    _even_chunks,
    _feed,
)


@pytest.mark.chaos
def test_at_least_once_loses_nothing_under_crashes(kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    _create_input(kafka_bootstrap, unique)
    svc = ServiceProcess(TARGET, tmp_path, "0", _env(kafka_bootstrap, unique, "at_least_once"))
    out = Outputs(kafka_bootstrap, unique)
    chunks = _even_chunks(len(CRASH_POINTS) + 1)  # fresh input before every crash run
    for i, point in enumerate(CRASH_POINTS):
        _feed(kafka_bootstrap, unique, i, chunks)
        svc.start(CRASH_RUN_ENV | {"FW_CRASH_POINT": point})
        assert svc.wait_exit(120) == -9, f"crash point {point} not reached:\n{svc.log_text()[-3000:]}"
    _feed(kafka_bootstrap, unique, len(CRASH_POINTS), chunks)
    svc.start()
    expected = Counter(str(n % KEYS).encode() for n in range(1, N + 1))

    def every_number_seen() -> bool:
        out.drain()
        return len({json.loads(present(r.value)) for r in out.seen.records}) == N

    wait_until(every_number_seen, 300, "every input in the echo", svc.log_text)

    def final_counts_reached() -> bool:
        out.drain()
        last: dict[bytes | None, int] = {}
        for r in sorted(out.counts.records, key=lambda r: (r.partition, r.offset)):
            last[r.key] = json.loads(present(r.value))
        return len(last) == KEYS and all(last[k] >= n for k, n in expected.items())

    wait_until(final_counts_reached, 300, "every key counted at least as often as it occurred", svc.log_text)
    assert svc.stop() == 0
    per_key: dict[bytes | None, set[int]] = {}
    for r in out.counts.records:
        per_key.setdefault(r.key, set()).add(json.loads(present(r.value)))
    for key, n in expected.items():  # counts only grow by one: every value up to the true count was emitted
        assert set(range(1, n + 1)) <= per_key[key], f"count outputs of key {key!r} have a gap"
    sums = {p: max(json.loads(present(r.value)) for r in out.sums.records if r.key == p.encode())
            for p in ("even", "odd")}
    assert sums["even"] >= sum(range(2, N + 1, 2)) and sums["odd"] >= sum(range(1, N + 1, 2))
