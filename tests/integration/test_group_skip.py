"""``fw group skip`` against a real `fw run` process under ``on_error=fail``.

``redrive_orders`` raises in ``screen`` on an amount of 7, on the source topic's task, before
the by-user repartition topic and the running tally per user. The member processes good
orders without checkpointing them (a 5-minute interval), then meets the poison order and
stops: the good orders before it are in the interval that failed. With the member stopped,
``fw group skip`` names the poison order; started again, the member processes every good
order once (the tally counts each user's orders 1, 2, ... in the committed output), the
poison order is the one dead letter, saying it was skipped and why, and nothing else is
skipped. While a member runs, and for bad input, ``fw group skip`` changes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from framework.engine.partitioner import partition_for
from framework.kafka.io import produce_values
from tests.integration.harness import ServiceProcess, read_topic, service_env, wait_until
from tests.integration.test_ops_cli import fw_process

TARGET = "tests.integration.pipelines:redrive_orders"
T0 = 1_790_000_000_000  # 2026-09-21T14:13:20Z: the inputs' timestamps, T0 + their index
BEFORE = [("ann", 5), ("bob", 20), ("ann", 1), ("cyd", 3), ("bob", 2)]
POISON = ("dan", 7)
AFTER = [("ann", 4), ("dan", 6), ("cyd", 30)]
REASON = "dan's order 7 was entered by mistake"


def _produce(bootstrap: str, topic: str, orders: list[tuple[str, int]], first: int) -> None:
    """Under key ``k``: one partition, offsets ``first``, ``first + 1``, ... in order."""
    produce_values(bootstrap, topic, [(b"k", json.dumps({"user": u, "amount": a}).encode(), T0 + first + i)
                                      for i, (u, a) in enumerate(orders)])


def _tallies(bootstrap: str, unique: str) -> list[dict[str, Any]]:
    """The committed output, by user and tally (the topic's partitions hold different users)."""
    out = [json.loads(r.value) for r in read_topic(bootstrap, f"rdo-checked-{unique}") if r.value is not None]
    return sorted(out, key=lambda t: (t["user"], t["orders"]))


def _expected() -> list[dict[str, Any]]:
    counts: dict[str, int] = {}
    out = []
    for user, amount in [*BEFORE, *AFTER]:
        counts[user] = counts.get(user, 0) + 1
        out.append({"user": user, "orders": counts[user], "amount": amount})
    return sorted(out, key=lambda t: (t["user"], t["orders"]))


def test_a_skipped_record_is_dead_lettered_and_every_other_record_is_processed_once(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    env = {**service_env(kafka_bootstrap, unique), "FW_PROCESSING__ON_ERROR": "fail"}
    long_interval = {"FW_PROCESSING__CHECKPOINT_INTERVAL_MS": "300000", "FW_KAFKA__TRANSACTION_TIMEOUT_MS": "320000"}
    source, dlq, skips = f"rdo-orders-{unique}", f"rdo-{unique}-dead-letter", f"rdo-{unique}-skips"
    p = partition_for(b"k", 2)
    poison = f"{source}:{p}:{len(BEFORE)}"
    svc = ServiceProcess(TARGET, tmp_path, "0", env).start(long_interval)
    services.append(svc)
    svc.endpoint()

    # The good orders processed (their repartition records in the open transaction), not checkpointed.
    _produce(kafka_bootstrap, source, BEFORE, 0)
    wait_until(lambda: len(read_topic(kafka_bootstrap, f"rdo-{unique}-by-user-repartition", "read_uncommitted"))
               >= len(BEFORE), 120, "the good orders processed", svc.log_text)

    # While the member runs: refused, nothing written.
    refused = fw_process(env, "group", "skip", TARGET, poison, "--reason", REASON)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith(f"error: consumer group 'rdo-{unique}' has 1 active member(s) ("), refused.stderr
    assert refused.stderr.rstrip().endswith("a skip-list change would race them. Fix: stop every instance of the "
                                            "service, then add the skip"), refused.stderr
    assert read_topic(kafka_bootstrap, skips) == []

    # The poison order in the same interval: the member stops, naming it.
    _produce(kafka_bootstrap, source, [POISON, *AFTER], len(BEFORE))
    assert svc.wait_exit(120) != 0
    assert svc.log_text().rstrip().splitlines()[-1].startswith(
        f"error: {source}[{p}]@{len(BEFORE)} in step 'screen': ValueError: seven is screened out"), svc.log_text()
    assert _tallies(kafka_bootstrap, unique) == [] and read_topic(kafka_bootstrap, dlq) == []

    # Bad input: one line each, nothing written.
    last, past = len(BEFORE) + len(AFTER), len(BEFORE) + len(AFTER) + 1
    for args, code, said in [
        (["tests.integration.pipelines:no_such_service", poison], 2,
         "error: tests.integration.pipelines has no attribute 'no_such_service'"),
        (["no-such-service", poison], 2, "error: fw group skip needs the pipeline's code"),
        ([TARGET, f"{source}:{p}"], 2, f"error: '{source}:{p}' is not one record: give it as topic:partition:offset"),
        ([TARGET, f"{source}:{p}:{past}"], 1,
         f"error: {source}[{p}] holds offsets 0 to {last}: there is no record {source}[{p}]@{past} to skip"),
        ([TARGET, f"{source}:7:1"], 1, f"error: {source} has no partition 7 (it has 2, 0 to 1)"),
        ([TARGET, f"rdo-checked-{unique}:0:0"], 2, f"error: service rdo-{unique} does not read 'rdo-checked-"),
    ]:
        bad = fw_process(env, "group", "skip", *args)
        assert bad.returncode == code and bad.stderr.count("\n") == 1, (args, bad.stderr)
        assert bad.stderr.startswith(said), (args, bad.stderr)
    assert read_topic(kafka_bootstrap, skips) == []

    # The skip, twice: the second changes nothing.
    done = fw_process(env, "group", "skip", TARGET, poison, "--reason", REASON)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"added {source}[{p}]@{len(BEFORE)} to the skip list of service rdo-{unique} "
                                  f"({REASON}): "), done.stdout
    again = fw_process(env, "group", "skip", TARGET, poison, "--reason", REASON)
    assert again.returncode == 0 and again.stdout == (f"{source}[{p}]@{len(BEFORE)} is in the skip list of service "
                                                      f"rdo-{unique} already: nothing changed\n"), again.stdout
    listed = fw_process(env, "group", "skips", TARGET, "--json")
    assert [(e["record"], e["reason"]) for e in json.loads(listed.stdout)] == [(f"{source}[{p}]@{len(BEFORE)}", REASON)]
    assert len(read_topic(kafka_bootstrap, skips)) == 1

    # Started again: every good order once, the poison order dead-lettered as skipped.
    svc.start()
    wait_until(lambda: len(_tallies(kafka_bootstrap, unique)) >= len(BEFORE) + len(AFTER), 120,
               "every good order tallied", svc.log_text)
    assert svc.stop() == 0
    assert _tallies(kafka_bootstrap, unique) == _expected()
    [letter] = read_topic(kafka_bootstrap, dlq)
    assert json.loads(letter.value or b"") == {"user": "dan", "amount": 7}
    assert letter.headers["fw.step"] == b"screen"
    assert letter.headers["fw.source.offset"] == str(len(BEFORE)).encode()
    assert letter.headers["fw.skipped"] == f"{source}[{p}]@{len(BEFORE)}".encode()
    assert letter.headers["fw.skip.reason"] == REASON.encode()
    warned = [line for line in svc.log_text().splitlines() if " skipped " in line or "skipped " in line[:40]]
    assert len(warned) == 1 and f"{source}[{p}]@{len(BEFORE)}" in warned[0] and REASON in warned[0], warned

    # Removed: the list is empty again.
    removed = fw_process(env, "group", "skip", TARGET, poison, "--remove")
    assert removed.returncode == 0 and removed.stdout.startswith(f"removed {source}[{p}]@{len(BEFORE)} "), removed
    assert json.loads(fw_process(env, "group", "skips", TARGET, "--json").stdout) == []
