"""A running member shows itself, on the real broker: metrics, /status, /health and /ready.

* The counters equal what was processed and produced; lag falls to 0 once everything is
  read; the watermark gauge equals the watermark the source's generator must be at; dead
  letters and late records are counted; a checkpoint's age stays near its interval.
* A member restoring a changelog is not ready, and its /status shows the restore's
  progress; once restored it is ready and has applied every changelog record.
* A member whose loop is held in a step's code is unhealthy until the step returns.
* ``fw run --processes 2`` serves one address for both children: its /metrics sums
  theirs, its /status lists both, and it is ready when both are.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from framework.runtime.processes import child_ids
from tests.integration.harness import (
    ServiceProcess,
    get_json,
    metric_values,
    produce,
    produce_to_partitions,
    read_topic,
    read_topics,
    service_env,
    wait_until,
)
from tests.integration.pipelines import OBSERVED_BOUND_MS

OBSERVE = {"FW_OBSERVE__PORT": "0", "FW_OBSERVE__INTERVAL_MS": "200"}
T0 = 1_700_000_000_000  # event time of the first reading


def _member(url: str) -> dict[str, Any]:
    code, body = get_json(url + "/status")
    assert code == 200, body
    (member,) = body["members"]
    return member


def test_counters_lag_watermarks_and_checkpoint_age_match_what_was_processed(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    src = f"obs-in-{unique}"
    env = {**service_env(kafka_bootstrap, unique), **OBSERVE, "FW_PROCESSING__CHECKPOINT_INTERVAL_MS": "500"}
    svc = ServiceProcess("tests.integration.pipelines:observed", tmp_path, "0", env).start()
    try:
        url = svc.endpoint()
        wait_until(lambda: get_json(url + "/ready")[0] == 200, 60, "the member to be ready", svc.log_text)
        # per partition: 150 readings 10 ms apart, then (partition 1) one reading 5 s behind the
        # watermark (late), and (partition 0) one value that is not JSON (poison)
        records: list[tuple[Any, ...]] = []
        last_ts = {}
        for p in (0, 1):
            for i in range(150):
                ts = T0 + p * 60_000 + i * 10
                records.append((p, f"k{i % 3}".encode(), json.dumps({"ts": ts, "v": i}).encode()))
            last_ts[p] = ts
        records.append((1, b"k0", json.dumps({"ts": T0 + 60_000 - 5_000, "v": -1}).encode()))
        records.append((0, b"k0", b"{not json"))
        produce_to_partitions(kafka_bootstrap, src, records)

        ages: list[float] = []

        def caught_up() -> bool:
            member = _member(url)
            ages.append(member["checkpoint"]["age_s"])
            consumed = metric_values(url + "/metrics", "fw_records_consumed_total")
            return (consumed.get((("topic", src),)) == len(records) and member["lag"] == 0
                    and all(p["lag"] == 0 for p in member["partitions"]))

        wait_until(caught_up, 90, "every record counted and lag 0", svc.log_text)
        member = _member(url)
        assert {p["partition"] for p in member["partitions"]} == {0, 1}
        assert member["records_processed"] == len(records)

        # Flink's bounded out-of-orderness: the largest timestamp seen - bound - 1
        watermark = metric_values(url + "/metrics", "fw_watermark_seconds")
        for p in (0, 1):
            expected = (last_ts[p] - OBSERVED_BOUND_MS - 1) / 1000
            assert watermark[(("partition", str(p)), ("step", "per-second"))] == expected
            shown = next(w for w in member["watermarks"] if w["partition"] == p and w["step"] == "per-second")
            assert shown["watermark_ms"] == last_ts[p] - OBSERVED_BOUND_MS - 1
        assert metric_values(url + "/metrics", "fw_dead_letters_total") == {(): 1.0}
        assert metric_values(url + "/metrics", "fw_late_records_total") == {(("step", "per-second"),): 1.0}
        assert member["counters"]["dead_letters"] == 1
        assert member["counters"]["late_records"] == {"per-second": 1}

        # produced counters equal the committed records of each output (no aborts here)
        outputs = [f"obs-out-{unique}", f"obs-late-{unique}", f"obs-{unique}-dead-letter"]

        def produced_match() -> bool:
            produced = metric_values(url + "/metrics", "fw_records_produced_total")
            committed = read_topics(kafka_bootstrap, outputs)
            return all(produced.get((("topic", t),), 0) == len(committed[t]) for t in outputs)

        wait_until(produced_match, 60, "produced counters to equal the committed outputs", svc.log_text)
        assert len(read_topic(kafka_bootstrap, f"obs-late-{unique}")) == 1
        assert metric_values(url + "/metrics", "fw_transaction_aborts_total") == {(): 0.0}
        assert metric_values(url + "/metrics", "fw_checkpoints_total")[()] >= 1
        interval = member["checkpoint"]["interval_s"]
        assert interval == 0.5
        # where a checkpoint's time goes: every part of an exactly-once one took some (the
        # means of completed checkpoints), the broker's round trips in offsets and commit
        phases = _member(url)["checkpoint"]["phases_ms"]
        assert set(phases) == {"state", "flush", "offsets", "commit"}
        assert all(v >= 0 for v in phases.values()) and phases["offsets"] > 0 and phases["commit"] > 0
        assert max(ages) <= interval + 2.0, ages  # never far beyond the interval while healthy
    finally:
        assert svc.stop() == 0


def test_a_restoring_member_is_not_ready_and_shows_its_progress(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    n = 30_000  # distinct keys: the counts changelog holds at least one record for each
    env = {**service_env(kafka_bootstrap, unique), **OBSERVE}
    svc = ServiceProcess("tests.integration.pipelines:even_odd", tmp_path, "0", env).start()
    produce(kafka_bootstrap, f"numbers-{unique}", ((f"k{i}".encode(), str(i).encode()) for i in range(n)))
    wait_until(lambda: len(read_topic(kafka_bootstrap, f"seen-{unique}")) == n, 120, "the first run's outputs",
               svc.log_text)
    assert svc.stop() == 0
    changelogs = [f"eo-{unique}-counts-changelog", f"eo-{unique}-sums-changelog"]
    in_changelogs = sum(len(r) for r in read_topics(kafka_bootstrap, changelogs).values())
    assert in_changelogs >= n

    # Without its local state the member restores everything. The loop is held at the 9th
    # restore batch: a step applies at most one batch per changelog partition (8 here), so
    # one step's progress has been published by then.
    shutil.rmtree(svc.state_dir)
    go = tmp_path / "go"
    svc.start({"FW_HOLD_POINT": f"restore_batch:9:{go}"})
    try:
        url = svc.endpoint()

        def restoring() -> bool:
            member = _member(url)
            return member["state"] == "restoring" and member["restore"]["restored"] > 0

        wait_until(restoring, 60, "the member to show its restore", svc.log_text)
        code, body = get_json(url + "/ready")
        assert code == 503 and body["ready"] is False
        member = _member(url)
        assert member["ready"] is False
        held = member["restore"]
        assert 0 < held["restored"] < in_changelogs and held["remaining"] > 0
        assert {p["state"] for p in member["partitions"]} == {"restoring"}
        # the store partitions still restoring (finished ones have left the list)
        assert held["stores"] and all(s["remaining"] > 0 for s in held["stores"])
        assert sum(s["restored"] for s in held["stores"]) <= held["restored"]

        go.touch()
        wait_until(lambda: get_json(url + "/ready")[0] == 200, 120, "the member to be ready", svc.log_text)
        member = _member(url)
        assert member["state"] == "running"
        assert {p["state"] for p in member["partitions"]} == {"running"}
        assert member["restore"]["remaining"] == 0
        restored = metric_values(url + "/metrics", "fw_restored_records_total")
        assert sum(restored.values()) == in_changelogs == member["restore"]["restored"]
        assert metric_values(url + "/metrics", "fw_restore_remaining_records") in ({}, {
            k: 0.0 for k in metric_values(url + "/metrics", "fw_restore_remaining_records")})
    finally:
        assert svc.stop() == 0


def test_a_member_held_in_a_step_is_unhealthy_until_the_step_returns(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    env = {**service_env(kafka_bootstrap, unique), **OBSERVE, "FW_OBSERVE__HEALTH_TIMEOUT_MS": "1000"}
    svc = ServiceProcess("tests.integration.pipelines:blocking", tmp_path, "0", env).start()
    try:
        url = svc.endpoint()
        wait_until(lambda: get_json(url + "/ready")[0] == 200, 60, "the member to be ready", svc.log_text)
        code, body = get_json(url + "/health")
        assert code == 200 and body["status"] == "ok"
        release = tmp_path / "release"
        produce(kafka_bootstrap, f"blk-in-{unique}", [(b"a", json.dumps({"block": str(release)}).encode())])

        wait_until(lambda: get_json(url + "/health")[0] == 503, 60, "/health to report the stall", svc.log_text)
        code, body = get_json(url + "/health")
        assert code == 503 and body["status"] == "stalled"
        assert get_json(url + "/ready")[0] == 503
        assert get_json(url + "/status")[0] == 200  # the endpoint still answers

        release.touch()
        wait_until(lambda: get_json(url + "/health")[0] == 200, 60, "/health to recover", svc.log_text)
        wait_until(lambda: len(read_topic(kafka_bootstrap, f"blk-out-{unique}")) == 1, 60, "the held record's output",
                   svc.log_text)
    finally:
        assert svc.stop() == 0


def test_the_supervisor_of_two_processes_sums_their_metrics_and_lists_both(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    n = 2_000
    env = {**service_env(kafka_bootstrap, unique), **OBSERVE}
    svc = ServiceProcess("tests.integration.pipelines:even_odd", tmp_path, "pair", env,
                         args=["--processes", "2"]).start()
    try:
        url = svc.endpoint(supervisor=True)
        produce(kafka_bootstrap, f"numbers-{unique}", ((f"k{i % 11}".encode(), str(i).encode()) for i in range(n)))

        def both_done() -> bool:
            # Every record read twice: from the source, then from the repartition topic.
            consumed = metric_values(url + "/metrics", "fw_records_consumed_total")
            members = get_json(url + "/status")[1]["members"]
            # /metrics and /status both add up the two children.
            return (consumed.get((("topic", f"numbers-{unique}"),)) == n and sum(consumed.values()) == 2 * n
                    and len(members) == 2 and sum(m.get("records_processed") or 0 for m in members) == 2 * n
                    and all(m.get("partitions") for m in members) and get_json(url + "/ready")[0] == 200)

        wait_until(both_done, 120, "both children's counts summed and both ready", svc.log_text)
        members = get_json(url + "/status")[1]["members"]
        assert sorted(m["instance"] for m in members) == child_ids(2, None)  # <host>-0, <host>-1
        owned = sorted(p["partition"] for m in members for p in m["partitions"])
        assert owned == [0, 1, 2, 3]  # every task in exactly one child
        info = metric_values(url + "/metrics", "fw_member_info")
        assert sorted(dict(labels)["instance"] for labels in info) == child_ids(2, None)
        assert get_json(url + "/health")[0] == 200
    finally:
        assert svc.stop() == 0
