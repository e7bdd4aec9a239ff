"""FW_LOG_FORMAT=json on a real `fw run` process: every line it writes is one JSON object,
and the dead-letter line of a poison record carries the record's coordinates as fields."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from tests.integration.harness import (
    ServiceProcess,
    produce_to_partitions,
    read_topic,
    service_env,
    wait_until,
)

pytestmark = pytest.mark.integration

TARGET = "tests.integration.pipelines:even_odd"  # JSON values: a record that is not JSON is poison
PARTITION = 2
GOOD = 5  # good records before the poison one in its partition: the poison one is at offset 5


def _entries(log: str) -> list[dict[str, Any]]:
    """The log's lines as JSON objects (the harness's own `---- start` marker aside)."""
    entries = []
    for line in log.splitlines():
        if line.startswith("---- start "):
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            raise AssertionError(f"not a JSON line: {line!r}") from None
        assert isinstance(entry, dict), line
        entries.append(entry)
    return entries


def test_json_logs_name_the_poison_record_in_fields(kafka_bootstrap: str, unique: str,
                                                    tmp_path: Path,
                                                    services: list[ServiceProcess]) -> None:
    source, dead = f"numbers-{unique}", f"eo-{unique}-dead-letter"
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(source, 4)])
    records = [(PARTITION, f"k-{n}".encode(), str(n).encode()) for n in range(GOOD)]
    records.append((PARTITION, b"k-poison", b"{not json"))
    records += [(0, b"k-after", b"7")]
    produce_to_partitions(kafka_bootstrap, source, records)

    env = {**service_env(kafka_bootstrap, unique), "FW_LOG_FORMAT": "json"}
    svc = ServiceProcess(TARGET, tmp_path, "0", env).start()
    services.append(svc)
    wait_until(lambda: len(read_topic(kafka_bootstrap, dead)) == 1, 120, "the dead letter",
               lambda: svc.log_text()[-3000:])
    assert svc.stop() == 0, svc.log_text()[-3000:]

    assert svc.proc is not None
    entries = _entries(svc.log_text())
    assert len(entries) > 3, "the service logged its start, its assignment and the dead letter"
    for entry in entries:
        assert {"ts", "level", "logger", "message", "pid"} <= set(entry), entry
        assert entry["pid"] == svc.proc.pid, entry
    [line] = [e for e in entries if e["message"].startswith("dead letter:")]
    assert line["level"] == "ERROR" and line["logger"] == "framework.task"
    assert (line["topic"], line["partition"], line["offset"]) == (source, PARTITION, GOOD)
    assert [line[k] for k in ("key", "step", "service")] == ["k-poison", "source-0", f"eo-{unique}"]
    assert f"{source}[{PARTITION}]@{GOOD}" in line["message"]  # the text it always said

    [letter] = read_topic(kafka_bootstrap, dead)
    assert letter.headers["fw.source.partition"] == str(PARTITION).encode()
    assert letter.headers["fw.source.offset"] == str(GOOD).encode()
