"""A pipeline's topology as data (``Pipeline.describe()``), as text and Mermaid, through
``fw describe``, and on the member's status page and ``/topology``."""

from __future__ import annotations

import html
import inspect
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from framework import (
    CountTrigger,
    GlobalWindows,
    Pipeline,
    ProcessFunction,
    SessionWindows,
    SlidingWindows,
    StringSerde,
    Topic,
    TumblingWindows,
    WatermarkStrategy,
)
from framework.cli import cli
from framework.config import Config, ObserveConfig
from framework.observe.server import StatusServer
from framework.pipeline import CoProcessFunction, Retry
from framework.pipeline import topology as T
from framework.runtime.parts import serve_endpoint
from tests.integration import pipelines as P

REPO = Path(__file__).resolve().parents[2]


def _builders() -> dict[str, Callable[[], Pipeline]]:
    """Every pipeline tests/integration/pipelines.py builds without arguments (the services'
    own among them, ``svc_*``)."""
    found: dict[str, Callable[[], Pipeline]] = {}
    for name, fn in vars(P).items():
        if name.startswith("_") or not inspect.isfunction(fn) or fn.__module__ != P.__name__:
            continue
        sig = inspect.signature(fn)
        if not sig.parameters and sig.return_annotation in ("Pipeline", Pipeline):
            found[name] = fn
    return found


BUILDERS = _builders()


@pytest.fixture
def test_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FW_TEST_SUFFIX", "d")
    monkeypatch.setenv("FW_TEST_PARTITIONS", "2")
    monkeypatch.setenv("PRICE_URL", "http://127.0.0.1:1/price")


def test_the_builders_cover_the_services() -> None:
    services = {p.parent.name for p in (REPO / "services").glob("*/pipeline.py")}
    assert {f"svc_{s}" for s in services} <= set(BUILDERS)
    assert len(BUILDERS) > len(services)


@pytest.mark.parametrize("builder", sorted(BUILDERS))
def test_describe_is_json_and_names_every_topic_of_the_pipeline(test_env: None, builder: str) -> None:
    p = BUILDERS[builder]()
    topology = p.describe()
    assert json.loads(json.dumps(topology)) == topology
    named = set(T.topic_names(topology))
    expected = {*p.input_topics(), *(t.name for t in p.sink_topics()), *p.repartition_topics(),
                *(p.changelog_topic(s) for s in p.changelogged_stores()), *(g.topic.name for g in p.global_tables()),
                p.dead_letter.name}
    assert named == expected
    assert [s["name"] for s in topology["steps"]] == list(p.steps)
    assert {s["name"] for s in topology["stores"]} == set(p.store_names())
    assert topology["edges"] == [[a, b] for a in p.steps for b in p.children[a]]
    for render in (T.text, T.mermaid):
        drawn = render(topology)
        assert all(name in drawn for name in named)
        assert all(step in drawn for step in p.steps)


class Alarm(ProcessFunction):
    def process(self, key: Any, value: Any, ctx: Any) -> None:
        ctx.register_event_timer(ctx.timestamp + 10)

    def on_timer(self, timestamp: int, key: Any, ctx: Any) -> None:
        ctx.emit(key)


class Pair(CoProcessFunction):
    def process1(self, key: Any, value: Any, ctx: Any) -> None:
        ctx.emit(value)

    def process2(self, key: Any, value: Any, ctx: Any) -> None:
        ctx.emit(value)


async def lookup(value: Any) -> Any:
    return value


