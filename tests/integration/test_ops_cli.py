"""``fw topics``, ``fw group`` and ``fw state`` against the real broker, through the real CLI:
click's runner in this process for output, a subprocess where the one-line error and the
exit status are the subject. Services run as real ``fw run`` processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from framework.cli import cli
from framework.kafka.io import produce_values
from framework.serde import AvroSerde, load_schema
from tests.integration.harness import (
    ROOT,
    ServiceProcess,
    present,
    read_topic,
    service_env,
    wait_until,
)

TARGET = "tests.integration.pipelines:even_odd"  # JSON numbers -> sums by parity (key_by), counts by key
SINGLE_OBJECT = "tests.integration.pipelines:single_object_purchases"  # Avro shop.Purchase, single-object


def fw(env: dict[str, str], *args: str, stdin: str | None = None) -> Result:
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=True, input=stdin)
    return result


def fw_json(env: dict[str, str], *args: str, stdin: str | None = None) -> Any:
    result = fw(env, *args, "--json", stdin=stdin)
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.output)


def fw_process(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """The installed entry point's behaviour (one-line errors, exit status), in a subprocess."""
    return subprocess.run([sys.executable, "-c", "from framework.cli import main; main()", *args],
                          env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, cwd=ROOT, capture_output=True, check=False,
                          text=True, timeout=120, input=stdin)


def test_topics_create_list_describe_and_tail_an_avro_topic_with_a_poison_record(kafka_bootstrap: str,
                                                                                    unique: str) -> None:
    env = {"FW_BOOTSTRAP_SERVERS": kafka_bootstrap}
    topic = f"ops-avro-{unique}"
    created = fw_json(env, "topics", "create", topic, "--partitions", "2", "--config", "cleanup.policy=compact,delete")
    assert [p["partition"] for p in created["partitions"]] == [0, 1]
    listed = {t["name"]: t for t in fw_json(env, "topics", "list")}
    assert listed[topic]["partitions"] == 2 and listed[topic]["internal"] == ""

    serde = AvroSerde(load_schema("demo.Number"))
    now = int(time.time() * 1000) - 60_000  # timestamps in order, newest last, none in the future
    records = [(b"k%d" % (i % 3), serde.serialize({"n": i}), now + i) for i in range(12)]
    produce_values(kafka_bootstrap, topic, [*records, (b"poison", b"\x01\x02 not avro", now + 100)])
    described = fw_json(env, "topics", "describe", topic)
    assert described["config"] == {"cleanup.policy": "compact,delete"}
    assert sum(p["end"] for p in described["partitions"]) == 13

    rows = [json.loads(line) for line in fw(env, "topics", "tail", topic, "--schema", "demo.Number", "--from",
                                             "earliest", "--json").output.splitlines()]
    decoded = sorted(r["value"]["n"] for r in rows if "error" not in r)
    assert decoded == list(range(12))
    [poison] = [r for r in rows if "error" in r]
    assert poison["key"] == "poison"
    assert poison["error"].startswith(f"{topic}[{poison['partition']}]@{poison['offset']}: cannot decode the value")

    last = fw(env, "topics", "tail", topic, "--schema", "demo.Number", "-n", "2")  # the table, newest two
    assert last.exit_code == 0, last.output
    assert f"! {topic}[{poison['partition']}]@{poison['offset']}" in last.output and '{"n":11}' in last.output

    again = fw_process(env, "topics", "create", topic, "--partitions", "2")
    assert again.returncode == 1 and again.stderr.count("\n") == 1
    assert again.stderr.startswith(f"error: topic '{topic}' exists already")
    unknown = fw_process(env, "topics", "tail", f"ops-avro-{unique}x")
    assert unknown.returncode == 1 and f"did you mean {topic}" in unknown.stderr


