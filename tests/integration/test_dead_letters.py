"""Dead letters a user can trace and read, against a real `fw run` process.

``traced_orders`` re-keys twice, so a record can fail one or two repartition topics away from
the record the user produced. Every dead letter names that input record (``fw.origin.*``) as
well as the repartition record it failed in (``fw.source.*``); its value is the original bytes
when the input did not decode, else the value as the failing step received it, as JSON
(``fw.value.encoding``), never the framework's internal encoding. ``fw topics tail`` shows each
in one row, and ``on_error=fail`` names the same origin and step in its one line.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from framework.cli import cli
from framework.engine.partitioner import partition_for
from framework.kafka.io import produce_values
from tests.integration.harness import (
    ROOT,
    Record,
    ServiceProcess,
    read_topic,
    service_env,
    wait_until,
)

TARGET = "tests.integration.pipelines:traced_orders"
CHECK_FIX = "Fix: fix the step's function or the input (with on_error=dead_letter the record goes to the " \
            "dead-letter topic)"
T0 = 1_790_000_000_000  # 2026-09-21T14:13:20Z: the inputs' timestamps, T0 + their index


def _inputs() -> list[bytes]:
    return [
        b'{"user": "ann", "amount": 5}',
        b"not json",  # does not decode: a dead letter of the source step, its bytes as produced
        b'{"user": "bob", "amount": -1}',  # fails in 'check', behind the by-user repartition topic
        b'{"user": "cyd", "amount": 13}',  # fails in 'band', behind both repartition topics
        b'{"user": "ann", "amount": 700}',
    ]


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> int:
    """All under key ``k``: one partition (returned), offsets 0, 1, ... in order."""
    produce_values(bootstrap, topic, [(b"k", v, T0 + i) for i, v in enumerate(values)])
    return partition_for(b"k", 2)


def _origin(letter: Record) -> str:
    h = letter.headers
    return f"{h['fw.origin.topic'].decode()}[{h['fw.origin.partition'].decode()}]@{h['fw.origin.offset'].decode()}"


def _through(letter: Record) -> str:
    h = letter.headers
    return f"{h['fw.source.topic'].decode()}[{h['fw.source.partition'].decode()}]@{h['fw.source.offset'].decode()}"


def _carried_origin(bootstrap: str, letter: Record) -> str:
    """The ``fw.origin`` header of the repartition record the dead letter says it failed in."""
    h = letter.headers
    [found] = [r for r in read_topic(bootstrap, h["fw.source.topic"].decode())
               if (r.partition, r.offset) == (int(h["fw.source.partition"]), int(h["fw.source.offset"]))]
    return found.headers["fw.origin"].decode()


def test_dead_letters_name_the_input_record_and_hold_a_readable_value(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    source, dead_topic = f"to-orders-{unique}", f"to-{unique}-dead-letter"
    svc = ServiceProcess(TARGET, tmp_path, "0", service_env(kafka_bootstrap, unique)).start()
    services.append(svc)
    svc.endpoint()  # it has made its topics and started
    p = _produce(kafka_bootstrap, source, _inputs())

    def letters() -> list[Record]:
        return read_topic(kafka_bootstrap, dead_topic)

    wait_until(lambda: len(letters()) >= 3, 120, "three dead letters", svc.log_text)
    by_origin = {_origin(r): r for r in letters()}
    assert sorted(by_origin) == [f"{source}[{p}]@1", f"{source}[{p}]@2", f"{source}[{p}]@3"]

    undecodable = by_origin[f"{source}[{p}]@1"]
    assert _through(undecodable) == f"{source}[{p}]@1"
    assert (undecodable.key, undecodable.value) == (b"k", b"not json")
    assert undecodable.headers["fw.value.encoding"] == b"original"
    assert undecodable.headers["fw.step"] == b"orders"

    checked = by_origin[f"{source}[{p}]@2"]
    assert _through(checked).startswith(f"to-{unique}-by-user-repartition[")
    assert _carried_origin(kafka_bootstrap, checked) == f"{source}[{p}]@2"
    assert (checked.key, json.loads(checked.value or b"")) == (b'"bob"', {"user": "bob", "amount": -1})
    assert checked.headers["fw.value.encoding"] == b"json"
    assert checked.headers["fw.error.message"].decode() == (
        f"{source}[{p}]@2 (through {_through(checked)}) in step 'check': ValueError: negative amount -1 {CHECK_FIX}")

    banded = by_origin[f"{source}[{p}]@3"]
    assert _through(banded).startswith(f"to-{unique}-by-band-repartition[")
    assert _carried_origin(kafka_bootstrap, banded) == f"{source}[{p}]@3"
    assert (banded.key, json.loads(banded.value or b"")) == (b'"medium"', {"user": "cyd", "amount": 13})
    assert banded.headers["fw.error.message"].decode() == (
        f"{source}[{p}]@3 (through {_through(banded)}) in step 'band': ValueError: unlucky amount 13 {CHECK_FIX}")
    assert svc.alive

    # fw topics tail: one readable row per dead letter, the same with --service or without
    # (an original value that does not decode with its source topic's serdes is shown raw).
    env = {"FW_BOOTSTRAP_SERVERS": kafka_bootstrap, "FW_TEST_SUFFIX": unique}
    for extra in (["--service", TARGET], []):
        result = CliRunner().invoke(cli, ["topics", "tail", dead_topic, "--from", "earliest", *extra], env=env)
        assert result.exit_code == 0, result.output
        rows = {line.split("  ")[3].split(" ")[0]: line for line in result.output.splitlines()}
        assert rows[f"{source}[{p}]@2"] == (
            f"[{checked.partition}]@{checked.offset}  2026-09-21T14:13:20.002+00:00  \"bob\"  "
            f"{source}[{p}]@2 (through {_through(checked)}) in step 'check': ValueError: negative amount -1  "
            'value: {"user":"bob","amount":-1}')
        assert rows[f"{source}[{p}]@3"] == (
            f"[{banded.partition}]@{banded.offset}  2026-09-21T14:13:20.003+00:00  \"medium\"  "
            f"{source}[{p}]@3 (through {_through(banded)}) in step 'band': ValueError: unlucky amount 13  "
            'value: {"user":"cyd","amount":13}')
        line = rows[f"{source}[{p}]@1"]
        assert line.startswith(f"[{undecodable.partition}]@{undecodable.offset}  2026-09-21T14:13:20.001+00:00  k  "
                               f"{source}[{p}]@1 in step 'orders': cannot decode the record: ")
        assert line.endswith("  value: not json") and "Fix:" not in line
    plain_rows = sorted(result.output.splitlines())

    # -f prints the same rows, then follows (Ctrl-C ends it quietly).
    follow = subprocess.Popen([sys.executable, "-m", "framework.cli", "topics", "tail", dead_topic, "--from",
                               "earliest", "-f"], env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert follow.stdout is not None
    followed = [follow.stdout.readline().rstrip("\n") for _ in plain_rows]
    follow.send_signal(signal.SIGINT)
    assert follow.wait(30) == 0 and follow.stderr is not None and follow.stderr.read() == ""
    assert sorted(followed) == plain_rows

    # Tables end their lines without padding.
    listed = CliRunner().invoke(cli, ["topics", "list"], env=env)
    assert listed.exit_code == 0 and dead_topic in listed.output
    assert [line for line in listed.output.splitlines() if line != line.rstrip()] == []
    assert svc.stop() == 0


def test_on_error_fail_names_the_input_record_and_the_step(kafka_bootstrap: str, unique: str,
                                                           tmp_path: Path) -> None:
    source = f"to-orders-{unique}"
    env = {**service_env(kafka_bootstrap, unique), "FW_PROCESSING__ON_ERROR": "fail"}
    svc = ServiceProcess(TARGET, tmp_path, "0", env).start()
    svc.endpoint()
    inputs = _inputs()
    p = _produce(kafka_bootstrap, source, [inputs[0], inputs[2]])
    code = svc.wait_exit(120)
    assert code != 0
    [repartitioned] = [r for r in read_topic(kafka_bootstrap, f"to-{unique}-by-user-repartition")
                       if r.headers.get("fw.origin") == f"{source}[{p}]@1".encode()]
    through = f"to-{unique}-by-user-repartition[{repartitioned.partition}]@{repartitioned.offset}"
    last = svc.log_text().rstrip().splitlines()[-1]
    assert last == (f"error: {source}[{p}]@1 (through {through}) in step 'check': ValueError: negative amount -1 "
                    f"{CHECK_FIX}; or to go on past this one record, stop the service and run fw group skip {TARGET} "
                    f"{source}:{p}:1")
    assert read_topic(kafka_bootstrap, f"to-{unique}-dead-letter") == []
