"""Savepoints on the real broker, through the real CLI and ``fw run`` processes.

A service with a rolling aggregate and event-time windows after a repartition is savepointed
mid-stream (a window half full, records in flight in its repartition topic), runs on, and is
rolled back: after the restore its outputs, read_committed, are those of a service that never
went past the savepoint. A changed pipeline is restored with a new step (it starts empty) and
without a step (refused, then allowed with the flag); a savepoint and a restore are refused
while a member runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from framework.engine.partitioner import partition_for
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics, topic_ids
from framework.kafka.groups import group_members
from framework.observe.endpoint import ask_json, parse_client_id
from framework.savepoint.files import PART
from framework.serde.keys import KeySerde
from framework.serde.values import ValueCodec
from tests.integration.harness import (
    ROOT,
    Record,
    ServiceProcess,
    committed_offsets,
    produce_to_partitions,
    read_topic,
    service_env,
    wait_until,
)
from tests.integration.test_ops_cli import fw_json, fw_process

V1 = "tests.integration.pipelines:savepointed_v1"
ADDED = "tests.integration.pipelines:savepointed_added"
DROPPED = "tests.integration.pipelines:savepointed_dropped"
BASE = (time.time_ns() // 1_000_000_000) * 1000 - 600_000  # on a second: windows start on it
END = 20_000  # the last two readings' time past BASE: every window before it fires

Reading = tuple[int, str, dict[str, Any]]  # partition, user, value


def _readings(indices: range | list[int]) -> list[Reading]:
    """Reading ``i``: user ``u<i % 4>`` on partition ``i % 2``, group ``g<i % 3>``, at BASE + 100 i."""
    return [(i % 2, f"u{i % 4}", {"g": f"g{i % 3}", "ts": BASE + 100 * i, "v": i}) for i in indices]


A, B = _readings(range(44)), _readings(range(50, 90))  # A ends mid-window (4300-4400 ms)
C = _readings([*range(100, 140), END // 100, END // 100 + 1])  # the last two move both partitions to END
X = [{"g": f"g{i % 3}", "ts": BASE + 4_450 + 100 * i, "v": 1000 + i} for i in range(5)]  # in flight: after A, before B


def _produce(bootstrap: str, topic: str, readings: list[Reading]) -> None:
    produce_to_partitions(bootstrap, topic, [(p, user.encode(), json.dumps(v).encode(), None, v["ts"])
                                             for p, user, v in readings])


def _in_flight(bootstrap: str, service: str) -> None:
    """X written to the repartition topic as the key_by writes it, with no downstream run since:
    records in flight, as a stopped service leaves those its upstream tasks wrote last."""
    keys, codec = KeySerde(), ValueCodec()
    produce_to_partitions(bootstrap, f"{service}-by-group-repartition", [
        (partition_for(keys.serialize(x["g"]), 2), keys.serialize(x["g"]), codec.encode(x), None, x["ts"])
        for x in X])


def _expected_windows(readings: list[dict[str, Any]], end: int = END) -> int:
    """Windows that fire once both partitions reach ``end``: each (group, second) before it."""
    return len({(r["g"], (r["ts"] - BASE) // 1000) for r in readings if (r["ts"] - BASE) // 1000 * 1000 + 1000 <= end})


ALL = [v for _, _, v in A + B + C] + X
WINDOWS = _expected_windows(ALL)


def _per_key(records: list[Record]) -> dict[bytes | None, list[Any]]:
    out: dict[bytes | None, list[Any]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        out[r.key].append(json.loads(r.value or b"null"))
    return dict(out)


def _after(records: list[Record], marks: dict[int, int]) -> list[Record]:
    return [r for r in records if r.offset > marks.get(r.partition, -1)]


def _marks(records: list[Record]) -> dict[int, int]:
    marks: dict[int, int] = {}
    for r in records:
        marks[r.partition] = max(marks.get(r.partition, -1), r.offset)
    return marks


class Outputs:
    def __init__(self, bootstrap: str, suffix: str) -> None:
        self.bootstrap, self.suffix = bootstrap, suffix

    def totals(self) -> list[Record]:
        return read_topic(self.bootstrap, f"sp-totals-{self.suffix}")

    def windows(self) -> list[Record]:
        return read_topic(self.bootstrap, f"sp-windows-{self.suffix}")


def _run(svc: ServiceProcess, done: Any, what: str) -> None:
    svc.start()
    wait_until(done, 180, what, svc.log_text)
    assert svc.stop() == 0


def _setup(bootstrap: str, suffix: str, tmp_path: Path, instance: str) -> tuple[dict[str, str], ServiceProcess]:
    env = service_env(bootstrap, suffix)
    ensure_topics(admin_client({"bootstrap.servers": bootstrap}), [TopicSpec(f"sp-in-{suffix}", 2)])
    return env, ServiceProcess(V1, tmp_path, instance, env)


def _ran_a(bootstrap: str, unique: str, tmp_path: Path,
           services: list[ServiceProcess]) -> tuple[dict[str, str], ServiceProcess, str, Outputs]:
    """The service (instance "s") started, and its totals of A all out."""
    env, svc = _setup(bootstrap, unique, tmp_path, "s")
    services.append(svc)
    service, out = f"sp-{unique}", Outputs(bootstrap, unique)
    _produce(bootstrap, f"sp-in-{unique}", A)
    _run(svc, lambda: len(out.totals()) == len(A), "the totals of A")
    return env, svc, service, out


def test_a_restored_savepoint_continues_as_if_nothing_had_happened_after_it(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    env, svc, service, out = _ran_a(kafka_bootstrap, unique, tmp_path, services)
    _in_flight(kafka_bootstrap, service)

    made = fw_json({**env, "FW_STATE_DIR": str(svc.state_dir)}, "savepoint", "create", V1,
                   "--path", str(tmp_path / "sp"))
    assert made["path"] == str(tmp_path / "sp") and made["partitions"] == 2
    assert sorted(made["stores"]) == ["_time", "per-second", "totals"]
    assert made["stores"]["totals"] == {"entries": 6, "partitions": {"0": 3, "1": 3}}  # a signature, 2 users each
    described = fw_json(env, "savepoint", "describe", str(tmp_path / "sp"))["manifest"]
    assert described["offsets"][f"sp-in-{unique}"] == {"0": 22, "1": 22}
    flight = described["repartition"][f"{service}-by-group-repartition"]
    kept = pq.read_table(tmp_path / "sp" / flight["path"]).to_pylist()
    codec = ValueCodec()
    assert [x for x in X if x not in [codec.decode(r["value"]) for r in kept if r["value"]]] == []
    before = {"totals": out.totals(), "windows": out.windows()}

    _produce(kafka_bootstrap, f"sp-in-{unique}", B)  # the release after the savepoint: undone below
    _run(svc, lambda: len(out.totals()) == len(A) + len(B), "the totals of B")
    marks = {"totals": _marks(out.totals()), "windows": _marks(out.windows())}

    # restored from another state directory, as from another host: the member's own copies stay,
    # and must be found stale (the changelogs were created anew) and rebuilt
    restored = fw_json({**env, "FW_STATE_DIR": str(tmp_path / "elsewhere")}, "savepoint", "restore", V1,
                       str(tmp_path / "sp"))
    assert restored["applied"] and restored["stores_written"] == {s: made["stores"][s]["entries"]
                                                                  for s in ("_time", "per-second", "totals")}
    assert restored["in_flight_written"] == {f"{service}-by-group-repartition": flight["records"]}
    offsets = {(o["topic"], o["partition"]): o["offset"] for o in restored["offsets"]}
    assert offsets == {(f"sp-in-{unique}", 0): 22, (f"sp-in-{unique}", 1): 22,
                       (f"{service}-by-group-repartition", 0): 0, (f"{service}-by-group-repartition", 1): 0}

    _produce(kafka_bootstrap, f"sp-in-{unique}", C)
    _run(svc, lambda: (len(_after(out.totals(), marks["totals"])) == len(B) + len(C)
                       and len(before["windows"]) + len(_after(out.windows(), marks["windows"])) == WINDOWS),
         "the outputs after the restore")
    assert "deleting it and rebuilding it from" in svc.log_text().rsplit("---- start", 1)[-1]

    # the reference: a service that never went past the savepoint
    _, ref = _setup(kafka_bootstrap, f"{unique}r", tmp_path, "r")
    services.append(ref)
    ref_out = Outputs(kafka_bootstrap, f"{unique}r")
    _produce(kafka_bootstrap, f"sp-in-{unique}r", A)
    _run(ref, lambda: len(ref_out.totals()) == len(A), "the reference's totals of A")
    _in_flight(kafka_bootstrap, f"sp-{unique}r")
    _produce(kafka_bootstrap, f"sp-in-{unique}r", B + C)
    _run(ref, lambda: len(ref_out.totals()) == len(A + B + C) and len(ref_out.windows()) == WINDOWS,
         "the reference's outputs")

    for topic, read in (("totals", out.totals), ("windows", out.windows)):
        rolled_back = _per_key(before[topic] + _after(read(), marks[topic]))
        assert rolled_back == _per_key(getattr(ref_out, topic)()), topic
    totals = _per_key(ref_out.totals())
    assert [t[0] for t in totals[b"u0"]] == list(range(1, len(totals[b"u0"]) + 1))  # counted once each


def test_a_changed_pipeline_restores_a_new_step_empty_and_a_dropped_one_only_when_allowed(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    env, svc = _setup(kafka_bootstrap, unique, tmp_path, "s")
    env = {**env, "FW_STATE_DIR": str(svc.state_dir), "FW_SAVEPOINT_DIR": str(tmp_path / "savepoints")}
    services.append(svc)
    service, out = f"sp-{unique}", Outputs(kafka_bootstrap, unique)
    _produce(kafka_bootstrap, f"sp-in-{unique}", A)
    svc.start()
    wait_until(lambda: len(out.totals()) == len(A), 180, "the totals of A", svc.log_text)
    held = fw_json(env, "savepoint", "create", V1, "--path", str(tmp_path / "running"))  # the member held
    assert held["held"] == ["s"]
    assert svc.stop() == 0

    made = fw_json(env, "savepoint", "create", V1)
    path = Path(made["path"])
    assert path.parent == tmp_path / "savepoints" / service
    assert made["held"] == [] and made["stores"] == held["stores"]  # nothing came in between
    assert pq.read_table(path / "stores" / "totals").sort_by("key").equals(
        pq.read_table(tmp_path / "running" / "stores" / "totals").sort_by("key"))
    [listed] = fw_json(env, "savepoint", "list", service)
    assert (listed["path"], listed["service"], listed["stores"]["totals"]["entries"]) == (str(path), service, 6)

    svc.start()
    wait_until(lambda: bool(fw_json(env, "group", "describe", V1)["members"]), 180, "the member to join",
               svc.log_text)
    [member] = fw_json(env, "group", "describe", V1)["members"]
    racing = fw_process(env, "savepoint", "restore", V1, str(path))
    assert (racing.returncode, racing.stderr) == (1, (
        f"error: consumer group '{service}' has 1 active member(s) ({member['host']}/{member['client_id']}): a "
        "restore would race them. Fix: stop every instance of the service, then restore the savepoint\n"))
    assert svc.stop() == 0

    dropped = fw_process(env, "savepoint", "restore", DROPPED, str(path))
    assert (dropped.returncode, dropped.stderr) == (1, (
        f"error: savepoint {path} holds state the pipeline of '{service}' no longer has: store totals. Restoring "
        "leaves it out. Fix: give the steps their names back, or pass --allow-dropped-state to restore without "
        "it\n"))
    allowed = fw_json(env, "savepoint", "restore", DROPPED, str(path), "--allow-dropped-state", "--dry-run")
    assert (allowed["applied"], allowed["stores_dropped"], sorted(allowed["stores_written"])) == (
        False, ["totals"], ["_time", "per-second"])

    added = fw_json(env, "savepoint", "restore", ADDED, str(path))
    assert added["applied"] and added["stores_empty"] == ["counts"] and sorted(added["stores_written"]) == [
        "_time", "per-second", "totals"]
    assert added["local_deleted"] == [str(svc.state_dir.resolve() / service / s)
                                      for s in ("_time", "per-second", "totals")]
    assert not (svc.state_dir / service).exists()
    marks = _marks(out.totals())
    nxt = ServiceProcess(ADDED, tmp_path, "s", env)
    services.append(nxt)
    _produce(kafka_bootstrap, f"sp-in-{unique}", B)
    _run(nxt, lambda: len(read_topic(kafka_bootstrap, f"sp-counts-{unique}")) == len(B), "the new step's counts")
    counts = _per_key(read_topic(kafka_bootstrap, f"sp-counts-{unique}"))
    assert {k: v[0] for k, v in counts.items()} == {b"u0": 1, b"u1": 1, b"u2": 1, b"u3": 1}  # started empty
    totals = _per_key(_after(out.totals(), marks))
    assert {k: v[0][0] for k, v in totals.items()} == {b"u0": 12, b"u1": 12, b"u2": 12, b"u3": 12}  # 11 in A


def test_a_savepoint_is_made_of_the_service_by_name_as_fw_status_names_it_in_a_project(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    env, _, service, _ = _ran_a(kafka_bootstrap, unique, tmp_path, services)
    # a project whose services/<package>/pipeline.py defines the service, as `fw new service` lays it out
    project = tmp_path / "project"
    (project / "services" / f"sp_{unique}").mkdir(parents=True)
    (project / "services" / "__init__.py").write_text("")
    (project / "services" / f"sp_{unique}" / "__init__.py").write_text("")
    (project / "services" / f"sp_{unique}" / "pipeline.py").write_text(
        "from tests.integration.pipelines import savepointed_v1 as pipeline\n")
    by_target = fw_json(env, "savepoint", "create", V1, "--path", str(tmp_path / "by-target"))
    made = subprocess.run([sys.executable, "-c", "from framework.cli import main; main()", "savepoint", "create",
                           service, "--path", str(tmp_path / "by-name"), "--json"],
                          env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, cwd=project, capture_output=True,
                          text=True, timeout=120, check=False)
    assert made.returncode == 0, made.stderr
    by_name = json.loads(made.stdout)
    assert (by_name["service"], by_name["stores"], by_name["pipeline_hash"]) == (
        service, by_target["stores"], by_target["pipeline_hash"])
    assert pq.read_table(tmp_path / "by-name" / "stores" / "totals").sort_by("key").equals(
        pq.read_table(tmp_path / "by-target" / "stores" / "totals").sort_by("key"))


def test_a_savepoint_of_the_running_service_holds_its_members_at_one_checkpoint_and_a_rollback_to_it_is_exact(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    """Two members run; while a producer writes B and they process it, the savepoint holds both
    at a checkpoint (their inputs paused), reads the service and releases them; they go on to
    the end of B.
    Stopped and restored to the savepoint, the service runs over C: per key, the outputs
    written up to the savepoint (its manifest's ``outputs``) followed by those after the
    restore, read_committed, equal a service that never went past the savepoint."""
    env, _ = _setup(kafka_bootstrap, unique, tmp_path, "s0")
    members = [ServiceProcess(V1, tmp_path, f"s{i}", env) for i in range(2)]
    services.extend(members)
    out, source = Outputs(kafka_bootstrap, unique), f"sp-in-{unique}"
    end = 400_000  # C's last two readings move both partitions past every window
    a, b = _readings(range(300)), _readings(range(300, 1500))
    c = _readings([*range(1500, 1600), end // 100, end // 100 + 1])
    everything = [v for _, _, v in a + b + c]
    _produce(kafka_bootstrap, source, a)
    for m in members:
        m.start()
    admin = admin_client({"bootstrap.servers": kafka_bootstrap})

    def settled() -> bool:  # both members hold an input partition, the group stable
        stable, held = group_members(admin, f"sp-{unique}")
        return stable and len(held) == 2 and all(any(t == source for t, _ in parts) for _, _, parts in held)

    wait_until(lambda: len(out.totals()) == len(a) and settled(), 180, "the totals of A, both members running",
               lambda: members[0].log_text())

    def write_b() -> None:
        for i in range(0, len(b), 20):
            _produce(kafka_bootstrap, source, b[i:i + 20])

    writer = threading.Thread(target=write_b)
    writer.start()
    wait_until(lambda: len(out.totals()) > len(a) + 100, 180, "some of B processed", lambda: members[0].log_text())
    made = fw_json(env, "savepoint", "create", V1, "--path", str(tmp_path / "sp"))
    writer.join()
    assert sorted(made["held"]) == ["s0", "s1"]
    manifest = json.loads((tmp_path / "sp" / "manifest.json").read_text())
    saved = manifest["offsets"][source]
    assert sum(saved.values()) > len(a) + 100  # mid-stream: the hold's checkpoint committed what was processed
    logs = "".join(m.log_text() for m in members)
    assert logs.count("held for savepoint ") == 2 and logs.count(" released") == 2
    wait_until(lambda: len(out.totals()) == len(a + b), 180, "the totals of B", lambda: members[0].log_text())
    for m in members:
        assert m.stop() == 0

    fw_json(env, "savepoint", "restore", V1, str(tmp_path / "sp"))
    marks = {"totals": _marks(out.totals()), "windows": _marks(out.windows())}
    kept = {"totals": manifest["outputs"][f"sp-totals-{unique}"], "windows": manifest["outputs"][f"sp-windows-{unique}"]}
    _produce(kafka_bootstrap, source, c)
    after = len(everything) - sum(saved.values())
    windows = _expected_windows(everything, end)
    _run(members[0], lambda: (len(_after(out.totals(), marks["totals"])) == after
                              and len([r for r in out.windows() if r.offset < kept["windows"].get(str(r.partition), 0)])
                              + len(_after(out.windows(), marks["windows"])) == windows),
         "the outputs after the restore")

    _, ref = _setup(kafka_bootstrap, f"{unique}r", tmp_path, "r")
    services.append(ref)
    ref_out = Outputs(kafka_bootstrap, f"{unique}r")
    _produce(kafka_bootstrap, f"sp-in-{unique}r", a + b + c)
    _run(ref, lambda: len(ref_out.totals()) == len(everything) and len(ref_out.windows()) == windows,
         "the reference's outputs")
    for topic, read in (("totals", out.totals), ("windows", out.windows)):
        records = read()
        before = [r for r in records if r.offset < kept[topic].get(str(r.partition), 0)]
        assert _per_key(before + _after(records, marks[topic])) == _per_key(getattr(ref_out, topic)()), topic


def _endpoints(bootstrap: str, service: str) -> dict[str, str]:
    """instance -> status endpoint of each member of ``service``, as fw savepoint create finds them."""
    _, members = group_members(admin_client({"bootstrap.servers": bootstrap}), service)
    found = [parse_client_id(cid, service, host) for cid, host, _ in members]
    return {a.instance: str(a.endpoint) for a in found}


def _post(endpoint: str, action: str, **params: str) -> tuple[int, Any]:
    return ask_json(f"{endpoint}/savepoint/{action}?{urlencode(params)}", 90, method="POST")


def test_a_held_member_says_at_its_release_whether_a_rebalance_or_the_end_of_its_hold_came_first(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    """The member's side of a running service's savepoint, through its endpoint: a hold
    answers once the member has checkpointed and paused its partitions; a member joining
    meanwhile (a rebalance) is named at the release; a hold not released in time ends by
    itself, and the late release says so; the member then processes what waited."""
    env, s0 = _setup(kafka_bootstrap, unique, tmp_path, "s0")
    s1 = ServiceProcess(V1, tmp_path, "s1", env)
    services.extend([s0, s1])
    service, out, source = f"sp-{unique}", Outputs(kafka_bootstrap, unique), f"sp-in-{unique}"
    _produce(kafka_bootstrap, source, A)
    s0.start()
    wait_until(lambda: len(out.totals()) == len(A) and "s0" in _endpoints(kafka_bootstrap, service), 180,
               "the totals of A", s0.log_text)
    endpoint = _endpoints(kafka_bootstrap, service)["s0"]

    code, held = _post(endpoint, "hold", token="t1", seconds="120")
    assert code == 200 and held["instance"] == "s0"
    assert sorted(map(tuple, held["partitions"])) == [(f"{service}-by-group-repartition", 0),
                                                      (f"{service}-by-group-repartition", 1), (source, 0), (source, 1)]
    assert _post(endpoint, "hold", token="t9", seconds="10") == (409, {
        "error": "member s0 is held for another savepoint (t1); ask again when it is done"})
    s1.start()  # a rebalance while s0 is held
    wait_until(lambda: "s1" in _endpoints(kafka_bootstrap, service) and "disturbed" in s0.log_text(), 180,
               "s1 to join and s0 to note it", s0.log_text)
    code, released = _post(endpoint, "release", token="t1")
    assert code == 200 and released["instance"] == "s0"
    assert released["disturbed"].startswith("partitions [") and "member s0" in released["disturbed"]

    code, _ = _post(endpoint, "hold", token="t2", seconds="1")
    assert code == 200
    wait_until(lambda: "savepoint hold t2 ended by itself after 1 s" in s0.log_text(), 60, "the hold to end",
               s0.log_text)
    assert _post(endpoint, "release", token="t2") == (200, {
        "instance": "s0", "disturbed": "the hold ended by itself after 1 s, before the release: the member "
                                       "processed again"})
    assert _post(endpoint, "release", token="t3") == (409, {"error": "member s0 is not held for savepoint t3"})

    _produce(kafka_bootstrap, source, B)
    wait_until(lambda: len(out.totals()) == len(A) + len(B), 180, "B processed after the holds", s0.log_text)


# -- a damaged savepoint, and a restore that fails on the way -----------------------------------

DAMAGED_FIX = "or copy this one again from where it was made\n"


def _control_again(bootstrap: str, topic: str) -> None:
    """The last watermark control record of ``topic``'s partition 0 written once more: one in
    flight that is no record of the user's (the same watermark again changes nothing)."""
    [last] = [r for r in read_topic(bootstrap, topic) if r.partition == 0 and r.value is None][-1:]
    produce_to_partitions(bootstrap, topic, [(0, None, None, list(last.headers.items()))])


def _service_state(bootstrap: str, service: str, source: str) -> dict[str, Any]:
    """What a restore would change on the cluster: its internal topics' ids and records, and
    the group's committed offsets."""
    internal = [f"{service}-by-group-repartition", *(f"{service}-{s}-changelog" for s in ("_time", "per-second",
                                                                                        "totals"))]
    return {"ids": topic_ids(admin_client({"bootstrap.servers": bootstrap}), internal),
            "records": {t: sorted(((r.partition, r.offset, r.key, r.value) for r in read_topic(bootstrap, t)),
                                  key=lambda r: r[:2]) for t in internal},  # partitions interleave as they come
            "offsets": {t: committed_offsets(bootstrap, service, t) for t in (source, internal[0])}}


def _run_on_b(svc: ServiceProcess, bootstrap: str, unique: str, out: Outputs) -> None:
    """B processed after the savepoint's state: each user's total continues from its 11 of A."""
    marks = _marks(out.totals())
    _produce(bootstrap, f"sp-in-{unique}", B)
    _run(svc, lambda: len(_after(out.totals(), marks)) == len(B), "the totals of B")
    totals = _per_key(_after(out.totals(), marks))
    assert {k: v[0][0] for k, v in totals.items()} == {b"u0": 12, b"u1": 12, b"u2": 12, b"u3": 12}


def test_a_damaged_savepoint_is_refused_by_the_restore_and_its_dry_run_before_anything_changes(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of a savepoint with a store's file cut to half its size, then with a file replaced
    by another valid Parquet file of as many rows: ``--dry-run`` and the restore both refuse it
    in one line naming the file and the fix, and leave the service as it was: its internal
    topics (same ids, same records), its offsets and its local state. Started, it continues
    from its own state. The savepoint's ``create --json`` path is absolute, and its records in
    flight count the user's records, not the watermark control records among them."""
    env, svc = _setup(kafka_bootstrap, unique, tmp_path, "s")
    env = {**env, "FW_STATE_DIR": str(svc.state_dir)}
    services.append(svc)
    service, out, source = f"sp-{unique}", Outputs(kafka_bootstrap, unique), f"sp-in-{unique}"
    repartition = f"{service}-by-group-repartition"
    _produce(kafka_bootstrap, source, A)
    _run(svc, lambda: len(out.totals()) == len(A), "the totals of A")
    _in_flight(kafka_bootstrap, service)
    _control_again(kafka_bootstrap, repartition)

    monkeypatch.chdir(tmp_path)
    made = fw_json(env, "savepoint", "create", V1, "--path", "sp")  # a relative path: printed absolute
    assert made["path"] == str((tmp_path / "sp").resolve())
    flight = json.loads((tmp_path / "sp" / "manifest.json").read_text())["repartition"][repartition]
    rows = pq.read_table(tmp_path / "sp" / flight["path"]).to_pylist()
    users = [r for r in rows if r["value"] is not None]
    assert (flight["records"], flight["control"]) == (len(users), len(rows) - len(users))
    assert flight["control"] >= 1 and flight["records"] >= len(X)
    described = fw_process(env, "savepoint", "describe", str(tmp_path / "sp"))
    assert f"\n{flight['records']} records in flight in {repartition}\n" in described.stdout

    damaged = tmp_path / "damaged"
    shutil.copytree(tmp_path / "sp", damaged)
    file = damaged / "stores" / "totals" / PART
    intact = file.read_bytes()
    file.write_bytes(intact[: len(intact) // 2])
    before = _service_state(kafka_bootstrap, service, source)
    local = sorted(p.name for p in (svc.state_dir / service).iterdir())
    for args in (["--dry-run"], []):
        refused = fw_process(env, "savepoint", "restore", V1, str(damaged), *args)
        assert refused.returncode == 1 and refused.stdout == "", (args, refused.stderr)
        assert refused.stderr.startswith(f"error: savepoint {damaged} is damaged: {file} is not readable Parquet ("), (
            args, refused.stderr)
        assert refused.stderr.endswith(DAMAGED_FIX) and refused.stderr.count("\n") == 1, (args, refused.stderr)

    table = pq.read_table(tmp_path / "sp" / "stores" / "totals")  # as many rows, one entry's value another's
    values = table.column("value").to_pylist()
    values[-1] = next(v for v in values if v != values[-1])
    pq.write_table(table.set_column(table.schema.get_field_index("value"), "value", pa.array(values, pa.binary())),
                   file)
    for args in (["--dry-run"], []):
        refused = fw_process(env, "savepoint", "restore", V1, str(damaged), *args)
        assert refused.returncode == 1, (args, refused.stderr)
        assert refused.stderr.startswith(f"error: savepoint {damaged} is damaged: {file} is not the file the "
                                         "savepoint wrote (its SHA-256 is "), (args, refused.stderr)
        assert refused.stderr.endswith(DAMAGED_FIX) and refused.stderr.count("\n") == 1, (args, refused.stderr)

    assert _service_state(kafka_bootstrap, service, source) == before
    assert sorted(p.name for p in (svc.state_dir / service).iterdir()) == local
    _run_on_b(svc, kafka_bootstrap, unique, out)


def test_a_restore_that_fails_on_the_way_says_what_it_changed_and_running_it_again_finishes_it(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    """A changelog the broker refuses the savepoint's entries in (its max.message.bytes, which
    the restore keeps when it creates the topic anew, made too small): the restore fails after
    it has changed the service, and its one line says what it changed, not to start the
    service, and the command that finishes it. Once the setting is fixed, that command does,
    and the service continues from the savepoint."""
    env, svc = _setup(kafka_bootstrap, unique, tmp_path, "s")
    env = {**env, "FW_STATE_DIR": str(svc.state_dir)}
    services.append(svc)
    service, out = f"sp-{unique}", Outputs(kafka_bootstrap, unique)
    _produce(kafka_bootstrap, f"sp-in-{unique}", A)
    _run(svc, lambda: len(out.totals()) == len(A), "the totals of A")
    path = tmp_path / "sp"
    fw_json(env, "savepoint", "create", V1, "--path", str(path))

    changelog = f"{service}-totals-changelog"
    _set_topic_config(kafka_bootstrap, changelog, "max.message.bytes", "16")
    failed = fw_process(env, "savepoint", "restore", V1, str(path))
    assert failed.returncode == 1 and failed.stderr.count("\n") == 1, failed.stderr
    internal = ", ".join(sorted([f"{service}-by-group-repartition", f"{service}-_time-changelog",
                                 f"{service}-per-second-changelog", changelog]))
    assert failed.stderr.startswith(
        f"error: the restore of savepoint {path} onto '{service}' failed while flushing the written records (the "
        "Kafka client failed: Broker: Message size too large), after deleting the local state of store "), failed.stderr
    assert (f" in {svc.state_dir.resolve() / service}; deleting and creating anew {internal}; writing the entries of "
            "store ") in failed.stderr
    assert failed.stderr.endswith(
        ": the service's state is incomplete, do not start it. Fix: once that is fixed, run the same restore again "
        f"(fw savepoint restore {V1} {path}): it redoes every step\n"), failed.stderr

    _set_topic_config(kafka_bootstrap, changelog, "max.message.bytes", "1048588")
    again = fw_json(env, "savepoint", "restore", V1, str(path))
    assert again["applied"]
    _run_on_b(svc, kafka_bootstrap, unique, out)


def _set_topic_config(bootstrap: str, topic: str, name: str, value: str) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
    admin = admin_client({"bootstrap.servers": bootstrap})  # kept until the answer: its futures need it
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)
