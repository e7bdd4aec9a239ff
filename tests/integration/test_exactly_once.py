"""Exactly-once under SIGKILL: crashes at exact checkpoint and restore steps and at random
moments, with one process and with two (one killed repeatedly). A read_committed consumer
must see every expected output exactly once, and the final state must equal a run without
crashes."""

from __future__ import annotations

import itertools
import random
import shutil
from pathlib import Path

import pytest

from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from framework.runtime.processes import child_ids
from tests.integration.harness import (
    EvenOddOutputs,
    ServiceProcess,
    check_exactly_once,
    check_final_state,
    even_odd_inputs,
    kill_at_random_after,
    produce,
    service_env,
    wait_until,
)

N = 100_000
KEYS = 1_000
TARGET = "tests.integration.pipelines:even_odd"


# The input arrives in chunks, one before each phase, so every phase has work to crash in.
CHUNKS = [(1, 40_001), (40_001, 60_001), (60_001, 80_001), (80_001, N + 1)]


def _env(bootstrap: str, suffix: str, guarantee: str) -> dict[str, str]:
    return service_env(bootstrap, suffix, guarantee=guarantee, checkpoint_interval_ms=200, batch_size=2000)


class Outputs(EvenOddOutputs):
    def __init__(self, bootstrap: str, suffix: str) -> None:
        super().__init__(bootstrap, suffix, N)


def _check_exactly_once(out: Outputs) -> None:
    check_exactly_once(out, N, KEYS)


def _check_final_state(bootstrap: str, suffix: str) -> None:
    """The compacted changelogs hold the state of a crash-free run."""
    check_final_state(bootstrap, suffix, N, KEYS)


def _create_input(bootstrap: str, suffix: str) -> None:
    """The input topic: numbers in 4 partitions, keyed by n % KEYS."""
    ensure_topics(admin_client({"bootstrap.servers": bootstrap}), [TopicSpec(f"numbers-{suffix}", 4)])


def _feed(bootstrap: str, suffix: str, chunk: int, chunks: list[tuple[int, int]] = CHUNKS) -> None:
    produce(bootstrap, f"numbers-{suffix}", even_odd_inputs(*chunks[chunk], KEYS))


