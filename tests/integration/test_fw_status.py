"""``fw status`` against a real two-process service on the real broker.

``fw run --processes 2`` runs two members of the even/odd service (a source of four
partitions, a repartition topic); each serves its status endpoint on a free port and
advertises it in its client.id. Once every record is processed, ``fw status --json`` shows
both members answering, their assignments together covering every input partition once,
and no lag; the table shows both instances and every partition, and a member stopped with
SIGSTOP is listed as not answering, without a traceback. Once the service stops, ``fw status``
still prints the committed offsets, says in its first line how to start a member, and exits 1.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from framework.cli import cli
from framework.runtime.processes import child_ids
from tests.integration.harness import ROOT, ServiceProcess, produce, service_env, wait_until

pytestmark = pytest.mark.integration

TARGET = "tests.integration.pipelines:even_odd"  # numbers-<suffix> (4 partitions) -> parity sums, counts
RECORDS = 400


def _fw(env: dict[str, str], *args: str) -> tuple[int, str]:
    """The command's exit status and output; a command that raised (a one-line error is an
    exception here, not output) has its error after the output, so a failure says why."""
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=True)
    raised = result.exception if not isinstance(result.exception, SystemExit) else None
    return result.exit_code, result.output + ("" if raised is None else f"\n{type(raised).__name__}: {raised}")


def _fw_process(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The installed entry point (one-line errors, exit status), in a process of its own."""
    return subprocess.run([sys.executable, "-c", "from framework.cli import main; main()", *args],
                          env={**os.environ, **env, "COLUMNS": "250", "PYTHONPATH": str(ROOT)}, cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


def _status(env: dict[str, str], service: str) -> dict[str, Any]:
    code, output = _fw(env, "status", service, "--json")
    document: dict[str, Any] = json.loads(output)
    assert code == (0 if document["members"] else 1), output  # 1: no member runs (yet)
    return document


def _covered(document: dict[str, Any], source: str) -> bool:
    """Two members, both answering, whose assignments split every input partition between
    them, and nothing left to process: no lag by the members' own positions, none by the
    committed offsets of the source. A repartition partition may keep a committed lag of 1:
    the service writes it in transactions, and the commit marker after its last record takes
    an offset that only the next checkpoint's offsets pass (docs/operations.md)."""
    members = document["members"]
    if len(members) != 2 or any(m["error"] is not None or m["status"] is None for m in members):
        return False
    inputs = {(r["topic"], r["partition"]) for r in document["lag"]["partitions"]}
    assigned = [(p["topic"], p["partition"]) for m in members for p in m["partitions"]]
    if sorted(assigned) != sorted(inputs) or not all(m["partitions"] for m in members):
        return False
    own = [m["status"] for m in members]
    if any("records_processed" not in s for s in own):  # a member that joined late: its first observation is to come
        return False
    committed = all(r["lag"] <= (0 if r["topic"] == source else 1) for r in document["lag"]["partitions"])
    return (committed and sum(s["records_processed"] for s in own) >= RECORDS
            and all(s["lag"] == 0 and s["state"] == "running" and all(p["lag"] == 0 for p in s["partitions"])
                    for s in own))


def _table_rows(output: str) -> dict[str, dict[int, tuple[str, str]]]:
    """Instance -> task partition -> (state, lag) as the printed table shows them (the
    member and endpoint cells are on a member's first row only)."""
    lines = output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == ["member", "endpoint", "partition"])
    shown: dict[str, dict[int, tuple[str, str]]] = {}
    instance = None
    for line in lines[header + 1:]:
        cells = line.split()
        if not cells or cells[0] == "member":  # the member lines under the table
            break
        if len(cells) > 2 and cells[1].startswith("http://"):
            instance, cells = cells[0], cells[2:]
        assert instance is not None, output
        shown.setdefault(instance, {})[int(cells[0])] = (cells[1], cells[2])
    return shown


