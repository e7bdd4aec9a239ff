"""A slow step never takes a member down, on the real broker (docs/operations.md, "Slow steps").

The case users meet first: a step that calls another service takes 40 ms a record. With the
checkpoint on time rather than per batch, a member holding 2,000 such records (80 s
of work, past the 60 s transaction timeout) checkpoints every second, its /status
moves, and everything is committed exactly once; one record far slower than the others gets
one WARNING naming the step and the record.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from tests.integration.harness import (
    ServiceProcess,
    Tail,
    get_json,
    produce_to_partitions,
    read_topic,
    wait_until,
)
from tests.present import present

TARGET = "tests.integration.pipelines:slow_spend"
RECORDS, USERS, SLOW = 2000, 20, 1234


def test_a_step_of_40_ms_a_record_checkpoints_every_second_and_loses_nothing(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(f"spend-{unique}", 4)])
    spend = [{"user": f"u{i % USERS}", "amount": i, **({"slow": True} if i == SLOW else {})} for i in range(RECORDS)]
    produce_to_partitions(kafka_bootstrap, f"spend-{unique}", [
        (i % 4, str(i).encode(), json.dumps(r).encode()) for i, r in enumerate(spend)])
    # the defaults a user has: 1 s checkpoints, batches of 5,000, a 60 s transaction timeout
    svc = ServiceProcess(TARGET, tmp_path, "0", {
        "FW_BOOTSTRAP_SERVERS": kafka_bootstrap, "FW_TEST_SUFFIX": unique,
        "FW_PROCESSING__SLOW_RECORD_WARNING_MS": "1000", "FW_OBSERVE__PORT": "0"}).start()
    checked = Tail(kafka_bootstrap, f"checked-{unique}")
    samples: list[tuple[int, int]] = []  # (records processed, checkpoints completed) while it worked
    try:
        url = svc.endpoint()

        def sample() -> bool:
            assert svc.alive, svc.log_text()
            _code, status = get_json(f"{url}/status")
            member = status["members"][0] if "members" in status else status
            if member.get("records_processed") is not None:
                samples.append((member["records_processed"], member["checkpoint"]["completed"]))
            return checked.drain() >= RECORDS

        wait_until(sample, 600, "every record checked and committed", svc.log_text)
        assert svc.alive
    finally:
        checked.close()
        assert svc.stop() == 0, svc.log_text()

    # each record is processed twice: from the source, then from the repartition topic
    working = [(n, c) for n, c in samples if 0 < n < 2 * RECORDS]
    assert len({n for n, _ in working}) >= 5, f"/status showed the work moving: {samples}"
    assert len({c for _, c in working}) >= 5, f"checkpoints came while the records were worked on: {samples}"

    got = Counter(json.loads(present(r.value))["amount"] for r in read_topic(kafka_bootstrap, f"checked-{unique}"))
    assert got == Counter(range(RECORDS)), "every record checked exactly once"
    totals: dict[str, list[int]] = {}
    for r in sorted(read_topic(kafka_bootstrap, f"totals-{unique}"), key=lambda r: r.offset):
        totals.setdefault(present(r.key).decode(), []).append(json.loads(present(r.value)))
    for u in range(USERS):
        amounts = [i for i in range(RECORDS) if i % USERS == u]
        assert len(totals[f"u{u}"]) == len(amounts) and totals[f"u{u}"][-1] == sum(amounts)

    log = svc.log_text()
    assert not [line for line in log.splitlines() if " ERROR " in line], log
    [warning] = [line for line in log.splitlines() if "has been in step" in line]
    assert "WARNING" in warning and "step 'check'" in warning, warning
    assert f"spend-{unique}[{SLOW % 4}]@{SLOW // 4} (through slow-{unique}-by-user-repartition[" in warning, warning


def test_a_record_that_outlives_its_transaction_ends_the_member_with_one_line_and_a_restart_goes_on(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    """One record held 30 s in a step, past a 12 s transaction timeout: the broker aborts the
    transaction, the member ends with the line that names the step, the record and the
    setting; started again (the record quick this time) it processes everything once."""
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(f"stall-in-{unique}", 1)])
    produce_to_partitions(kafka_bootstrap, f"stall-in-{unique}", [
        (0, str(i).encode(), json.dumps({"n": i, **({"stall": True} if i == 5 else {})}).encode()) for i in range(10)])
    env = {"FW_BOOTSTRAP_SERVERS": kafka_bootstrap, "FW_TEST_SUFFIX": unique, "FW_OBSERVE__PORT": "0",
           "FW_KAFKA__TRANSACTION_TIMEOUT_MS": "12000"}
    svc = ServiceProcess("tests.integration.pipelines:stalling", tmp_path, "0", env)
    svc.start({"FW_TEST_STALL_S": "30"})
    assert svc.wait_exit(120) == 1, svc.log_text()
    errors = [line for line in svc.log_text().splitlines() if line.startswith("error:")]
    assert len(errors) == 1, svc.log_text()
    assert f"record stall-in-{unique}[0]@5 has been in step 'hang'" in errors[0], errors[0]
    assert "kafka.transaction_timeout_ms (12000)" in errors[0] and "Fix:" in errors[0], errors[0]
    loud = [line for line in svc.log_text().splitlines() if " CRITICAL " in line or " ERROR " in line]
    assert not loud, "the line that ends the member is the one said, not the client's fencing"
    svc.start()
    try:
        wait_until(lambda: len(read_topic(kafka_bootstrap, f"stall-out-{unique}")) >= 10, 120,
                   "every record processed after the restart", svc.log_text)
    finally:
        assert svc.stop() == 0, svc.log_text()
    got = sorted(json.loads(present(r.value))["n"] for r in read_topic(kafka_bootstrap, f"stall-out-{unique}"))
    assert got == list(range(10))