def every_kind() -> Pipeline:
    """One step of each kind, with the parameters describe() must show."""
    p = Pipeline("kinds", partitions=3)
    wm = WatermarkStrategy.bounded_out_of_orderness(500, timestamp="ts", idle_timeout_ms=30_000)
    a = p.source(Topic("a", partitions=6), watermarks=wm, name="a")
    b = p.source("b", watermarks=WatermarkStrategy.from_upstream(), name="b")
    rates = p.global_table("rates", watermarks=wm, history_ms=1_000, name="rates")
    table = p.table("customers", watermarks=wm, name="customers")
    keyed = a.key_by(lambda v: v["k"], name="by-k", key_serde=StringSerde())
    keyed.window(SessionWindows(gap_ms=3_000), allowed_lateness_ms=700, late="a-late") \
        .aggregate(int, lambda acc, v: acc + 1, merge=lambda x, y: x + y, name="sessions")
    keyed.window(SlidingWindows(10_000, 2_000)).apply(lambda k, w, vs: len(vs), name="slides")
    keyed.window(GlobalWindows(CountTrigger(5))).count(name="fives")
    keyed.interval_join(b, -100, 200, lambda x, y: [x, y], name="near")
    keyed.window_join(b, TumblingWindows(1_000), lambda x, y: [x, y], name="same-second")
    keyed.join(table, lambda v, row: [v, row], how="left", grace_ms=250, name="with-customer")
    keyed.join(rates, lambda v, row: [v, row], key=lambda v: v["cur"], name="with-rate")
    keyed.connect(b).process(Pair(), name="pair")
    keyed.union(b, name="both").process(Alarm(), name="alarm").to("alarms")
    keyed.map_async(lookup, capacity=7, timeout_ms=900, retry=Retry.fixed(3, 50), ordered=False, name="call") \
        .to(Topic("called", partitions=2), name="to-called")
    return p


def _steps() -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in every_kind().describe()["steps"]}


def test_each_kind_of_step_shows_its_parameters() -> None:
    steps = _steps()
    assert steps["sessions"]["params"]["windows"] == {"type": "SessionWindows", "gap_ms": 3_000, "clock": "event"}
    assert steps["sessions"]["params"]["allowed_lateness_ms"] == 700
    assert steps["sessions"]["params"]["late"] == "a-late"
    assert steps["slides"]["params"]["windows"] == {"type": "SlidingWindows", "size_ms": 10_000, "slide_ms": 2_000,
                                                    "offset_ms": 0, "clock": "event"}
    assert steps["slides"]["params"]["function"] == "full"
    assert steps["sessions"]["params"]["function"] == "incremental"
    assert steps["fives"]["params"]["windows"] == {"type": "GlobalWindows", "trigger": {"count": 5}}
    assert (steps["near"]["params"]["lower_ms"], steps["near"]["params"]["upper_ms"]) == (-100, 200)
    assert steps["same-second"]["params"]["windows"]["size_ms"] == 1_000
    assert steps["with-customer"]["params"] | {"fn": None} == {
        "table": "customers", "fn": None, "how": "left", "grace_ms": 250, "by_event_time": True}
    assert steps["with-rate"]["kind"] == "global_join" and steps["with-rate"]["params"]["table"] == "rates"
    assert steps["alarm"]["params"] == {"function": "Alarm", "on_timer": True}
    assert steps["pair"]["params"] == {"function": "Pair", "on_timer": False}
    assert steps["both"]["parents"] == ["by-k", "b"]
    call = steps["call"]["params"]
    assert (call["capacity"], call["timeout_ms"], call["ordered"], call["fn"]) == (7, 900, False, "lookup")
    assert call["retry"] == {"attempts": 3, "delay_ms": 50, "multiplier": 1.0, "max_delay_ms": 50}
    assert steps["by-k"]["params"]["repartition_topic"] == "kinds-by-k-repartition"
    assert {name for name, s in steps.items() if s["store"]} == {
        "sessions", "slides", "fives", "near", "same-second", "with-customer", "with-rate", "pair", "alarm",
        "call", "customers"}


