"""``fw status``: members found from their client ids, their /status documents joined to the
broker's view of the group, the table, the member lines and the JSON, without a network
(the group description and the /status answers are given)."""

from __future__ import annotations

import importlib
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any, Self

import pytest
from click.testing import CliRunner
from rich.console import Console

from framework.cli import cli
from framework.errors import EnvironmentProblem
from framework.kafka.inspect import GroupInfo, Member
from framework.ops import status as S
from framework.ops.groups import GroupView, PartitionLag

# the module, not the command framework.cli exports under the same name
C = importlib.import_module("framework.cli.status")
SERVICE = "even-odd"
SOURCE, REPARTITION = "numbers", "even-odd-parity-repartition"
WATERMARK_MS = 1763899990000


def _view(members: list[Member], committed: Mapping[tuple[str, int], int | None] | None = None,
          state: str = "Stable") -> GroupView:
    owner = {tp: m.client_id for m in members for tp in m.assignment}
    committed = committed if committed is not None else {(t, p): 10 for t in (REPARTITION, SOURCE) for p in (0, 1)}
    rows = [PartitionLag(t, p, committed.get((t, p)), 0, 12, owner.get((t, p)))
            for t in (REPARTITION, SOURCE) for p in (0, 1)]
    return GroupView(GroupInfo(SERVICE, state, members), rows)


def _members() -> list[Member]:
    return [Member(f"{SERVICE}-0@:41234", "/127.0.0.1", "m-a", [(REPARTITION, 0), (SOURCE, 0)]),
            Member(f"{SERVICE}-1@:41235", "/127.0.0.1", "m-b", [(REPARTITION, 1), (SOURCE, 1)])]


def _document(instance: str, partition: int, *, restoring: bool = False) -> dict[str, Any]:
    """A member's /status as docs/observability.md gives it."""
    restore = {"restored": 1200, "remaining": 3400, "rate": 850.0, "eta_s": 4.0} if restoring else None
    return {"service": SERVICE, "generated_at": 1763900000.123, "members": [{
        "instance": instance, "pid": 4242, "endpoint": "http://10.0.0.5:41234", "started_at": 1763899000.0,
        "state": "restoring" if restoring else "running", "healthy": True, "ready": not restoring,
        "records_processed": 120000, "process_rate": 5400.25, "lag": 3,
        "partitions": [{"partition": partition, "state": "restoring" if restoring else "running", "lag": 3,
                        "watermark_ms": None if restoring else WATERMARK_MS,
                        "watermark_delay_s": None if restoring else 10.1, "restore": restore}],
        "inputs": [{"topic": SOURCE, "partition": partition, "position": 9, "end": 12, "lag": 3}],
        "watermarks": [], "checkpoint": {"completed": 120, "failed": 0, "last_duration_s": 0.012, "age_s": 0.4,
                                         "interval_s": 1.0},
        "restore": {"restored": 0, "remaining": 0, "rate": 0.0, "eta_s": None, "stores": []},
        "stores": [], "counters": {}}]}


def _fetch(answers: Mapping[str, Any]) -> S.Fetch:
    """A fetch answering from ``answers`` (endpoint -> document, or an exception to raise)."""
    def fetch(endpoint: str, timeout_s: float) -> Mapping[str, Any]:
        assert timeout_s == S.DEFAULT_TIMEOUT_S
        answer = answers[endpoint]
        if isinstance(answer, BaseException):
            raise answer
        return dict(answer)
    return fetch


def _text(renderable: Any) -> str:
    console = Console(record=True, width=220, highlight=False)
    console.print(renderable)
    return console.export_text()


# -- client ids ----------------------------------------------------------------------------