def test_group_reset_refused_while_a_member_runs_then_state_and_offsets(kafka_bootstrap: str, unique: str,
                                                                       services: list[ServiceProcess],
                                                                       tmp_path: Path) -> None:
    env = {**service_env(kafka_bootstrap, unique), "FW_STATE_DIR": str(tmp_path / "state-0")}
    source = f"numbers-{unique}"
    assert fw(env, "topics", "create", source, "--partitions", "4").exit_code == 0
    numbers = list(range(1, 61))
    produce_values(kafka_bootstrap, source, [(f"k{n % 5}".encode(), str(n).encode()) for n in numbers])
    svc = ServiceProcess(TARGET, tmp_path, "0", service_env(kafka_bootstrap, unique)).start()
    services.append(svc)

    def members() -> list[Any]:
        return list(fw_json(env, "group", "describe", TARGET)["members"])

    wait_until(lambda: bool(members()), 120, "the member to join", svc.log_text)
    refused = fw_process(env, "group", "reset", TARGET, "--to", "earliest")
    assert refused.returncode != 0 and refused.stderr.count("\n") == 1, refused.stderr
    assert "active member" in refused.stderr and refused.stderr.startswith("error: ")

    even, odd = sum(n for n in numbers if n % 2 == 0), sum(n for n in numbers if n % 2)
    wait_until(lambda: _last_sums(kafka_bootstrap, unique) == {"even": even, "odd": odd}, 120, "the final sums",
               svc.log_text)
    assert svc.stop() == 0

    assert _get(env, "sums", "even") == ("local", even)
    assert _get(env, "counts", "k1") == ("local", 12)
    view = fw_json(env, "group", "describe", TARGET)
    lags = {r["partition"]: r["lag"] for r in view["partitions"] if r["topic"] == source}
    assert view["members"] == [] and lags == {0: 0, 1: 0, 2: 0, 3: 0}

    shutil.rmtree(env["FW_STATE_DIR"])  # no local copy: rebuilt from the changelog
    assert _get(env, "sums", "odd") == ("changelog", odd)
    assert _get(env, "counts", "k1") == ("changelog", 12)

    reset = fw_json(env, "group", "reset", TARGET, "--to", "earliest")
    assert reset["applied"] and reset["topics_recreated"] == [f"eo-{unique}-counts-changelog",
                                                             f"eo-{unique}-parity-repartition",
                                                             f"eo-{unique}-sums-changelog"]
    after = fw_json(env, "group", "describe", TARGET)
    committed = {(r["topic"], r["partition"]): r["committed"] for r in after["partitions"]}
    assert {p: committed[(source, p)] for p in range(4)} == {p: 0 for p in range(4)}
    assert all(r["lag"] == 0 for r in after["partitions"] if r["topic"].endswith("-repartition"))
    assert fw_json(env, "state", "get", TARGET, "sums", "even")["entries"] == []  # the changelog is empty now


def _get(env: dict[str, str], store: str, key: str) -> tuple[str, Any]:
    [entry] = fw_json(env, "state", "get", TARGET, store, key)["entries"]
    return entry["source"], entry["value"]


def _last_sums(bootstrap: str, suffix: str) -> dict[str, int]:
    return {r.key.decode(): json.loads(present(r.value)) for r in read_topic(bootstrap, f"sums-{suffix}") if r.key}


def _ends(env: dict[str, str], topic: str) -> list[int]:
    return [p["end"] for p in fw_json(env, "topics", "describe", topic)["partitions"]]


def _tail(env: dict[str, str], topic: str, *args: str) -> list[dict[str, Any]]:
    result = fw(env, "topics", "tail", topic, *args, "--json")
    assert result.exit_code == 0, (result.output, result.exception)
    return [json.loads(line) for line in result.output.splitlines()]


def test_produce_with_a_services_serdes_from_arguments_stdin_and_a_tombstone(kafka_bootstrap: str,
                                                                            unique: str) -> None:
    env = service_env(kafka_bootstrap, unique)
    topic = f"numbers-{unique}"
    assert fw(env, "topics", "create", topic, "--partitions", "4").exit_code == 0

    one = fw(env, "produce", topic, "--service", TARGET, "--key", "k1", "--value", "42", "--header", "src=cli",
             "--header", "src=again", "--timestamp", "1700000000000")
    assert one.exit_code == 0, (one.output, one.exception)
    assert one.output.startswith(f"wrote 1 record to {topic}: partition ") and one.output.endswith("(of 4)\n")
    lines = "".join(json.dumps({"key": f"k{n % 3}", "value": n, "headers": {"n": str(n)}, "timestamp": 1700000000000 + n})
                    + "\n" for n in range(1, 7))
    many = fw_json(env, "produce", topic, "--service", TARGET, stdin=lines + "\n")
    assert many["records"] == 6 and many["topic_partitions"] == 4 and sum(many["partitions"].values()) == 6
    gone = fw(env, "produce", topic, "--service", TARGET, "--delete", "k1")
    assert gone.exit_code == 0, gone.output

    rows = _tail(env, topic, "--service", TARGET, "--from", "earliest")
    by_value = {r["value"]: r for r in rows}
    assert sorted(by_value, key=lambda v: (v is None, v)) == [1, 2, 3, 4, 5, 6, 42, None]
    assert by_value[42]["key"] == "k1" and by_value[42]["timestamp"] == 1700000000000
    assert by_value[42]["headers"] == {"src": "again"}  # the last of each name, as the tail shows them
    assert by_value[5]["headers"] == {"n": "5"} and by_value[5]["timestamp"] == 1700000000005
    assert by_value[None]["key"] == "k1" and by_value[None]["partition"] == by_value[42]["partition"]