def test_sources_stores_and_outputs() -> None:
    topology = every_kind().describe()
    a, b = topology["sources"][:2]
    assert a == {"step": "a", "topic": "a", "key_serde": "StringSerde(encoding='utf-8')",
                 "value_serde": "JsonSerde()", "partitions": 6, "watermarks_in_band": False,
                 "watermarks": {"strategy": "bounded_out_of_orderness", "timestamp": "field ts",
                                "idle_timeout_ms": 30_000, "bound_ms": 500}}
    assert b["watermarks"] == {"strategy": "from_upstream", "timestamp": "kafka", "idle_timeout_ms": None}
    assert [g["topic"] for g in topology["global_tables"]] == ["rates"]
    stores = {s["name"]: s for s in topology["stores"]}
    assert stores["customers"] == {"name": "customers", "step": "customers", "changelogged": False,
                                   "changelog": None, "restored_from": "customers"}
    assert stores["_time"]["step"] is None and stores["_time"]["changelog"] == "kinds-_time-changelog"
    assert stores["alarm"]["changelog"] == "kinds-alarm-changelog"
    assert [t["topic"] for t in topology["sinks"]] == ["alarms", "called"]
    assert topology["late_outputs"] == [{"step": "sessions", "topic": "a-late", "key_serde": "StringSerde(encoding='utf-8')",
                                         "value_serde": "JsonSerde()", "partitions": None,
                                         "watermarks_in_band": False}]
    assert topology["dead_letter"]["topic"] == "kinds-dead-letter"
    kinds = {t["topic"]: t["kind"] for t in topology["internal_topics"]}
    assert kinds["kinds-by-k-repartition"] == "repartition" and "kinds-customers-changelog" not in kinds


def small() -> Pipeline:
    p = Pipeline("small", partitions=2)
    p.source(Topic("in"), name="in").key_by(lambda v: v, name="by-value").count(name="counts") \
        .to(Topic("out"), name="to-out")
    return p


SMALL_TEXT = """\
service small (2 partitions)
sources
  in -> in (key StringSerde(encoding='utf-8'), value JsonSerde(); no watermarks)
steps
  source in: topic=in
    key_by by-value: fn=small.<locals>.<lambda>, key_serde=KeySerde(), repartition_topic=small-by-value-repartition
      aggregate counts: init=int, add=Stream.count.<locals>.<lambda> [store counts]
        to to-out: topic=out
stores
  counts (of step counts): changelog small-counts-changelog
internal topics
  small-by-value-repartition (repartition of by-value)
  small-counts-changelog (changelog of counts)
outputs
  out (from to-out, key StringSerde(encoding='utf-8'), value JsonSerde())
  small-dead-letter (dead letters)"""

SMALL_MERMAID = """\
flowchart LR
  s0["in<br/>source"]
  s1["by-value<br/>key_by"]
  s2["counts<br/>aggregate"]
  s3["to-out<br/>to"]
  t0(["in"])
  t0 --> s0
  s0 --> s1
  t1(["small-by-value-repartition<br/>repartition"])
  s1 --> t1
  t1 --> s2
  s2 --> s3
  t2(["out"])
  s3 --> t2
  d0[("counts<br/>store")]
  s2 -.- d0
  t3(["small-counts-changelog<br/>changelog"])
  d0 -.-> t3
  t4(["small-dead-letter<br/>dead letters"])"""


def test_text_of_a_small_pipeline() -> None:
    assert T.text(small().describe()) == SMALL_TEXT


def test_mermaid_of_a_small_pipeline() -> None:
    assert T.mermaid(small().describe()) == SMALL_MERMAID


_NODE = re.compile(r'^  ([a-z]\d+)(\["[^"\n]*"\]|\(\["[^"\n]*"\]\)|\[\("[^"\n]*"\)\])$')
_EDGE = re.compile(r"^  ([a-z]\d+) (-->|-\.-|-\.->|-- late -->) ([a-z]\d+)$")


def test_mermaid_ids_are_safe_and_labels_escaped() -> None:
    """Every line is a node with a safe id and a quoted label, or an edge between declared ids;
    what would end a label comes as an entity code."""
    p = Pipeline("odd")
    p.source(Topic("in", value_serde=_QuotedSerde()), name="in").map(str, name="x").to("out")
    for drawn in (T.mermaid(p.describe()), T.mermaid(every_kind().describe())):
        lines = drawn.splitlines()
        assert lines[0] == "flowchart LR"
        declared: set[str] = set()
        for line in lines[1:]:
            node, edge = _NODE.match(line), _EDGE.match(line)
            assert node or edge, line
            if node:
                declared.add(node.group(1))
            else:
                assert {edge.group(1), edge.group(3)} <= declared, line  # type: ignore[union-attr]
    assert T._label('say "<hi>" #1') == "say #quot;#lt;hi#gt;#quot; #35;1"


class _QuotedSerde(StringSerde):
    def __repr__(self) -> str:
        return 'Quoted("<x>")'


# -- fw describe -----------------------------------------------------------------------------