@pytest.mark.parametrize(("client_id", "host", "instance", "endpoint"), [
    ("even-odd-0@:9400", "/127.0.0.1", "0", "http://127.0.0.1:9400"),  # every interface: the broker's view
    ("even-odd-a1b2c3d4@10.0.0.7:41234", "/10.0.0.5", "a1b2c3d4", "http://10.0.0.7:41234"),  # advertised host
    ("even-odd-3@:9400", "/0:0:0:0:0:0:0:1", "3", "http://[0:0:0:0:0:0:0:1]:9400"),  # IPv6 from the broker
    ("even-odd-3@[::1]:9400", "/127.0.0.1", "3", "http://[::1]:9400"),
    ("other-2@host.example:80", "/10.0.0.5", "2", "http://host.example:80"),  # another group's naming
    ("rdkafka", "/127.0.0.1", "rdkafka", None),  # advertises nothing
    ("even-odd-0@nohost", "/127.0.0.1", "even-odd-0", None),  # no port
])
def test_a_member_advertises_its_instance_and_endpoint_in_its_client_id(client_id: str, host: str, instance: str,
                                                                         endpoint: str | None) -> None:
    assert S.parse_client_id(client_id, SERVICE, host) == S.Advertised(instance, endpoint)


# -- members joined to their /status -------------------------------------------------------

def test_both_members_answer_rows_lines_and_json() -> None:
    answers = {"http://127.0.0.1:41234": _document("0", 0),
               "http://127.0.0.1:41235": _document("1", 1, restoring=True)}
    st = S.collect(SERVICE, _view(_members()), _fetch(answers))

    assert [(m.instance, m.endpoint, m.error) for m in st.members] == [
        ("0", "http://127.0.0.1:41234", None), ("1", "http://127.0.0.1:41235", None)]
    document = json.loads(json.dumps(st.as_dict()))  # JSON as it is printed
    assert document["service"] == SERVICE
    first = document["members"][0]
    assert first["client_id"] == f"{SERVICE}-0@:41234" and first["host"] == "127.0.0.1"
    assert first["partitions"] == [{"topic": REPARTITION, "partition": 0}, {"topic": SOURCE, "partition": 0}]
    assert first["status"] == _document("0", 0)["members"][0] and first["error"] is None
    assert document["lag"]["total"] == 4 * 2 and document["lag"]["state"] == "Stable"
    assert {(r["topic"], r["partition"], r["lag"], r["member"]) for r in document["lag"]["partitions"]} == {
        (t, p, 2, f"{SERVICE}-{p}@:{41234 + p}") for t in (REPARTITION, SOURCE) for p in (0, 1)}

    cells = C.table_cells(st)
    assert cells == [
        ["0", "http://127.0.0.1:41234", "0", "running", "3", "2025-11-23T12:13:10.000+00:00", "10s", "0.4s", "-"],
        ["1", "http://127.0.0.1:41235", "1", "restoring", "3", "-", "-", "0.4s",
         "1,200 restored, 3,400 left, ETA 4.0s"]]
    assert C.member_texts(st) == [
        ("member 0 (http://127.0.0.1:41234): running, healthy, ready; pid 4242; 120,000 records processed, "
        "5,400.2 records/s; lag 3"),
        ("member 1 (http://127.0.0.1:41235): restoring, healthy, not ready; pid 4242; 120,000 records processed, "
        "5,400.2 records/s; lag 3")]
    text = _text(C.render(st))
    assert text.startswith(f"service {SERVICE}  group Stable  members 2  committed lag 8\n")
    for column in C.COLUMNS:
        assert column in text


def test_a_member_whose_endpoint_does_not_answer_keeps_the_brokers_view() -> None:
    members = [*_members(), Member("rdkafka", "/127.0.0.2", "m-c", [])]
    answers: dict[str, Any] = {"http://127.0.0.1:41234": _document("0", 0),
                               "http://127.0.0.1:41235": S.StatusUnavailable("connection refused")}
    st = S.collect(SERVICE, _view(members), _fetch(answers))
    silent = st.as_dict()["members"][1]
    assert silent["status"] is None and silent["error"] == "endpoint not answering: connection refused"
    assert silent["partitions"] == [{"topic": REPARTITION, "partition": 1}, {"topic": SOURCE, "partition": 1}]

    cells = C.table_cells(st)
    assert cells[1] == ["1", "http://127.0.0.1:41235", "1", "endpoint not answering", "4", "-", "-", "-", "-"]
    assert cells[2] == ["rdkafka", "-", "-", "no endpoint", "-", "-", "-", "-", "-"]  # no partitions: one row
    lines = C.member_texts(st)
    assert lines[1] == "member 1 (http://127.0.0.1:41235): endpoint not answering: connection refused"
    assert lines[2].startswith("member rdkafka: no endpoint in client.id 'rdkafka'")

    # a partition just assigned to an answering member, not yet in its status: the broker's lag
    grown = Member(members[0].client_id, members[0].host, members[0].member_id,
                   [(REPARTITION, 0), (SOURCE, 0), (SOURCE, 1)])
    st = S.collect(SERVICE, _view([grown]), _fetch(answers))
    assert C.table_cells(st) == [
        ["0", "http://127.0.0.1:41234", "0", "running", "3", "2025-11-23T12:13:10.000+00:00", "10s", "0.4s", "-"],
        ["", "", "1", "assigned", "2", "-", "-", "", "-"]]


