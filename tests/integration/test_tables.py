"""Tables on the real broker. A stream-table join: orders joined with their customers' tiers
as of each order's event time, by a member SIGKILLed at random moments and once restarted
without its local state (the table rebuilt from its own topic); by two members with standbys;
through a savepoint and a rollback. Read read_committed, every order is joined exactly once,
with the tier the brute-force join gives, whatever the interleaving of the two topics'
records live. A global-table join with two members, and a two-table join, killed likewise."""

from __future__ import annotations

import functools
import json
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from framework.cli import cli
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from tests.integration import pipelines, tables
from tests.integration.harness import (
    ServiceProcess,
    Tail,
    committed_offsets,
    end_offsets,
    get_json,
    kill_at_random_after,
    present,
    produce_to_partitions,
    read_topic,
    service_env,
    wait_until,
)
from tests.integration.replay_harness import caught_up
from tests.integration.test_ops_cli import fw_json
from tests.integration.test_savepoint_with_spark import fw_spark, manifest, rows

TARGET = "tests.integration.pipelines:enriched_orders"


def _grown(out: Tail, progress: int) -> Callable[[], bool]:
    """Whether ``out`` holds more than ``progress`` records (``progress`` as of now)."""
    return lambda: out.drain() > progress


def test_a_join_killed_at_random_moments_joins_every_order_once_as_of_its_time(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    rng = random.Random(unique)
    evs = tables.events(orders=6_000, customers=60, seed=21)
    want = tables.expected(evs)
    topics = tables.history(unique, evs)
    admin = admin_client({"bootstrap.servers": kafka_bootstrap})
    ensure_topics(admin, [TopicSpec(t, tables.PARTITIONS) for t in topics])
    svc = ServiceProcess(TARGET, tmp_path, "0", service_env(kafka_bootstrap, unique, checkpoint_interval_ms=50))
    services.append(svc)
    out = Tail(kafka_bootstrap, f"eno-out-{unique}")
    chunks = 4
    for c in range(chunks):  # each topic's records arrive in chunks, the customers' first or last
        for topic, records in sorted(topics.items(), reverse=c % 2 == 1):
            n = len(records)
            produce_to_partitions(kafka_bootstrap, topic, records[n * c // chunks:n * (c + 1) // chunks])
        if c == 2:
            shutil.rmtree(svc.state_dir, ignore_errors=True)  # a lost disk: restored from the changelogs
        progress = out.drain()
        svc.start()
        if c < chunks - 1:
            kill_at_random_after(svc, _grown(out, progress), rng, "joins before a random kill")
    total = sum(want.values())
    wait_until(lambda: out.drain() >= total, 300, f"{total} joined orders", svc.log_text)
    assert svc.stop() == 0
    got = [(present(r.key).decode(), json.loads(present(r.value))) for r in out.records]
    assert sorted((k, v["id"], v["tier"]) for k, v in got) == sorted(want.elements())
    out.close()
    # the table has no changelog: the lost disk's table came back from its own topic
    assert not [t for t in admin.list_topics(timeout=10).topics if t.startswith(f"eno-{unique}-customers")]
    assert re.search(rf"restoring customers\[\d\] from eno-customers-{unique}, offset 0 to about [1-9]",
                     svc.log_text())
    # and fw state rebuilds it from the topic too, with every version of a key
    key = next(k for kind, k, _, v in evs if kind == "customer" and v is not None)
    versions: dict[int, Any] = {}
    for kind, k, ts, v in evs:
        if kind == "customer" and k == key:
            versions[ts] = None if v is None else {"tier": v, "ts": ts}
    env = {**service_env(kafka_bootstrap, unique), "FW_STATE_DIR": str(tmp_path / "elsewhere")}
    result = CliRunner().invoke(cli, ["state", "get", TARGET, "customers", key, "--source", "changelog", "--json"],
                                env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["entries"][0]["value"] == [[ts, versions[ts]] for ts in sorted(versions)]


def test_two_members_each_hold_the_whole_global_table_and_join_by_the_records_sku(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    """Orders keyed by user, products by sku, in other partition counts: each member holds
    every product. One member is SIGKILLed at random moments and once restarted without its
    state (its global table read whole again); every order is priced once, as of its time."""
    rng = random.Random(unique)
    evs = tables.events(orders=4_000, customers=40, seed=22)
    want = sorted((oid, tier) for (_, oid, tier), n in tables.expected(evs).items() for _ in range(n))
    topics = tables.global_history(unique, evs)
    admin = admin_client({"bootstrap.servers": kafka_bootstrap})
    ensure_topics(admin, [TopicSpec(f"gto-products-{unique}", 3), TopicSpec(f"gto-orders-{unique}", 4)])
    env = service_env(kafka_bootstrap, unique, checkpoint_interval_ms=50)
    stable = ServiceProcess("tests.integration.pipelines:priced_orders", tmp_path, "0", env)
    victim = ServiceProcess("tests.integration.pipelines:priced_orders", tmp_path, "1", env)
    services += [stable, victim]
    out = Tail(kafka_bootstrap, f"gto-out-{unique}")
    chunks = 4
    stable.start()
    for c in range(chunks):
        # Counted before the chunk: the stable member may price all of it before the victim starts.
        progress = out.drain()
        for topic, records in sorted(topics.items(), reverse=c % 2 == 1):
            n = len(records)
            produce_to_partitions(kafka_bootstrap, topic, records[n * c // chunks:n * (c + 1) // chunks])
        if c == 2:
            shutil.rmtree(victim.state_dir, ignore_errors=True)
        victim.start()
        if c < chunks - 1:
            kill_at_random_after(victim, _grown(out, progress), rng, "prices before a random kill")
    wait_until(lambda: out.drain() >= len(want), 300, f"{len(want)} priced orders",
               lambda: stable.log_text()[-3000:] + victim.log_text()[-3000:])
    sku = evs[0][1]
    versions: dict[int, Any] = {}  # the product's versions: of equal times, the later update
    for kind, k, ts, v in evs:
        if kind == "customer" and k == sku:
            versions[ts] = None if v is None else {"tier": v, "ts": ts}
    want_versions = [[ts, versions[ts]] for ts in sorted(versions)]

    def answers(member: ServiceProcess) -> bool:
        """The member answers for the product from its own copy, as its checkpoints wrote it."""
        code, body = get_json(f"{member.endpoint()}/stores/products/{sku}")
        assert code in (200, 503), body  # 503: a restarted member still reads its tables whole
        return code == 200 and body["source"] == "global" and [e["value"] for e in body["entries"]] == [want_versions]

    for member in (stable, victim):
        wait_until(functools.partial(answers, member), 60, f"{member.instance}'s copy of product {sku}")
    assert stable.stop() == 0 and victim.stop() == 0
    got = sorted((json.loads(present(r.value))["id"], json.loads(present(r.value))["price"]) for r in out.records)
    assert got == want
    assert "global tables products: read" in victim.log_text()
    out.close()


def test_two_tables_joined_by_a_member_killed_at_random_moments_hold_the_join_of_the_rows_at_every_time(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    """The joined table's changes, read read_committed: for every key and every time either
    table changed, the last value written for that time is the outer join of the two rows then."""
    rng = random.Random(unique)
    evs = [e for e in tables.events(orders=1_500, customers=30, seed=23) if not e[1].startswith("end")]
    topics = tables.two_tables_history(unique, evs)
    admin = admin_client({"bootstrap.servers": kafka_bootstrap})
    ensure_topics(admin, [TopicSpec(t, tables.PARTITIONS) for t in topics])
    svc = ServiceProcess("tests.integration.pipelines:joined_tables", tmp_path, "0",
                         service_env(kafka_bootstrap, unique, checkpoint_interval_ms=50))
    services.append(svc)
    out = Tail(kafka_bootstrap, f"tt-out-{unique}")
    chunks = 3
    for c in range(chunks):
        for topic, records in sorted(topics.items(), reverse=c % 2 == 1):
            n = len(records)
            produce_to_partitions(kafka_bootstrap, topic, records[n * c // chunks:n * (c + 1) // chunks])
        progress = out.drain()
        svc.start()
        if c < chunks - 1:
            kill_at_random_after(svc, _grown(out, progress), rng, "joins before a random kill")
    times = {(k, ts) for _, k, ts, _ in evs}
    last: dict[tuple[str, int], Any] = {}  # the last value written for each key and time

    read = [0]  # records of ``out`` folded into ``last``

    def complete() -> bool:
        out.drain()
        for r in out.records[read[0]:]:
            last[(present(r.key).decode(), r.timestamp)] = None if r.value is None else json.loads(r.value)
        read[0] = len(out.records)
        return times <= set(last)

    wait_until(complete, 300, "a joined value for every change", svc.log_text)
    assert svc.stop() == 0
    complete()
    wrong = {kt: v for kt, v in last.items() if v != tables.joined_at(evs, *kt)}
    assert not wrong, sorted(wrong.items())[:10]
    out.close()


def _member(svc: ServiceProcess) -> dict[str, Any]:
    code, body = get_json(svc.endpoint() + "/status")
    assert code in (200, 503), body
    return body["members"][0]


def _running(svc: ServiceProcess) -> set[int]:
    return {p["partition"] for p in _member(svc).get("partitions", []) if p["state"] == "running"}


def test_a_standby_copies_a_table_from_its_topic_as_far_as_committed_and_takes_over_without_reading_it_again(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    """Two members with a standby each: the survivor's copy of the victim's table partitions
    follows the table's own topic up to the group's committed offset; when the victim is
    SIGKILLed the survivor restores none of it again, and every order is joined once."""
    evs = tables.events(orders=3_000, customers=40, seed=23)
    want = tables.expected(evs)
    topics = tables.history(unique, evs)
    admin = admin_client({"bootstrap.servers": kafka_bootstrap})
    ensure_topics(admin, [TopicSpec(t, tables.PARTITIONS) for t in topics])
    env = {**service_env(kafka_bootstrap, unique, checkpoint_interval_ms=200), "FW_PROCESSING__STANDBY_REPLICAS": "1",
           "FW_OBSERVE__PORT": "0", "FW_OBSERVE__INTERVAL_MS": "200"}
    survivor = ServiceProcess(TARGET, tmp_path, "survivor", env).start()
    services.append(survivor)
    wait_until(lambda: _running(survivor) == {0, 1, 2}, 60, "the first member to run every partition",
               survivor.log_text)
    victim = ServiceProcess(TARGET, tmp_path, "victim", env).start()
    services.append(victim)
    wait_until(lambda: bool(_running(victim)) and _running(survivor) | _running(victim) == {0, 1, 2}
               and not _running(survivor) & _running(victim), 60, "the partitions split between both members",
               lambda: survivor.log_text() + victim.log_text())
    moved = _running(victim)
    customers = f"eno-customers-{unique}"
    half = {t: records[:len(records) // 2] for t, records in topics.items()}
    for topic, records in half.items():
        produce_to_partitions(kafka_bootstrap, topic, records)
    ends = {p: sum(1 for r in half[customers] if r[0] == p) for p in moved}

    def copied() -> dict[int, int]:
        return {c["partition"]: c["offset"] for c in _member(survivor).get("standby", []) if c["store"] == "customers"}

    def caught_up() -> bool:
        """The copy is where the group committed, which is the end of what was produced."""
        done = committed_offsets(kafka_bootstrap, f"eno-{unique}", customers)
        return all(done.get(p) == ends[p] for p in moved) and all(copied().get(p) == done[p] for p in moved)

    wait_until(caught_up, 90, "the survivor's table copies to reach the group's committed offsets",
               lambda: survivor.log_text()[-3000:])
    before = len(survivor.log_text())
    victim.kill()
    wait_until(lambda: _running(survivor) == {0, 1, 2}, 60, "the survivor to run every task", survivor.log_text)
    after = survivor.log_text()[before:]
    restored = {int(p): int(n) for p, n in re.findall(r"restored customers\[(\d+)\]: (\d+) records", after)}
    assert all(restored.get(p, 0) == 0 for p in moved), restored
    assert "deleting it and rebuilding" not in after, after
    for topic, records in topics.items():
        produce_to_partitions(kafka_bootstrap, topic, records[len(records) // 2:])
    out = Tail(kafka_bootstrap, f"eno-out-{unique}")
    total = sum(want.values())
    wait_until(lambda: out.drain() >= total, 300, f"{total} joined orders", lambda: survivor.log_text()[-3000:])
    got = [(present(r.key).decode(), json.loads(present(r.value))) for r in out.records]
    assert sorted((k, v["id"], v["tier"]) for k, v in got) == sorted(want.elements())
    out.close()
    assert survivor.stop() == 0


def test_a_savepoint_keeps_a_table_read_from_its_topic_and_a_rollback_rebuilds_it_from_there(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A savepoint holds the table's versions (rebuilt from its topic) and no changelog for it,
    made in this process or by Spark (the same files); restored after the service went past it, the table is rebuilt from its topic up to the
    savepoint's offsets: the outputs before the savepoint and after the restore are every
    order joined once, as of its time."""
    monkeypatch.setenv("FW_TEST_SUFFIX", unique)
    evs = tables.events(orders=1_500, customers=30, seed=24)
    want = tables.expected(evs)
    topics = tables.history(unique, evs)
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}),
                  [TopicSpec(t, tables.PARTITIONS) for t in topics])
    env = service_env(kafka_bootstrap, unique)
    svc = ServiceProcess(TARGET, tmp_path, "0", env)
    services.append(svc)
    out = f"eno-out-{unique}"

    def run(part: int) -> None:
        for topic, records in topics.items():
            n = len(records)
            produce_to_partitions(kafka_bootstrap, topic, records[n * part // 3:n * (part + 1) // 3])
        svc.start()
        wait_until(caught_up(kafka_bootstrap, pipelines.enriched_orders()), 120, f"third {part} processed",
                   lambda: svc.log_text()[-3000:])
        assert svc.stop() == 0

    run(0)
    kept = end_offsets(kafka_bootstrap, out)
    made = fw_json({**env, "FW_STATE_DIR": str(svc.state_dir)}, "savepoint", "create", TARGET,
                   "--path", str(tmp_path / "sp"))
    described = fw_json(env, "savepoint", "describe", str(tmp_path / "sp"))["manifest"]
    assert made["stores"]["customers"]["entries"] > 1 and described["stores"]["customers"]["changelog"] is None
    # made by Spark (fw savepoint create --master): the table rebuilt by a task, the same entries
    done = fw_spark(env, "savepoint", "create", TARGET, "--path", str(tmp_path / "spark"), "--master", "local[2]")
    assert done.returncode == 0, done.stderr[-4000:]
    assert manifest(tmp_path / "spark") == manifest(tmp_path / "sp")
    for store in made["stores"]:
        assert rows(tmp_path / "spark" / "stores" / store) == rows(tmp_path / "sp" / "stores" / store), store
    run(1)  # a release after the savepoint, rolled back below
    restored = fw_json({**env, "FW_STATE_DIR": str(svc.state_dir)}, "savepoint", "restore", TARGET,
                       str(tmp_path / "sp"))
    assert "customers" not in restored["stores_written"]
    back = end_offsets(kafka_bootstrap, out)
    run(2)
    got = [r for r in read_topic(kafka_bootstrap, out)
           if r.offset < kept.get(r.partition, 0) or r.offset >= back.get(r.partition, 0)]
    assert sorted((present(r.key).decode(), *(json.loads(present(r.value))[f] for f in ("id", "tier")))
                  for r in got) == \
        sorted(want.elements())



def test_a_payment_past_its_grace_joins_at_once_with_what_each_table_holds(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    """Payment 2 (at 20) arrives when the payments' watermark is 99, past 20 + the 10 ms grace:
    both joins (a table, a global table) give it the rate the table holds then, at once, with no
    later record to move a watermark. A rate at 15 that arrives afterwards changes nothing of it;
    payment 1, released by its grace once payment 3 moves the watermark to 199, joins that rate."""
    rates, fx, pay = f"gr-rates-{unique}", f"gr-fx-{unique}", f"gr-pay-{unique}"
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(t, 1) for t in (rates, fx, pay)])

    def put(topic: str, *values: dict[str, Any]) -> None:
        produce_to_partitions(kafka_bootstrap, topic, [(0, b"x", json.dumps(v).encode()) for v in values])

    put(rates, {"rate": "A", "ts": 5})
    put(fx, {"rate": "A", "ts": 5})  # the global table is read whole before the member processes anything
    env = {**service_env(kafka_bootstrap, unique), "FW_OBSERVE__PORT": "0"}
    svc = ServiceProcess("tests.integration.pipelines:graced_rates", tmp_path, "0", env)
    services.append(svc.start())
    group = f"gr-{unique}"
    wait_until(lambda: committed_offsets(kafka_bootstrap, group, rates) == {0: 1}, 60, "the rate at 5 processed",
               svc.log_text)
    outs = (Tail(kafka_bootstrap, f"gr-out-{unique}"), Tail(kafka_bootstrap, f"gr-gout-{unique}"))

    def joined(n: int) -> Callable[[], bool]:
        return lambda: all(out.drain() >= n for out in outs)

    put(pay, {"id": 1, "cur": "x", "ts": 100}, {"id": 2, "cur": "x", "ts": 20})
    wait_until(joined(1), 60, "payment 2 joined by both joins, with nothing after it", svc.log_text)
    assert [[json.loads(present(r.value)) for r in out.records] for out in outs] == [[[2, "A"]]] * 2

    put(rates, {"rate": "B", "ts": 15})
    put(fx, {"rate": "B", "ts": 15})
    endpoint = svc.endpoint()

    def fx_has_b() -> bool:
        code, body = get_json(f"{endpoint}/stores/fx/x")
        return code == 200 and [ts for ts, _ in body["entries"][0]["value"]] == [5, 15]

    wait_until(lambda: committed_offsets(kafka_bootstrap, group, rates) == {0: 2} and fx_has_b(), 60,
               "the rates at 15 read by both tables", svc.log_text)
    put(pay, {"id": 3, "cur": "x", "ts": 200})
    wait_until(joined(2), 60, "payment 1 released by its grace", svc.log_text)
    assert svc.stop() == 0
    for out in outs:
        out.drain()
        assert [json.loads(present(r.value)) for r in out.records] == [[2, "A"], [1, "B"]]
        out.close()