def test_fw_describe_prints_each_format(test_env: None) -> None:
    runner = CliRunner()
    target = "tests.integration.pipelines:fast_and_slow"
    text = runner.invoke(cli, ["describe", target])
    assert text.exit_code == 0, text.output
    assert text.output.startswith("service fs-d (2 partitions, event time)\n")
    assert "fs-d-by-group-repartition" in text.output
    as_json = runner.invoke(cli, ["describe", target, "--format", "json"])
    assert as_json.exit_code == 0
    assert json.loads(as_json.output) == P.fast_and_slow().describe()
    drawn = runner.invoke(cli, ["describe", target, "--format", "mermaid"])
    assert drawn.exit_code == 0 and drawn.output.startswith("flowchart LR\n")


def test_fw_describe_takes_a_service_name_in_the_project_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    shown = CliRunner().invoke(cli, ["describe", "even-odd"])
    assert shown.exit_code == 0, shown.output
    assert "even-odd-parity-repartition (repartition of parity)" in shown.output


@pytest.mark.parametrize("target", ["no_such_module:pipeline", "no-such-service"])
def test_fw_describe_of_a_bad_target_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 target: str) -> None:
    monkeypatch.chdir(tmp_path)
    done = subprocess.run([sys.executable, "-m", "framework.cli", "describe", target], capture_output=True,
                          text=True, timeout=60, check=False, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("error: "), done.stderr


def test_fw_describe_refuses_an_unknown_format(test_env: None) -> None:
    refused = CliRunner().invoke(cli, ["describe", "tests.integration.pipelines:fast_and_slow", "--format", "dot"])
    assert refused.exit_code != 0


# -- the status page and /topology -------------------------------------------------------------


class _Member:
    def metrics_text(self) -> bytes:
        return b""

    def health(self) -> tuple[bool, dict[str, Any]]:
        return True, {"status": "ok"}

    def ready(self) -> tuple[bool, dict[str, Any]]:
        return True, {"ready": True}

    def snapshot(self) -> dict[str, Any]:
        return {"members": []}

    def history_doc(self) -> dict[str, Any] | None:
        return None


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_status_page_shows_the_topology_and_serves_it() -> None:
    topology = small().describe()
    server = StatusServer(_Member(), "127.0.0.1", 0, topology=topology).start()
    try:
        code, page = _get(f"{server.url}/")
        assert code == 200
        text = re.search(r'<pre id="topology-text">(.*?)</pre>', page, re.DOTALL)
        assert text is not None and html.unescape(text.group(1)) == SMALL_TEXT
        source = re.search(r'<details>.*<pre class="mermaid" id="topology-mermaid">(.*?)</pre>\s*</details>',
                           page, re.DOTALL)
        assert source is not None and html.unescape(source.group(1)) == SMALL_MERMAID
        assert not re.search(r"<script[^>]+src=|https?://(?!www\.w3\.org/2000/svg)", page), "a remote resource"
        assert _get(f"{server.url}/topology") == (200, json.dumps(topology))
        code, body = _get(f"{server.url}/nothing")
        assert code == 404 and "/topology" in json.loads(body)["error"]
    finally:
        server.close()


def test_a_page_without_a_topology_has_no_section() -> None:
    server = StatusServer(_Member(), "127.0.0.1", 0).start()
    try:
        code, page = _get(f"{server.url}/")
        assert code == 200 and 'id="topology"' not in page and "<!-- topology -->" not in page
        assert _get(f"{server.url}/topology")[0] == 404
    finally:
        server.close()


def test_a_member_serves_its_own_pipeline_s_topology() -> None:
    """What a running member's endpoint is built with (``serve_endpoint``): its pipeline's topology."""
    pipeline = small()
    config = Config(observe=ObserveConfig(host="127.0.0.1", port=0))
    member = SimpleNamespace(config=config, pipeline=pipeline, holds=None, instance_id="a")
    _, server, _ = serve_endpoint(member, None)
    try:
        assert _get(f"{server.url}/topology") == (200, json.dumps(pipeline.describe()))
        assert "small-by-value-repartition (repartition of by-value)" in html.unescape(_get(f"{server.url}/")[1])
    finally:
        server.close()