def test_whatever_a_member_answers_is_never_a_traceback() -> None:
    answers: dict[str, Any] = {"http://127.0.0.1:41234": {"members": "not a list"},
                               "http://127.0.0.1:41235": KeyError("boom")}
    st = S.collect(SERVICE, _view(_members()), _fetch(answers))
    assert [m.error for m in st.members] == ["endpoint not answering: /status lists no member '0'",
                                             "endpoint not answering: KeyError: 'boom'"]
    # a lone entry answers for the member whatever its instance; a malformed one shows dashes
    odd = {"members": [{"instance": "7", "partitions": [{"partition": "x"}, {"partition": 0, "lag": "?"}],
                        "checkpoint": None}]}
    st = S.collect(SERVICE, _view(_members()[:1]), _fetch({"http://127.0.0.1:41234": odd}))
    # no lag of its own: the broker's, from the committed offsets
    assert C.table_cells(st) == [["0", "http://127.0.0.1:41234", "0", "-", "4", "-", "-", "-", "-"]]
    assert C.member_texts(st) == [("member 0 (http://127.0.0.1:41234): -; pid -; - records processed, - records/s; "
                                  "lag -")]


@pytest.mark.parametrize(("raised", "said"), [
    (urllib.error.URLError(ConnectionRefusedError(111, "Connection refused")), "Connection refused"),
    (urllib.error.URLError(TimeoutError("timed out")), "timed out"),
    (TimeoutError("timed out"), "timed out"),
    (ConnectionResetError(104, "Connection reset by peer"), "Connection reset by peer"),
])
def test_fetch_status_says_why_an_endpoint_does_not_answer(monkeypatch: pytest.MonkeyPatch, raised: Exception,
                                                           said: str) -> None:
    def urlopen(url: str, timeout: float) -> Any:
        assert url == "http://127.0.0.1:1/status" and timeout == 0.5
        raise raised

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    with pytest.raises(S.StatusUnavailable, match=said):
        S.fetch_status("http://127.0.0.1:1", 0.5)


def test_fetch_status_wants_a_json_object(monkeypatch: pytest.MonkeyPatch) -> None:
    class Response:
        def __init__(self, body: bytes) -> None:
            self.body = body

        def __enter__(self) -> Self:
            return self

        def __exit__(self, *_: object) -> None:
            return None

        def read(self) -> bytes:
            return self.body

    for body, said in [(b"<html>", "did not answer JSON"), (b"[1]", "not answer a JSON object")]:
        monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout, b=body: Response(b))
        with pytest.raises(S.StatusUnavailable, match=said):
            S.fetch_status("http://h:1", 1.0)
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: Response(b'{"members": []}'))
    assert S.fetch_status("http://h:1/", 1.0) == {"members": []}


# -- no members ----------------------------------------------------------------------------

def test_a_service_without_members_is_not_running_and_shows_committed_offsets() -> None:
    view = _view([], {(SOURCE, 0): 12, (SOURCE, 1): 7, (REPARTITION, 0): 12}, state="Empty")
    st = S.collect(SERVICE, view, _fetch({}))
    assert not st.running and st.as_dict()["members"] == []
    assert st.as_dict()["lag"]["total"] == 5 + 12
    assert C.offset_cells(st) == [[REPARTITION, "0", "12", "12", "0"], [REPARTITION, "1", "-", "12", "12"],
                                  [SOURCE, "0", "12", "12", "0"], [SOURCE, "1", "7", "12", "5"]]
    text = _text(C.render(st))
    assert text.startswith(f"service {SERVICE} is not running: group {SERVICE} (Empty) has no members; "
                           "committed lag 17; start one with `fw run MODULE:PIPELINE`, the pipeline named "
                           f"{SERVICE}\n")
    assert _text(C.render(st, target="svc.pipeline:pipeline")).startswith(
        f"service {SERVICE} is not running: group {SERVICE} (Empty) has no members; "
        "committed lag 17; start one with `fw run svc.pipeline:pipeline`\n")


