"""Failover on the real broker: static membership and the consumer group protocol.

* A static member (``--instance-id``) SIGKILLed and restarted with the same id takes its
  partitions back without a rebalance: the other member is never revoked and keeps its
  partitions all along; every input has its outputs exactly once (read_committed). Stopped
  with SIGTERM it leaves the group at once, as a dynamic member does.
* With ``processing.leave_group_on_shutdown = false`` a static member stopped with SIGTERM
  stays in the group, and restarted takes its partitions back without a rebalance.
* ``fw run --processes 2 --instance-id ID``: the children are static members ``ID-0`` and
  ``ID-1``; one SIGKILLed is restarted by the supervisor and takes its partitions back
  without the other being revoked.
* With ``processing.standby_replicas = 1`` each of two members keeps a warm copy of the
  other's tasks; when one is SIGKILLed, the survivor takes its tasks over from those copies
  and applies nothing of the changelogs it had not applied already; outputs stay exactly once.
* With ``group.protocol=consumer`` (KIP-848) two members hold the inputs co-partitioned
  (partition i of the source and of the repartition topic on one member); a member joining
  or leaving moves only the partitions that change owner; outputs are exactly once.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from tests.integration.harness import (
    Record,
    ServiceProcess,
    Tail,
    get_json,
    kill_at_random_after,
    metric_values,
    produce,
    service_env,
    wait_until,
)
from tests.integration.pipelines import parity

TARGET = "tests.integration.pipelines:even_odd"
N = 20_000
KEYS = 100
ALL = {0, 1, 2, 3}


def _env(bootstrap: str, suffix: str, **extra: str) -> dict[str, str]:
    # A session far longer than a restart: the group never times the killed member out,
    # so nothing but static membership can explain that the survivor is not revoked.
    return {**service_env(bootstrap, suffix, checkpoint_interval_ms=200, batch_size=500),
            "FW_KAFKA_CONSUMER__SESSION_TIMEOUT_MS": "30000",
            "FW_OBSERVE__PORT": "0", "FW_OBSERVE__INTERVAL_MS": "200", **extra}


def _feed(bootstrap: str, suffix: str, lo: int, hi: int) -> None:
    produce(bootstrap, f"numbers-{suffix}", ((str(n % KEYS).encode(), str(n).encode()) for n in range(lo, hi)))


def _member(svc: ServiceProcess) -> dict[str, Any]:
    code, body = get_json(svc.endpoint() + "/status")
    assert code in (200, 503), body
    return body["members"][0]


def _running(svc: ServiceProcess) -> set[int]:
    """The partitions whose tasks run in ``svc`` now, as its /status lists them (none before
    its first assignment)."""
    return {p["partition"] for p in _member(svc).get("partitions", []) if p["state"] == "running"}


def _split_between(a: ServiceProcess, b: ServiceProcess) -> bool:
    ra, rb = _running(a), _running(b)
    return bool(ra) and bool(rb) and not ra & rb and ra | rb == ALL


def _revoked(svc: ServiceProcess) -> float:
    counts = metric_values(svc.endpoint() + "/metrics", "fw_rebalances_total")
    return counts.get((("event", "revoked"),), 0.0) + counts.get((("event", "lost"),), 0.0)


def _static_members(bootstrap: str, group: str) -> set[str]:
    """The group.instance.id of each member the broker lists in ``group`` now."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # referenced until the answer is in
    [future] = admin.describe_consumer_groups([group], request_timeout=30).values()
    return {m.group_instance_id for m in future.result(timeout=60).members}


def _value(r: Record) -> Any:
    assert r.value is not None, f"a tombstone at offset {r.offset}"
    return json.loads(r.value)


class Outputs:
    def __init__(self, bootstrap: str, suffix: str) -> None:
        self.tails = {t: Tail(bootstrap, f"{t}-{suffix}") for t in ("seen", "counts", "sums")}

    def drain(self) -> int:
        return min(t.drain() for t in self.tails.values())

    def check_exactly_once(self) -> None:
        """Each input echoed once; per key the counts 1..n, each once; each parity's sums
        step by each of its numbers once."""
        self.drain()
        seen = sorted(int(_value(r)) for r in self.tails["seen"].records)
        assert seen == list(range(N)), "every input exactly once in the echo"
        counts: dict[bytes | None, list[int]] = {}
        for r in sorted(self.tails["counts"].records, key=lambda r: (r.partition, r.offset)):
            counts.setdefault(r.key, []).append(_value(r))
        expected = Counter(str(n % KEYS).encode() for n in range(N))
        assert counts == {k: list(range(1, n + 1)) for k, n in expected.items()}
        for p in ("even", "odd"):
            sums = [_value(r) for r in sorted(self.tails["sums"].records, key=lambda r: r.offset)
                    if r.key == p.encode()]
            steps = sorted(b - a for a, b in zip([0, *sums], sums))
            assert steps == [n for n in range(N) if parity(n) == p], f"{p} sums add each number once"