def _even_chunks(k: int) -> list[tuple[int, int]]:
    bounds = [1 + N * i // k for i in range(k)] + [N + 1]
    return list(itertools.pairwise(bounds))


# Crash runs checkpoint after every batch they process (an interval of 1 ms: each batch takes
# longer), in batches of at most 500 records: a run's 12,500 records take at least 25 checkpoints,
# however fast the machine processes them, so the n-th checkpoint comes before its input ends.
CRASH_RUN_ENV = {"FW_PROCESSING__CHECKPOINT_INTERVAL_MS": "1", "FW_PROCESSING__CONSUME_BATCH_SIZE": "500"}
CRASH_POINTS = ["after_changelogs:3", "after_flush:2", "after_commit:4", "after_state_write:2"]


@pytest.mark.chaos
def test_exactly_once_one_process_killed_at_checkpoint_steps_restore_and_random(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    rng = random.Random(unique)
    _create_input(kafka_bootstrap, unique)
    svc = ServiceProcess(TARGET, tmp_path, "0", _env(kafka_bootstrap, unique, "exactly_once"))
    out = Outputs(kafka_bootstrap, unique)

    chunks = _even_chunks(8)  # fresh input before every run, so each has work to crash in
    for i, point in enumerate(CRASH_POINTS):  # a SIGKILL at an exact step of a checkpoint
        _feed(kafka_bootstrap, unique, i, chunks)
        svc.start(CRASH_RUN_ENV | {"FW_CRASH_POINT": point})
        assert svc.wait_exit(120) == -9, f"crash point {point} not reached:\n{svc.log_text()[-3000:]}"
    _feed(kafka_bootstrap, unique, 4, chunks)
    shutil.rmtree(svc.state_dir)  # a lost disk: the next start restores from the changelogs ...
    svc.start({"FW_CRASH_POINT": "restore_batch:2"})  # ... and is killed in the middle of it
    assert svc.wait_exit(120) == -9, f"restore crash point not reached:\n{svc.log_text()[-3000:]}"
    for chunk in (5, 6):  # SIGKILL at random moments while processing
        # Counted before the start: a restarted service can commit all of its input while
        # the tails are still being read, and no progress would be left to wait for.
        progress = sum(out.drain())
        _feed(kafka_bootstrap, unique, chunk, chunks)
        svc.start()
        kill_at_random_after(svc, lambda: sum(out.drain()) > progress,  # noqa: B023 - called at once
                             rng, "progress before a random kill")
    _feed(kafka_bootstrap, unique, 7, chunks)
    svc.start()
    wait_until(out.complete, 300, "all outputs", lambda: f"{out.drain()}\n{svc.log_text()[-3000:]}")
    assert svc.stop() == 0
    assert svc.starts == len(CRASH_POINTS) + 4
    _check_exactly_once(out)
    _check_final_state(kafka_bootstrap, unique)


@pytest.mark.chaos
def test_exactly_once_two_processes_one_killed_repeatedly(kafka_bootstrap: str, unique: str,
                                                         tmp_path: Path) -> None:
    rng = random.Random(unique)
    _create_input(kafka_bootstrap, unique)
    env = _env(kafka_bootstrap, unique, "exactly_once")
    stable = ServiceProcess(TARGET, tmp_path, "0", env).start()
    victim = ServiceProcess(TARGET, tmp_path, "1", env)
    out = Outputs(kafka_bootstrap, unique)
    chunks = _even_chunks(6)
    for chunk in range(5):  # five kills, each with fresh input to crash in
        progress = sum(out.drain())
        _feed(kafka_bootstrap, unique, chunk, chunks)
        victim.start()
        kill_at_random_after(victim, lambda: sum(out.drain()) > progress,  # noqa: B023 - called at once
                             rng, "progress with both processes")
    _feed(kafka_bootstrap, unique, 5, chunks)
    victim.start()
    wait_until(out.complete, 300, "all outputs", lambda: f"{out.drain()}\n{stable.log_text()[-3000:]}")
    assert stable.stop() == 0 and victim.stop() == 0
    assert stable.starts == 1
    _check_exactly_once(out)
    _check_final_state(kafka_bootstrap, unique)


@pytest.mark.chaos
def test_rebalance_state_follows_partitions(kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    """1 process, then a 2nd and a 3rd join, then two leave (SIGTERM): state moves with its
    partitions through the changelogs, and outputs stay exactly once."""
    _create_input(kafka_bootstrap, unique)
    env = _env(kafka_bootstrap, unique, "exactly_once")
    procs = [ServiceProcess(TARGET, tmp_path, str(i), env) for i in range(3)]
    out = Outputs(kafka_bootstrap, unique)

    def phase(chunk: int, what: str) -> None:
        progress = sum(out.drain())
        _feed(kafka_bootstrap, unique, chunk)
        wait_until(lambda: sum(out.drain()) > progress, 120, what, procs[0].log_text)

    procs[0].start()
    phase(0, "progress with one process")
    procs[1].start()
    phase(1, "progress after the second joined")
    procs[2].start()
    phase(2, "progress after the third joined")
    assert procs[0].stop() == 0 and procs[1].stop() == 0
    phase(3, "progress after two left")
    wait_until(out.complete, 300, "all outputs", lambda: f"{out.drain()}\n{procs[2].log_text()[-3000:]}")
    assert procs[2].stop() == 0
    assert "restored and running" in procs[2].log_text()
    _check_exactly_once(out)
    _check_final_state(kafka_bootstrap, unique)


def test_processes_option_runs_group_members_and_stops_cleanly(kafka_bootstrap: str, unique: str,
                                                               tmp_path: Path) -> None:
    """`fw run --processes 2`: two members share the partitions; SIGTERM to the parent stops
    both with a final checkpoint; outputs are exactly once."""
    _create_input(kafka_bootstrap, unique)
    svc = ServiceProcess(TARGET, tmp_path, "supervisor", _env(kafka_bootstrap, unique, "exactly_once"),
                         args=["--processes", "2"])
    out = Outputs(kafka_bootstrap, unique)
    for chunk in range(len(CHUNKS)):
        _feed(kafka_bootstrap, unique, chunk)
    svc.start()
    wait_until(out.complete, 300, "all outputs", lambda: f"{out.drain()}\n{svc.log_text()[-3000:]}")
    assert svc.stop() == 0
    log = svc.log_text()
    for instance in child_ids(2, None):  # <host>-0, <host>-1
        assert f"instance {instance} starting" in log and f"instance {instance} stopped" in log
    _check_exactly_once(out)
    _check_final_state(kafka_bootstrap, unique)