# -- the command ---------------------------------------------------------------------------

@pytest.fixture
def described(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, object]]:
    """``fw status`` on a given group description and /status answers, no cluster."""
    asked: list[tuple[str, object]] = []

    def describe_group(settings: Mapping[str, Any], group: str, pipeline: object) -> GroupView:
        asked.append((group, pipeline))
        return _view(_members())

    answers: dict[str, Any] = {"http://127.0.0.1:41234": _document("0", 0),
                               "http://127.0.0.1:41235": S.StatusUnavailable("timed out")}
    monkeypatch.setattr(S, "describe_group", describe_group)
    monkeypatch.setattr(S, "fetch_status", _fetch(answers))
    return asked


def test_the_command_prints_the_table_or_json(described: list[tuple[str, object]]) -> None:
    runner = CliRunner()
    shown = runner.invoke(cli, ["status", SERVICE], env={"COLUMNS": "220"})
    assert shown.exit_code == 0, shown.output
    assert described == [(SERVICE, None)]
    assert "member 1 (http://127.0.0.1:41235): endpoint not answering: timed out" in shown.output
    assert "2025-11-23T12:13:10.000+00:00" in shown.output

    printed = runner.invoke(cli, ["status", SERVICE, "--json"])
    assert printed.exit_code == 0, printed.output
    document = json.loads(printed.output)
    assert [m["instance"] for m in document["members"]] == ["0", "1"]
    assert document["members"][1]["error"] == "endpoint not answering: timed out"


def _ctrl_c_on_third_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """``--watch``'s sleeps, recorded; the third is a Ctrl-C."""
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(C.time, "sleep", sleep)
    return sleeps


def test_watch_refreshes_until_ctrl_c_and_exits_0(described: list[tuple[str, object]],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps = _ctrl_c_on_third_sleep(monkeypatch)

    watched = CliRunner().invoke(cli, ["status", SERVICE, "--watch"], env={"COLUMNS": "220"})
    assert watched.exit_code == 0, watched.output
    assert sleeps == [2.0, 2.0, 2.0] and len(described) == 3
    sleeps.clear()
    lines = CliRunner().invoke(cli, ["status", SERVICE, "--json", "--watch", "0.5"])
    assert lines.exit_code == 0, lines.output
    assert sleeps == [0.5, 0.5, 0.5]
    assert [json.loads(line)["service"] for line in lines.output.splitlines()] == [SERVICE] * 3


def test_watch_shows_a_later_failure_and_tries_again(described: list[tuple[str, object]],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps = _ctrl_c_on_third_sleep(monkeypatch)

    failing = iter([False, True, False])  # the second view cannot reach the cluster
    real = S.describe_group

    def describe_group(settings: Mapping[str, Any], group: str, pipeline: Any) -> GroupView:
        if next(failing):
            raise EnvironmentProblem("cannot reach the Kafka cluster at 127.0.0.1:1")
        return real(settings, group, pipeline)

    monkeypatch.setattr(S, "describe_group", describe_group)
    lines = CliRunner().invoke(cli, ["status", SERVICE, "--json", "--watch"])
    assert lines.exit_code == 0, lines.output
    documents = [json.loads(line) for line in lines.output.splitlines()]
    assert [sorted(d) for d in documents] == [["lag", "members", "service"], ["error", "service"],
                                              ["lag", "members", "service"]]
    assert documents[1]["error"] == "cannot reach the Kafka cluster at 127.0.0.1:1"

    failing = iter([False, True, False])
    sleeps.clear()
    shown = CliRunner().invoke(cli, ["status", SERVICE, "--watch", "1"], env={"COLUMNS": "220"})
    assert shown.exit_code == 0, shown.output
    assert sleeps == [1.0, 1.0, 1.0]
