"""A service's state across releases on the real broker, through the real CLI and ``fw run``
processes: a release that renames a stateful step names the old store at start; ``fw group
reset`` with that release's definition removes the old store too, so a rollback starts it from
nothing; ``fw state drop`` drops one store and refuses in the two cases it must; and two
services whose names share a prefix do not touch each other's topics."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from framework.kafka.io import produce_values
from tests.integration.harness import Record, ServiceProcess, read_topic, service_env, wait_until
from tests.integration.test_ops_cli import fw, fw_json, fw_process

V1, V2 = "tests.integration.pipelines:rolling_v1", "tests.integration.pipelines:rolling_v2"
SHORT, LONG = "tests.integration.pipelines:prefix_short", "tests.integration.pipelines:prefix_long"
N = 60


def _numbers(n: int) -> list[tuple[bytes, bytes]]:
    return [(f"k{i % 6}".encode(), str(i).encode()) for i in range(1, n + 1)]


def _per_key(records: list[Record]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        if r.key is not None:
            out[r.key.decode()].append(json.loads(r.value or b"null"))
    return dict(out)


def _warnings(svc: ServiceProcess, text: str) -> list[str]:
    """The lines of the service's log (this start's) that contain ``text``, from the level on."""
    run = svc.log_text().rsplit("---- start", 1)[-1]
    return [line.split(" ", 2)[2] for line in run.splitlines() if text in line]


def _members(env: dict[str, str], target: str) -> list[dict[str, Any]]:
    return list(fw_json(env, "group", "describe", target)["members"])


def _assigned(env: dict[str, str], target: str) -> bool:
    return any(m["assignment"] for m in _members(env, target))


def _topics(env: dict[str, str]) -> set[str]:
    return {t["name"] for t in fw_json(env, "topics", "list")}


def _topic_id(env: dict[str, str], topic: str) -> str:
    return str(fw_json(env, "topics", "describe", topic)["topic_id"])


def test_a_renamed_step_is_named_at_start_reset_removes_its_state_and_a_rollback_starts_it_over(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    state = tmp_path / "state"
    env = {**service_env(kafka_bootstrap, unique), "FW_STATE_DIR": str(state)}
    service, source, output = f"roll-{unique}", f"roll-in-{unique}", f"roll-out-{unique}"
    running, totals = f"{service}-running-changelog", f"{service}-totals-changelog"
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(source, 2)])
    produce_values(kafka_bootstrap, source, _numbers(N))

    v1 = ServiceProcess(V1, tmp_path, "0", env)
    services.append(v1)
    v1.start({"FW_STATE_DIR": str(state)})
    wait_until(lambda: len(read_topic(kafka_bootstrap, output)) == N, 120, "v1's outputs", v1.log_text)
    assert v1.stop() == 0
    first_run = _per_key(read_topic(kafka_bootstrap, output))
    assert len(first_run) == 6 and all(outputs[0][0] == 1 for outputs in first_run.values())

    v2 = ServiceProcess(V2, tmp_path, "1", env)
    services.append(v2)
    v2.start({"FW_STATE_DIR": str(state)})
    wait_until(lambda: _assigned(env, V2), 120, "v2 to take its partitions", v2.log_text)
    assert _warnings(v2, "no longer has") == [(
        f"WARNING framework.runtime service '{service}' has the state of a store its pipeline no longer has: "
        f"running ({running}). A step renamed or removed starts from nothing, and a release that has the step "
        f"again would continue from this old state. Fix: drop it (fw state drop {V2} running), or give the "
        "step its old name back")]
    wait_until(lambda: (state / service / "totals").is_dir(), 60, "v2's store opened", v2.log_text)
    assert v2.stop() == 0

    dry = fw(env, "group", "reset", V2, "--to", "earliest", "--dry-run")
    assert dry.exit_code == 0, dry.output
    lines = dry.output.splitlines()
    assert f"internal topics would be created anew, empty: {totals}" in lines
    assert f"internal topics would be deleted (of stores and steps the pipeline no longer has): {running}" in lines
    assert f"local state would be deleted from {state.resolve() / service}: running, totals" in lines
    assert (f"outputs kept: {output}. The rerun appends its results after the earlier run's, so a reader from "
            "their start sees both. To write to new topics instead, rename them in the pipeline (e.g. "
            f'Topic("{output}-2")) before the service starts again') in lines
    assert f"dead letters kept: {service}-dead-letter (the user's data); the rerun's are appended" in lines
    assert lines[-1] == "dry run: nothing was changed"
    assert running in _topics(env) and (state / service / "running").is_dir()

    reset = fw_json(env, "group", "reset", V2, "--to", "earliest")
    assert reset["applied"]
    assert (reset["topics_recreated"], reset["topics_deleted"]) == ([totals], [running])
    assert reset["local_deleted"] == [str(state.resolve() / service / s) for s in ("running", "totals")]
    assert running not in _topics(env) and output in _topics(env) and source in _topics(env)
    assert not (state / service).exists()

    rollback = ServiceProcess(V1, tmp_path, "2", env)
    services.append(rollback)
    rollback.start({"FW_STATE_DIR": str(state)})
    wait_until(lambda: bool(_members(env, V1)), 120, "the rollback to join", rollback.log_text)
    [member] = _members(env, V1)
    racing = fw_process(env, "state", "drop", V2, "running")
    assert (racing.returncode, racing.stderr) == (1, (
        f"error: consumer group '{service}' has 1 active member(s) ({member['host']}/{member['client_id']}): "
        "dropping a store would race them. Fix: stop every instance of the service, then drop it\n"))
    wait_until(lambda: len(read_topic(kafka_bootstrap, output)) == 2 * N, 120, "the rerun's outputs",
               rollback.log_text)
    assert rollback.stop() == 0
    rerun = {key: outputs[len(first_run[key]):] for key, outputs in _per_key(read_topic(kafka_bootstrap, output)).items()}
    assert rerun == first_run  # each count starts at 1 again: nothing of the old `running` state

    in_use = fw_process(env, "state", "drop", V2, "totals")
    assert (in_use.returncode, in_use.stderr) == (1, (
        f"error: store 'totals' is a store of the pipeline of '{service}' ({V2}): dropping it would take the "
        f"state the service uses. Fix: to start the service over, fw group reset {V2} --to POSITION; to drop "
        "this store, remove or rename its step first\n"))

    dry_drop = fw(env, "state", "drop", V2, "running", "--dry-run")
    assert dry_drop.exit_code == 0, dry_drop.output
    assert dry_drop.output.splitlines()[:2] == [f"changelog would be deleted: {running}",
                                                f"local state would be deleted from {state.resolve() / service}: running"]
    assert running in _topics(env) and (state / service / "running").is_dir()
    dropped = fw_json(env, "state", "drop", V2, "running")
    assert dropped["applied"] and dropped["changelog_deleted"] == running
    assert dropped["local_deleted"] == [str(state.resolve() / service / "running")]
    assert running not in _topics(env) and not (state / service / "running").exists()


def test_services_whose_names_share_a_prefix_do_not_touch_each_others_state(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    state = tmp_path / "state"
    env = {**service_env(kafka_bootstrap, unique), "FW_STATE_DIR": str(state)}
    short, long = f"sh-{unique}", f"sh-{unique}-enrich"
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}),
                  [TopicSpec(f"{short}-in", 2), TopicSpec(f"{long}-in", 2)])
    for name in (short, long):
        produce_values(kafka_bootstrap, f"{name}-in", _numbers(N))
    procs = {target: ServiceProcess(target, tmp_path, str(i), env) for i, target in enumerate((SHORT, LONG))}
    services.extend(procs.values())
    for target, name in ((SHORT, short), (LONG, long)):
        svc = procs[target]
        svc.start({"FW_STATE_DIR": str(state)})
        def written(n: str = name) -> bool:
            return len(read_topic(kafka_bootstrap, f"{n}-out")) == N

        wait_until(written, 120, f"{name}'s outputs", svc.log_text)
        assert svc.stop() == 0

    again = procs[SHORT].start({"FW_STATE_DIR": str(state)})  # sees sh-...-enrich-counts-changelog
    wait_until(lambda: _assigned(env, SHORT), 120, "the short-named service to take its partitions",
               again.log_text)
    assert _warnings(again, "no longer has") == []
    assert again.stop() == 0

    long_changelog = f"{long}-counts-changelog"
    long_id, long_records = _topic_id(env, long_changelog), len(read_topic(kafka_bootstrap, long_changelog))
    reset = fw_json(env, "group", "reset", SHORT, "--to", "earliest")
    assert (reset["topics_recreated"], reset["topics_deleted"]) == ([f"{short}-counts-changelog"], [])
    assert reset["local_deleted"] == [str(state.resolve() / short / "counts")]
    assert reset["kept"]["outputs"] == [f"{short}-out"]  # the user's, though its name starts with the service's
    assert _topic_id(env, long_changelog) == long_id
    assert len(read_topic(kafka_bootstrap, long_changelog)) == long_records
    assert (state / long / "counts").is_dir()
    assert len(read_topic(kafka_bootstrap, f"{short}-out")) == N and len(read_topic(kafka_bootstrap, f"{short}-in")) == N

    refused = fw_process(env, "state", "drop", SHORT, "enrich-counts")
    assert (refused.returncode, refused.stderr) == (1, (
        f"error: topic {long_changelog} is a changelog of service '{long}' (its name extends '{short}'), not of "
        f"'{short}': nothing dropped. Fix: drop it as a store of that service, if that is what you meant\n"))

    short_id = _topic_id(env, f"{short}-counts-changelog")
    reset = fw_json(env, "group", "reset", LONG, "--to", "earliest")
    assert (reset["topics_recreated"], reset["topics_deleted"]) == ([long_changelog], [])
    assert _topic_id(env, f"{short}-counts-changelog") == short_id
    assert not (state / long).exists()