def test_produce_single_object_avro_refuses_a_bad_file_whole(kafka_bootstrap: str, unique: str,
                                                              tmp_path: Path) -> None:
    env = service_env(kafka_bootstrap, unique)
    topic = f"so-purchases-{unique}"
    assert fw(env, "topics", "create", topic, "--partitions", "1").exit_code == 0
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps({"key": f"u{n}", "value": {"user": f"u{n}", "amount": n}}) + "\n"
                            for n in range(3)))
    written = fw(env, "produce", topic, "--service", SINGLE_OBJECT, "--file", str(good))
    assert written.exit_code == 0 and written.output == f"wrote 3 records to {topic}: partition 0 (of 1)\n"
    rows = _tail(env, topic, "--service", SINGLE_OBJECT, "--from", "earliest")
    assert [r["value"] for r in rows] == [{"user": f"u{n}", "amount": n} for n in range(3)]

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"key": "u9", "value": {"user": "u9", "amount": 9}}\n'
                   '{"key": "u10", "value": {"user": "u10"}}\n'
                   '{"key": "u11", "value": {"user": "u11", "amount": 11}\n')
    refused = fw_process(env, "produce", topic, "--service", SINGLE_OBJECT, "--file", str(bad))
    problems = refused.stderr.splitlines()
    assert refused.returncode == 2 and len(problems) == 3, refused.stderr
    assert problems[0].startswith(f"error: {bad}:2: the value: Avro (single-object, schema shop.Purchase")
    assert "amount" in problems[0]
    assert problems[1].startswith(f"error: {bad}:3: not JSON: ")
    assert problems[2] == f"error: nothing was written: 2 of 3 records of {bad} are bad (the lines above)"
    assert _ends(env, topic) == [3]


def test_produce_raw_and_by_schema_and_its_one_line_errors(kafka_bootstrap: str, unique: str) -> None:
    env = service_env(kafka_bootstrap, unique)
    topic = f"ops-produce-{unique}"
    assert fw(env, "topics", "create", topic, "--partitions", "2").exit_code == 0
    lines = ('{"key": "a", "value": "text"}\n{"key": {"id": 1}, "value": {"n": 1}}\n'
             '{"value": {"base64": "AAEC"}}\n')
    assert fw_json(env, "produce", topic, stdin=lines)["records"] == 3
    assert fw(env, "produce", topic, "--schema", "demo.Number", "-k", "n", "-v", '{"n": 7}').exit_code == 0
    rows = _tail(env, topic, "--from", "earliest")
    raw = {json.dumps(r["key"]): r["value"] for r in rows}
    assert raw['"a"'] == "text" and raw['"{\\"id\\":1}"'] == '{"n":1}' and raw["null"] == {"base64": "AAEC"}
    [by_schema] = [r for r in _tail(env, topic, "--schema", "demo.Number", "--from", "earliest") if r["key"] == "n"]
    assert by_schema["value"] == {"n": 7} and "error" not in by_schema
    ends = _ends(env, topic)

    not_avro = fw_process(env, "produce", topic, "--schema", "demo.Number", "-v", '{"n": "seven"}')
    assert not_avro.returncode == 2 and not_avro.stderr.count("\n") == 2, not_avro.stderr
    assert not_avro.stderr.startswith("error: the arguments: Avro (single-object, schema demo.Number")
    unknown = fw_process(env, "produce", f"{topic}-x", "-v", "1")
    assert unknown.returncode == 1 and unknown.stderr.count("\n") == 1, unknown.stderr
    assert f"fw topics create {topic}-x --partitions N" in unknown.stderr
    not_a_source = fw_process(env, "produce", topic, "--service", TARGET, "-v", "1")
    assert not_a_source.returncode == 2 and not_a_source.stderr.count("\n") == 1, not_a_source.stderr
    alone = fw_process(env, "produce", topic, "--key", "k")
    assert alone.returncode == 2 and "--key needs --value" in alone.stderr and alone.stderr.count("\n") == 1
    assert _ends(env, topic) == ends


def test_tail_from_one_offset_reads_that_partition_only(kafka_bootstrap: str, unique: str) -> None:
    env = {"FW_BOOTSTRAP_SERVERS": kafka_bootstrap}
    topic = f"ops-tail-{unique}"
    assert fw(env, "topics", "create", topic, "--partitions", "2").exit_code == 0
    produce_values(kafka_bootstrap, topic, [(f"k{n}".encode(), str(n).encode()) for n in range(40)])
    offsets = {(r["partition"], r["offset"]): r["value"] for r in _tail(env, topic, "--from", "earliest")}
    assert len(offsets) == 40 and {p for p, _ in offsets} == {0, 1}

    [one] = _tail(env, topic, "--from", f"{topic}:1:2", "-n", "1")
    assert (one["partition"], one["offset"], one["value"]) == (1, 2, offsets[(1, 2)])
    three = _tail(env, topic, "--from", f"{topic}:0:1", "-n", "3")
    assert [(r["partition"], r["offset"]) for r in three] == [(0, 1), (0, 2), (0, 3)]
    rest = _tail(env, topic, "--from", f"{topic}:1:2")
    assert [(r["partition"], r["offset"]) for r in rest] == sorted(k for k in offsets if k[0] == 1 and k[1] >= 2)
    assert len(_tail(env, topic, "-n", "5")) == 5


