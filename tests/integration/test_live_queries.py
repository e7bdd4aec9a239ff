"""Live queries of a two-member service's stores over HTTP, on the real broker (docs/queries.md).

* Each member answers ``GET /stores/counts/<key>`` for every key, those of its own
  partitions and those of the other member's (forwarded to it): the same committed count,
  the key's partition, and the member that runs it.
* A scan asked of either member covers both members' partitions, in key order, up to its
  limit; a key that is not URL-encoded is a 400.
* A member restoring a partition answers 503 with the restore's progress for its keys, and
  so does the other member, forwarding to it; once restored it answers the value.
"""

from __future__ import annotations

import shutil
import urllib.parse
from pathlib import Path
from typing import Any

from framework.engine.partitioner import partition_for
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from tests.integration.harness import ServiceProcess, get_json, produce, service_env, wait_until

TARGET = "tests.integration.pipelines:even_odd"
KEYS = [f"k{i}" for i in range(20)]
PER_KEY = 15
ALL = {0, 1, 2, 3}


def _member(svc: ServiceProcess) -> dict[str, Any]:
    code, body = get_json(svc.endpoint() + "/status")
    assert code in (200, 503), body
    return body["members"][0]


def _partitions(svc: ServiceProcess, state: str) -> set[int]:
    return {p["partition"] for p in _member(svc).get("partitions", []) if p["state"] == state}


def _count(svc: ServiceProcess, key: str) -> tuple[int, Any]:
    return get_json(f"{svc.endpoint()}/stores/counts/{urllib.parse.quote(key)}")


def _two_members(bootstrap: str, unique: str, tmp_path: Path) -> tuple[ServiceProcess, ServiceProcess]:
    """Members "a" and "b", started one after the other; returned once the four partitions
    run split between them."""
    ensure_topics(admin_client({"bootstrap.servers": bootstrap}), [TopicSpec(f"numbers-{unique}", 4)])
    env = {**service_env(bootstrap, unique), "FW_OBSERVE__PORT": "0", "FW_OBSERVE__INTERVAL_MS": "200"}
    a = ServiceProcess(TARGET, tmp_path, "a", env).start()
    wait_until(lambda: _partitions(a, "running") == ALL, 60, "member a to run every partition", a.log_text)
    b = ServiceProcess(TARGET, tmp_path, "b", env).start()

    def split() -> bool:
        ra, rb = _partitions(a, "running"), _partitions(b, "running")
        return bool(ra) and bool(rb) and ra | rb == ALL and not ra & rb

    wait_until(split, 60, "the partitions split between both members", lambda: a.log_text() + b.log_text())
    return a, b


def _feed(bootstrap: str, unique: str) -> None:
    produce(bootstrap, f"numbers-{unique}", ((k.encode(), str(i).encode()) for i in range(PER_KEY) for k in KEYS))


def _all_counted(members: tuple[ServiceProcess, ...]) -> bool:
    """Every member answers every key's final count (the last checkpoint has committed it)."""
    for svc in members:
        for key in KEYS:
            code, body = _count(svc, key)
            if code != 200 or [e["value"] for e in body["entries"]] != [PER_KEY]:
                return False
    return True


def test_each_member_answers_for_the_keys_of_both_members(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    a, b = _two_members(kafka_bootstrap, unique, tmp_path)
    try:
        owner = {p: "a" for p in _partitions(a, "running")} | {p: "b" for p in _partitions(b, "running")}
        _feed(kafka_bootstrap, unique)
        wait_until(lambda: _all_counted((a, b)), 120, "both members to answer every key's count",
                   lambda: a.log_text()[-3000:] + b.log_text()[-3000:])
        assert {owner[partition_for(k.encode(), 4)] for k in KEYS} == {"a", "b"}, "keys on both members"
        for svc in (a, b):
            for key in KEYS:
                p = partition_for(key.encode(), 4)
                code, body = _count(svc, key)
                assert code == 200, body
                assert body == {"store": "counts", "key": key, "partition": p, "member": owner[p],
                                "source": "active",
                                "entries": [{"partition": p, "member": owner[p], "source": "active",
                                             "state": "acc", "key": key, "value": PER_KEY}]}
    finally:
        assert b.stop() == 0 and a.stop() == 0


def test_a_scan_asked_of_either_member_covers_both_members_in_key_order(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    a, b = _two_members(kafka_bootstrap, unique, tmp_path)
    try:
        _feed(kafka_bootstrap, unique)
        wait_until(lambda: _all_counted((a,)), 120, "member a to answer every key's count",
                   lambda: a.log_text()[-3000:] + b.log_text()[-3000:])
        ones = sorted(k for k in KEYS if k.startswith("k1"))
        for svc in (a, b):
            code, body = get_json(f"{svc.endpoint()}/stores/counts?prefix=k1")
            assert code == 200, body
            assert [(e["key"], e["value"]) for e in body["entries"]] == [(k, PER_KEY) for k in ones]
            assert {e["member"] for e in body["entries"]} == {"a", "b"}
            assert body["truncated"] is False and body["partitions"] == [0, 1, 2, 3]
            code, body = get_json(f"{svc.endpoint()}/stores/counts?from=k10&to=k13&limit=2")
            assert code == 200, body
            assert [e["key"] for e in body["entries"]] == ["k10", "k11"] and body["truncated"] is True
        assert get_json(f"{a.endpoint()}/stores") == (200, {"stores": ["sums", "counts"]})
        assert get_json(f"{a.endpoint()}/stores/counts/%ZZ") == (400, {"error": (
            "key '%ZZ' is not URL-encoded: '%ZZ' is no percent-escape. Fix: encode it (a '%' is %25)")})
    finally:
        assert b.stop() == 0 and a.stop() == 0


def test_a_restoring_partition_answers_503_with_its_progress_from_either_member(
        kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    a, b = _two_members(kafka_bootstrap, unique, tmp_path)
    try:
        _feed(kafka_bootstrap, unique)
        wait_until(lambda: _all_counted((a, b)), 120, "both members to answer every key's count",
                   lambda: a.log_text()[-3000:] + b.log_text()[-3000:])
        assert b.stop() == 0
        # Without its local state member b restores every partition it gets; its loop is held
        # at the first restore batch until the file "go" exists (its HTTP thread answers).
        shutil.rmtree(b.state_dir)
        go = tmp_path / "go"
        b.start({"FW_HOLD_POINT": f"restore_batch:1:{go}"})
        wait_until(lambda: bool(_partitions(b, "restoring")), 60, "member b to restore", b.log_text)
        restoring = _partitions(b, "restoring")
        key = next(k for k in KEYS if partition_for(k.encode(), 4) in restoring)
        p = partition_for(key.encode(), 4)
        for svc in (b, a):  # a forwards to b, the partition's owner
            code, body = _count(svc, key)
            assert code == 503, body
            assert body["member"] == "b" and body["partition"] == p and body["store"] == "counts"
            assert body["restore"]["remaining"] > 0
            assert body["error"] == (f"store 'counts' partition {p} is restoring on member b: "
                                     f"{body['restore']['restored']} records restored, "
                                     f"{body['restore']['remaining']} to restore; ask again when it is done")
        go.touch()
        wait_until(lambda: _count(b, key)[0] == 200, 120, "member b to answer once restored", b.log_text)
        code, body = _count(a, key)
        assert code == 200 and body["member"] == "b" and [e["value"] for e in body["entries"]] == [PER_KEY]
    finally:
        go_file = tmp_path / "go"
        go_file.touch()
        assert b.stop() == 0 and a.stop() == 0