def _two_members(bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess], second: str,
                 env: dict[str, str]) -> tuple[ServiceProcess, ServiceProcess]:
    """The input topic, then member "survivor" running every partition, then member ``second``
    joining: returned once the partitions are split between the two."""
    ensure_topics(admin_client({"bootstrap.servers": bootstrap}), [TopicSpec(f"numbers-{unique}", 4)])
    survivor = ServiceProcess(TARGET, tmp_path, "survivor", env).start()
    services.append(survivor)
    wait_until(lambda: _running(survivor) == ALL, 60, "the first member to run every partition",
               survivor.log_text)
    other = ServiceProcess(TARGET, tmp_path, second, env).start()
    services.append(other)
    wait_until(lambda: _split_between(survivor, other), 60, "the partitions split between both members",
               lambda: survivor.log_text() + other.log_text())
    return survivor, other


def test_a_static_member_restarted_after_sigkill_takes_its_partitions_back_without_a_rebalance(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    survivor, victim = _two_members(kafka_bootstrap, unique, tmp_path, services, "victim",
                                    _env(kafka_bootstrap, unique))
    kept, moved = _running(survivor), _running(victim)
    revoked_before, survivor_log = _revoked(survivor), len(survivor.log_text())

    out = Outputs(kafka_bootstrap, unique)
    _feed(kafka_bootstrap, unique, 0, N // 2)
    kill_at_random_after(victim, lambda: out.drain() > N // 8, random.Random(unique), "outputs from both members")
    victim.start()  # the same --instance-id: the same group.instance.id and transactional.id
    wait_until(lambda: _running(victim) == moved, 60, "the restarted member to run its partitions again",
               victim.log_text)
    _feed(kafka_bootstrap, unique, N // 2, N)
    wait_until(lambda: out.drain() >= N, 120, "every output", lambda: survivor.log_text()[-3000:])

    assert _running(survivor) == kept
    assert _revoked(survivor) == revoked_before, "the survivor was revoked"
    assert "revoking" not in survivor.log_text()[survivor_log:]
    restarted = victim.log_text().rsplit("---- start", 1)[-1]
    assert f"assigned partitions {sorted(moved)}" in restarted
    out.check_exactly_once()
    assert victim.stop() == 0
    assert _static_members(kafka_bootstrap, f"eo-{unique}") == {"survivor"}, "the stopped member left"
    assert survivor.stop() == 0


def test_a_static_member_that_stays_in_the_group_on_sigterm_takes_its_partitions_back_on_restart(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    env = _env(kafka_bootstrap, unique, FW_PROCESSING__LEAVE_GROUP_ON_SHUTDOWN="false")
    survivor, restarted = _two_members(kafka_bootstrap, unique, tmp_path, services, "restarted", env)
    kept, moved = _running(survivor), _running(restarted)
    revoked_before = _revoked(survivor)

    out = Outputs(kafka_bootstrap, unique)
    _feed(kafka_bootstrap, unique, 0, N // 2)
    wait_until(lambda: out.drain() > N // 8, 60, "outputs from both members", restarted.log_text)
    assert restarted.stop() == 0  # a final checkpoint, and it stays a member (a rolling restart)
    assert _static_members(kafka_bootstrap, f"eo-{unique}") == {"survivor", "restarted"}
    restarted.start()
    wait_until(lambda: _running(restarted) == moved, 60, "the restarted member to run its partitions again",
               restarted.log_text)
    _feed(kafka_bootstrap, unique, N // 2, N)
    wait_until(lambda: out.drain() >= N, 120, "every output", lambda: survivor.log_text()[-3000:])
    assert _running(survivor) == kept
    assert _revoked(survivor) == revoked_before, "the survivor was revoked"
    out.check_exactly_once()
    assert restarted.stop() == 0 and survivor.stop() == 0


def test_a_warm_standby_takes_over_a_killed_members_tasks_without_replaying_their_changelogs(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    env = _env(kafka_bootstrap, unique, FW_PROCESSING__STANDBY_REPLICAS="1",
               FW_KAFKA_CONSUMER__SESSION_TIMEOUT_MS="6000")  # the killed member's tasks move soon
    survivor, victim = _two_members(kafka_bootstrap, unique, tmp_path, services, "victim", env)
    moved = _running(victim)
    out = Outputs(kafka_bootstrap, unique)
    _feed(kafka_bootstrap, unique, 0, N // 2)
    wait_until(lambda: out.drain() >= N // 2, 120, "the first half's outputs", victim.log_text)

    def copies(svc: ServiceProcess) -> dict[tuple[str, int], dict[str, Any]]:
        return {(c["store"], c["partition"]): c for c in _member(svc).get("standby", [])}

    stores = {"counts", "sums"}  # the stores of each task of even_odd

    def survivor_current() -> bool:
        held = copies(survivor)
        return set(held) == {(s, p) for s in stores for p in moved} and all(c["current"] for c in held.values())

    wait_until(survivor_current, 60, "the survivor's copies of the victim's tasks to be current",
               survivor.log_text)
    copied = copies(survivor)
    assert all(copied[("counts", p)]["offset"] > 0 for p in moved), copied  # the counts were copied
    assert {p for _, p in copies(victim)} == _running(survivor), "the victim copies the survivor's tasks"

    before = len(survivor.log_text())
    victim.kill()
    wait_until(lambda: _running(survivor) == ALL, 60, "the survivor to run every task", survivor.log_text)
    after = survivor.log_text()[before:]
    restored = {(store, int(p)): int(n) for store, p, n in re.findall(r"restored (\w+)\[(\d+)\]: (\d+) records", after)}
    assert all(n == 0 for (_, p), n in restored.items() if p in moved), restored
    assert not re.search(r"deleting it and rebuilding", after), after

    _feed(kafka_bootstrap, unique, N // 2, N)
    wait_until(lambda: out.drain() >= N, 120, "every output", lambda: survivor.log_text()[-3000:])
    out.check_exactly_once()
    assert survivor.stop() == 0


def test_a_killed_child_of_processes_with_an_instance_id_comes_back_without_a_rebalance(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(f"numbers-{unique}", 4)])
    svc = ServiceProcess(TARGET, tmp_path, "pair", _env(kafka_bootstrap, unique),
                         args=["--processes", "2", "--instance-id", "node"]).start()
    services.append(svc)
    url = svc.endpoint(supervisor=True)

    def children() -> dict[str, dict[str, Any]]:
        return {m["instance"]: m for m in get_json(url + "/status")[1]["members"]}

    def running(child: dict[str, Any]) -> set[int]:
        return {p["partition"] for p in child.get("partitions", []) if p["state"] == "running"}

    before: dict[str, dict[str, Any]] = {}

    def split() -> bool:
        before.update(children())
        owned = [running(before.get(c, {})) for c in ("node-0", "node-1")]
        return all(owned) and sorted(owned[0] | owned[1]) == [0, 1, 2, 3] and not owned[0] & owned[1]

    wait_until(split, 60, "both children running two partitions each", svc.log_text)
    assert _static_members(kafka_bootstrap, f"eo-{unique}") == {"node-0", "node-1"}
    out = Outputs(kafka_bootstrap, unique)
    _feed(kafka_bootstrap, unique, 0, N // 2)
    wait_until(lambda: out.drain() > N // 8, 60, "outputs from both children", svc.log_text)
    os.kill(before["node-1"]["pid"], signal.SIGKILL)

    def back() -> bool:
        child = children()["node-1"]
        return child["pid"] != before["node-1"]["pid"] and running(child) == running(before["node-1"])

    wait_until(back, 60, "the supervisor to restart node-1 with its partitions", svc.log_text)
    _feed(kafka_bootstrap, unique, N // 2, N)
    wait_until(lambda: out.drain() >= N, 120, "every output", lambda: svc.log_text()[-3000:])
    other = children()["node-0"]
    assert running(other) == running(before["node-0"])
    assert other["counters"]["rebalances"] == before["node-0"]["counters"]["rebalances"], "node-0 was revoked"
    assert "instance node-1 died from signal 9: restarting it" in svc.log_text()
    out.check_exactly_once()
    assert svc.stop() == 0


def test_the_consumer_protocol_keeps_inputs_co_partitioned_and_moves_only_what_changes_owner(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(f"numbers-{unique}", 4)])
    env = _env(kafka_bootstrap, unique, FW_KAFKA_CONSUMER__GROUP_PROTOCOL="consumer")
    first = ServiceProcess(TARGET, tmp_path, "first", env).start()
    services.append(first)
    out = Outputs(kafka_bootstrap, unique)
    _feed(kafka_bootstrap, unique, 0, N // 3)
    wait_until(lambda: _running(first) == ALL and out.drain() > 0, 60, "the first member's outputs",
               first.log_text)

    second = ServiceProcess(TARGET, tmp_path, "second", env).start()
    services.append(second)
    wait_until(lambda: _split_between(first, second), 60, "the partitions split between both members",
               lambda: first.log_text() + second.log_text())
    moved = _running(second)
    for svc in (first, second):  # partition i of every input on the member that runs task i
        inputs = _member(svc)["inputs"]
        by_topic = {t: {i["partition"] for i in inputs if i["topic"] == t}
                    for t in (f"numbers-{unique}", f"eo-{unique}-parity-repartition")}
        assert list(by_topic.values()) == [_running(svc)] * 2, by_topic
    assert f"revoking {sorted(moved)}" in first.log_text()  # only what moved, not every partition
    assert f"revoking {sorted(ALL)}" not in first.log_text()

    _feed(kafka_bootstrap, unique, N // 3, 2 * N // 3)
    wait_until(lambda: out.drain() >= 2 * N // 3, 120, "outputs from both members", first.log_text)
    assert second.stop() == 0  # it leaves: its partitions come back to the first member
    wait_until(lambda: _running(first) == ALL, 60, "the first member to run every partition again",
               first.log_text)
    _feed(kafka_bootstrap, unique, 2 * N // 3, N)
    wait_until(lambda: out.drain() >= N, 120, "every output", first.log_text)
    out.check_exactly_once()
    assert first.stop() == 0