def _topics(env: dict[str, str]) -> set[str]:
    return {t["name"] for t in fw_json(env, "topics", "list")}


def test_topics_delete_by_name_and_matching_with_dry_run_and_confirmation(kafka_bootstrap: str, unique: str) -> None:
    env = {"FW_BOOTSTRAP_SERVERS": kafka_bootstrap}
    names = [f"ops-del-{unique}-a", f"ops-del-{unique}-b", f"ops-keep-{unique}", f"ops-one-{unique}"]
    for name in names:
        assert fw(env, "topics", "create", name, "--partitions", "1").exit_code == 0

    unknown = fw_process(env, "topics", "delete", names[3], f"ops-one-{unique}x")
    assert unknown.returncode == 1 and unknown.stderr.count("\n") == 1 and "nothing was deleted" in unknown.stderr
    assert set(names) <= _topics(env)
    one = fw(env, "topics", "delete", names[3])
    assert one.exit_code == 0 and one.output == f"topics deleted: {names[3]}\n"
    assert names[3] not in _topics(env)

    pattern = f"ops-del-{unique}-.*"
    dry = fw_json(env, "topics", "delete", "--matching", pattern, "--dry-run")
    assert dry == {"topics": names[:2], "in_use": {}, "deleted": False}
    declined = fw_process(env, "topics", "delete", "--matching", pattern, stdin="n\n")
    assert declined.returncode == 130 and set(names[:3]) <= _topics(env)
    done = fw(env, "topics", "delete", "--matching", pattern, "--yes")
    assert done.exit_code == 0 and done.output == f"topics deleted: {', '.join(names[:2])}\n"
    assert _topics(env) & set(names) == {names[2]}
    bad = fw_process(env, "topics", "delete", "--matching", "ops-(")
    assert bad.returncode == 2 and bad.stderr.startswith("error: --matching 'ops-(' is not a regular expression")


def test_topics_delete_refuses_a_running_services_topics_unless_forced(kafka_bootstrap: str, unique: str,
                                                                      services: list[ServiceProcess],
                                                                      tmp_path: Path) -> None:
    env = service_env(kafka_bootstrap, unique)
    source, spare = f"numbers-{unique}", f"ops-spare-{unique}"
    for name in (source, spare):
        assert fw(env, "topics", "create", name, "--partitions", "2").exit_code == 0
    svc = ServiceProcess(TARGET, tmp_path, "0", env).start()
    services.append(svc)
    wait_until(lambda: bool(fw_json(env, "group", "describe", TARGET)["members"]), 120, "the member to join",
               svc.log_text)

    changelog = f"eo-{unique}-sums-changelog"
    for args in ([source, spare], [changelog], [source, "--dry-run"]):
        refused = fw_process(env, "topics", "delete", *args)
        assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
        assert refused.stderr.startswith("error: refused: 1 topic is used by a running service: ")
        assert f"consumer group eo-{unique}, 1 active member" in refused.stderr
    assert {source, spare, changelog} <= _topics(env)

    forced = fw_json(env, "topics", "delete", source, spare, "--force", "--dry-run")
    assert forced["topics"] == sorted([source, spare]) and list(forced["in_use"]) == [source]
    assert fw(env, "topics", "delete", spare).exit_code == 0 and spare not in _topics(env)


def test_state_of_a_service_that_never_ran_names_no_other_services_topics(kafka_bootstrap: str, unique: str,
                                                                           tmp_path: Path) -> None:
    # another service whose changelog is the nearest name on the cluster to this one's
    other = service_env(kafka_bootstrap, f"{unique}x")
    created = fw(other, "topics", "create", f"eo-{unique}x-sums-changelog", "--partitions", "2")
    assert created.exit_code == 0, created.output
    env = {**service_env(kafka_bootstrap, unique), "FW_STATE_DIR": str(tmp_path)}
    for args in (["get", TARGET, "sums", "even"], ["scan", TARGET, "sums"]):
        asked = fw_process(env, "state", *args)
        assert asked.returncode == 1 and asked.stdout == "", asked.stdout
        assert asked.stderr == (
            f"error: no local copy of store 'sums' under {tmp_path.resolve()}/eo-{unique}/sums and no changelog "
            f"topic 'eo-{unique}-sums-changelog' on {kafka_bootstrap}: service 'eo-{unique}' has not run there "
            "yet; start it (fw run), or name the place it ran with FW_STATE_DIR / FW_BOOTSTRAP_SERVERS\n")
