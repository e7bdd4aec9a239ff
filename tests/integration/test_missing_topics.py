"""A topic a service writes to that does not exist stops it with one line naming the topic and
the command that creates it, rather than a 30 s wait and librdkafka's UNKNOWN_TOPIC_OR_PART:
at start, with ``kafka.create_topics`` false, before the member joins its group; and while it
runs, when a sink is deleted, at the first checkpoint that cannot deliver to it (the broker
creates no topic: ``auto.create.topics.enable=false``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.harness import (
    ROOT,
    ServiceProcess,
    produce,
    read_topic,
    service_env,
    wait_until,
)


def _topics(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics)


def test_a_missing_sink_stops_the_service_before_it_joins(kafka_bootstrap: str, unique: str, tmp_path: Path) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(f"numbers-{unique}", 4, 1)])[f"numbers-{unique}"].result()
    env = {**os.environ, **service_env(kafka_bootstrap, unique), "FW_KAFKA__CREATE_TOPICS": "false",
           "FW_OBSERVE__PORT": "0", "FW_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "framework.cli", "run", "tests.integration.pipelines:even_odd"],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 1, done.stderr
    u = unique
    assert done.stderr.splitlines()[-1] == (
        f"error: service 'eo-{u}' needs topics that do not exist on {kafka_bootstrap}: counts-{u}, seen-{u}, "
        f"sums-{u}, and kafka.create_topics is false. Fix: create them (fw topics create counts-{u} --partitions 4; "
        f"fw topics create seen-{u} --partitions 4; fw topics create sums-{u} --partitions 4) or set "
        "FW_KAFKA__CREATE_TOPICS=true"), done.stderr
    groups = admin.list_consumer_groups(request_timeout=30).result().valid
    assert [g.group_id for g in groups if unique in g.group_id] == []


def test_a_sink_deleted_while_the_service_runs_stops_it_naming_the_topic(kafka_bootstrap: str, unique: str,
                                                                       tmp_path: Path) -> None:
    svc = ServiceProcess("tests.integration.pipelines:even_odd", tmp_path, "0", service_env(kafka_bootstrap, unique))
    svc.start({"FW_OBSERVE__PORT": "0"})
    try:
        numbers, seen = f"numbers-{unique}", f"seen-{unique}"
        wait_until(lambda: numbers in _topics(kafka_bootstrap), 120, "the service's topics", svc.log_text)
        record = [(b"k", json.dumps(1).encode())]
        produce(kafka_bootstrap, numbers, record)
        wait_until(lambda: len(read_topic(kafka_bootstrap, seen)) == 1, 120, "the first output", svc.log_text)
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        admin.delete_topics([seen])[seen].result()
        wait_until(lambda: seen not in _topics(kafka_bootstrap), 60, f"{seen} deleted")
        produce(kafka_bootstrap, numbers, record)
        assert svc.wait_exit(120) == 1, svc.log_text()
    finally:
        if svc.alive:
            svc.kill()
    errors = [line for line in svc.log_text().splitlines() if line.startswith("error:")]
    assert errors == [
        (f"error: service 'eo-{unique}' writes to a topic that no longer exists on {kafka_bootstrap}: {seen}; what "
        f"it writes there cannot be delivered. Fix: create it (fw topics create {seen} --partitions 4), then start "
        "the service again")], svc.log_text()