def test_fw_status_of_a_two_process_service(kafka_bootstrap: str, unique: str, tmp_path: Path,
                                            services: list[ServiceProcess]) -> None:
    # a session timeout well above the moment one member is stopped (SIGSTOP) below
    env = {**service_env(kafka_bootstrap, unique), "FW_OBSERVE__PORT": "0",
           "FW_KAFKA_CONSUMER__SESSION_TIMEOUT_MS": "30000"}
    group, source = f"eo-{unique}", f"numbers-{unique}"
    code, output = _fw(env, "topics", "create", source, "--partitions", "4")
    assert code == 0, output

    unknown = _fw_process(env, "status", group)  # a bare group id the broker does not know
    assert unknown.returncode == 1 and unknown.stderr.count("\n") == 1, unknown.stderr
    assert unknown.stderr.startswith(f"error: consumer group {group!r} is unknown"), unknown.stderr
    code, output = _fw(env, "status", TARGET)
    assert code == 1 and output.startswith(f"service {group} is not running"), output

    svc = ServiceProcess(TARGET, tmp_path, "pair", env, args=["--processes", "2"]).start()
    services.append(svc)
    children: set[int] = set()
    try:
        produce(kafka_bootstrap, source, ((f"k{n % 7}".encode(), str(n).encode()) for n in range(RECORDS)))
        seen: list[dict[str, Any]] = []

        def covered() -> bool:
            seen.append(_status(env, TARGET))
            children.update(m["status"]["pid"] for m in seen[-1]["members"] if m["status"])
            return _covered(seen[-1], source)

        wait_until(covered, 180, "fw status to show two answering members covering every input partition, "
                   "lag 0", lambda: json.dumps(seen[-1:], indent=1) + "\n" + svc.log_text()[-4000:])
        document = seen[-1]
        assert document["service"] == group
        members = document["members"]
        first, second = child_ids(2, None)  # <host>-0 and <host>-1
        assert sorted(m["instance"] for m in members) == [first, second]
        for m in members:
            # bound to every interface: no host in the client.id, the broker's view of the member's
            port = m["endpoint"].rpartition(":")[2]
            assert m["client_id"] == f"{group}-{m['instance']}@:{port}" and port.isdigit()
            assert m["endpoint"] == f"http://{m['host']}:{port}" and not m["host"].startswith("/")
            assert m["status"]["instance"] == m["instance"] and m["status"]["healthy"] is True
            assert {p["partition"] for p in m["status"]["partitions"]} == {p["partition"] for p in m["partitions"]}
        assert {r["topic"] for r in document["lag"]["partitions"]} == {source, f"{group}-parity-repartition"}
        tasks = {r["partition"] for r in document["lag"]["partitions"]}

        code, table = _fw({**env, "COLUMNS": "250"}, "status", group)  # the bare group id, as a table
        assert code == 0, table
        assert table.startswith(f"service {group}  group Stable  members 2  committed lag "), table
        shown = _table_rows(table)
        assert sorted(shown) == [first, second], table
        assert set(shown[first]) | set(shown[second]) == tasks and not set(shown[first]) & set(shown[second]), table
        assert {cells for rows in shown.values() for cells in rows.values()} == {("running", "0")}, table
        for m in members:
            assert f"member {m['instance']} ({m['endpoint']}): running, healthy, ready; pid " in table
        assert "records processed" in table and "endpoint not answering" not in table

        # the installed entry point, in its own process: a member's endpoint gone quiet (its
        # process stopped) is listed with the broker's view, never a traceback
        quiet = members[1]["status"]["pid"]
        os.kill(quiet, signal.SIGSTOP)
        try:
            run = _fw_process(env, "status", group, "--timeout", "1")
        finally:
            os.kill(quiet, signal.SIGCONT)
        assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
        assert f"member {members[1]['instance']} ({members[1]['endpoint']}): endpoint not answering" in run.stdout
        assert f"member {members[0]['instance']} ({members[0]['endpoint']}): running" in run.stdout

        assert svc.stop() == 0, svc.log_text()[-4000:]
    finally:
        if svc.alive:
            svc.kill()
        for pid in children:  # a killed supervisor leaves its children
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_fw_status_of_a_stopped_service_exits_1_and_says_how_to_start_it(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    env = {**service_env(kafka_bootstrap, unique), "FW_OBSERVE__PORT": "0"}
    group, source = f"eo-{unique}", f"numbers-{unique}"
    code, output = _fw(env, "topics", "create", source, "--partitions", "4")
    assert code == 0, output
    svc = ServiceProcess(TARGET, tmp_path, "one", env).start()
    services.append(svc)
    produce(kafka_bootstrap, source, ((f"k{n % 7}".encode(), str(n).encode()) for n in range(RECORDS)))
    seen: list[dict[str, Any]] = []

    def processed() -> bool:  # every input record's offset committed by the running member
        seen.append(_status(env, TARGET))
        return bool(seen[-1]["members"]) and all(
            r["lag"] == 0 for r in seen[-1]["lag"]["partitions"] if r["topic"] == source)

    wait_until(processed, 180, "the service to commit every input record",
               lambda: json.dumps(seen[-1:], indent=1) + "\n" + svc.log_text()[-4000:])
    assert svc.stop() == 0, svc.log_text()[-4000:]  # its member leaves the group as it closes

    for service, start in ((TARGET, f"`fw run {TARGET}`"),
                           (group, f"`fw run MODULE:PIPELINE`, the pipeline named {group}")):
        run = _fw_process(env, "status", service)
        assert run.returncode == 1 and run.stderr == "", run.stderr
        head, *rest = run.stdout.splitlines()
        assert head.startswith(f"service {group} is not running: group {group} (Empty) has no members; "
                               f"committed lag "), run.stdout
        assert head.endswith(f"; start one with {start}"), run.stdout
        assert rest[0].split() == ["topic", "partition", "committed", "end", "lag"], run.stdout
        assert {line.split()[0] for line in rest[1:]} >= {source}, run.stdout
    as_json = _fw_process(env, "status", TARGET, "--json")
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["members"] == [], as_json.stdout
