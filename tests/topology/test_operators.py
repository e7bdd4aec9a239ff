"""Operators through the TestDriver: stateless steps, keyed aggregations, fan-out, process
functions with state, and the dead-letter topic for bad records."""

from __future__ import annotations

import random
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from framework.pipeline import Pipeline, ProcessFunction, Stream, Topic
from framework.serde import IntSerde, JsonSerde, StringSerde
from framework.testing import TestDriver, TestRecord
from tests.present import present

PARTITIONS = [1, 2, 4]


def events(n: int = 200, seed: int = 1) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"user": f"u{rng.randrange(7)}", "x": rng.randrange(-50, 50), "i": i} for i in range(n)]


def per_key(records: list[TestRecord]) -> dict[Any, list[Any]]:
    out: dict[Any, list[Any]] = defaultdict(list)
    for r in records:
        out[r.key].append(r.value)
    return dict(out)


def running(values: list[dict[str, Any]], key: Callable[[dict[str, Any]], Any],
            step: Callable[[Any, Any], Any], first: Callable[[Any], Any]) -> dict[Any, list[Any]]:
    """Plain-Python rolling aggregation: the expected per-key output sequences."""
    acc: dict[Any, Any] = {}
    out: dict[Any, list[Any]] = defaultdict(list)
    for v in values:
        k = key(v)
        acc[k] = first(v) if k not in acc else step(acc[k], v)
        out[k].append(acc[k])
    return dict(out)


def last(seqs: dict[Any, list[Any]]) -> dict[Any, Any]:
    return {k: s[-1] for k, s in seqs.items()}


# --- stateless steps ---------------------------------------------------------------------------


def test_map_filter_flat_map_and_peek_transform_values_in_order() -> None:
    seen: list[tuple[Any, Any, int]] = []
    p = Pipeline("svc")
    (p.source(Topic("in"))
     .map(lambda v: v * 3)
     .filter(lambda v: v % 2 == 0)
     .flat_map(lambda v: [v, v + 1] if v > 10 else [])
     .peek(lambda k, v, ts: seen.append((k, v, ts)))
     .to(Topic("out")))
    d = TestDriver(p)
    for i in range(20):
        d.pipe("in", i, key=f"k{i}", timestamp=1000 + i)
    expected = [w for v in range(20) for w in ([v * 3, v * 3 + 1] if v * 3 % 2 == 0 and v * 3 > 10 else [])]
    assert d.values("out") == expected
    assert [v for _, v, _ in seen] == expected
    out = d.output("out")
    assert [(r.key, r.timestamp) for r in out] == [(k, ts) for k, _, ts in seen]
    assert out[0].key == "k4" and out[0].timestamp == 1004  # key and timestamp pass unchanged


def test_peek_sees_key_value_and_timestamp_and_passes_records_unchanged() -> None:
    seen: list[tuple[Any, Any, int]] = []
    p = Pipeline("svc")
    p.source(Topic("in")).peek(lambda k, v, ts: seen.append((k, v, ts))).to(Topic("out"))
    d = TestDriver(p)
    d.pipe("in", {"a": 1}, key="k", timestamp=42)
    d.pipe("in", [1, 2], timestamp=7)
    assert seen == [("k", {"a": 1}, 42), (None, [1, 2], 7)]
    assert [(r.key, r.value, r.timestamp) for r in d.output("out")] == [("k", {"a": 1}, 42), (None, [1, 2], 7)]


def test_flat_map_accepts_any_iterable_including_empty_and_generators() -> None:
    p = Pipeline("svc")
    p.source(Topic("in")).flat_map(lambda n: (i for i in range(n))).to(Topic("out"))
    d = TestDriver(p)
    for n in [0, 3, 0, 1]:
        d.pipe("in", n)
    assert d.values("out") == [0, 1, 2, 0]


def test_none_values_pass_through_stateless_steps_as_tombstones() -> None:
    p = Pipeline("svc")
    p.source(Topic("in")).filter(lambda v: True).to(Topic("out"))
    d = TestDriver(p)
    d.pipe("in", None, key="gone")
    assert [(r.key, r.value) for r in d.output("out")] == [("gone", None)]


def test_sink_serdes_encode_the_output() -> None:
    p = Pipeline("svc")
    p.source(Topic("in")).map(lambda v: v["n"]).to(Topic("out", key_serde=StringSerde(), value_serde=IntSerde()))
    d = TestDriver(p)
    d.pipe("in", {"n": -5}, key="a")
    [rec] = d.topics.log("out")[0]
    assert rec.value() == (-5).to_bytes(8, "big", signed=True)
    assert d.values("out") == [-5]


# --- keyed aggregations ------------------------------------------------------------------------


def build_aggregations() -> Pipeline:
    p = Pipeline("agg")
    by_user = p.source(Topic("events")).key_by(lambda e: e["user"], name="by-user")
    by_user.count(name="count").to("count-out")
    by_user.sum(lambda e: e["x"], name="sum").to("sum-out")
    by_user.min(lambda e: e["x"], name="min").to("min-out")
    by_user.max(lambda e: e["x"], name="max").to("max-out")
    by_user.mean(lambda e: e["x"], name="mean").to("mean-out")
    by_user.map(lambda e: e["i"]).reduce(lambda a, b: a * 31 + b, name="reduce").to("reduce-out")
    by_user.aggregate(list, lambda acc, e: [*acc, e["x"]][-3:], result=lambda acc: sum(acc),
                      name="last3").to("last3-out")
    return p


def expected_aggregations(data: list[dict[str, Any]]) -> dict[str, dict[Any, list[Any]]]:
    user = lambda e: e["user"]
    x = lambda e: e["x"]
    sums = running(data, user, lambda a, e: (a[0] + e["x"], a[1] + 1), lambda e: (e["x"], 1))
    lasts = running(data, user, lambda a, e: [*a, e["x"]][-3:], lambda e: [e["x"]])
    return {
        "count": running(data, user, lambda a, e: a + 1, lambda e: 1),
        "sum": running(data, user, lambda a, e: a + x(e), x),
        "min": running(data, user, lambda a, e: min(a, x(e)), x),
        "max": running(data, user, lambda a, e: max(a, x(e)), x),
        "mean": {k: [s / n for s, n in seq] for k, seq in sums.items()},
        "reduce": running(data, user, lambda a, e: a * 31 + e["i"], lambda e: e["i"]),
        "last3": {k: [sum(acc) for acc in seq] for k, seq in lasts.items()},
    }


@pytest.mark.parametrize("partitions", PARTITIONS)
def test_keyed_aggregations_equal_a_plain_python_recount(partitions: int) -> None:
    data = events()
    d = TestDriver(build_aggregations(), partitions=partitions)
    for e in data:
        d.pipe("events", e)
    expected = expected_aggregations(data)
    for name, seqs in expected.items():
        got = per_key(d.output(f"{name}-out"))
        assert got == seqs, name  # every rolling result, per key, in order
        for user, final in last(seqs).items():
            if name not in ("mean", "last3"):
                assert d.state(name, user) == final, (name, user)


@pytest.mark.parametrize("partitions", PARTITIONS)
def test_keyed_source_records_from_every_partition_are_aggregated_per_key(partitions: int) -> None:
    """Records already keyed on the source (spread over its partitions by murmur2) are re-keyed."""
    data = events(150, seed=2)
    p = Pipeline("svc")
    p.source(Topic("in")).key_by(lambda e: e["x"] % 5, name="bucket").sum(
        lambda e: e["x"], name="s").to(Topic("out", key_serde=JsonSerde()))
    d = TestDriver(p, partitions=partitions)
    for e in data:
        d.pipe("in", e, key=e["user"])
    expected = running(data, lambda e: e["x"] % 5, lambda a, e: a + e["x"], lambda e: e["x"])
    assert per_key(d.output("out")) == expected


def test_the_number_of_partitions_does_not_change_per_key_results() -> None:
    data = events(300, seed=3)
    finals = []
    for partitions in PARTITIONS:
        d = TestDriver(build_aggregations(), partitions=partitions)
        for e in data:
            d.pipe("events", e, key=e["user"])
        finals.append({name: last(per_key(d.output(f"{name}-out")))
                       for name in ["count", "sum", "min", "max", "mean", "reduce", "last3"]})
        assert d.state_sizes()["count"] == len({e["user"] for e in data})
    assert finals[0] == finals[1] == finals[2]


def test_records_of_one_key_go_to_one_task() -> None:
    data = events(100, seed=4)
    p = Pipeline("svc")
    p.source(Topic("in")).key_by(lambda e: e["user"]).process(
        lambda k, v, ctx: ctx.emit(ctx.partition), name="where").to("out")
    d = TestDriver(p, partitions=4)
    for e in data:
        d.pipe("in", e)
    tasks = {k: set(ps) for k, ps in per_key(d.output("out")).items()}
    assert all(len(ps) == 1 for ps in tasks.values())
    assert len({p for ps in tasks.values() for p in ps}) > 1  # and keys spread over tasks


def test_tuple_keys_round_trip_through_key_by() -> None:
    p = Pipeline("svc")
    p.source(Topic("in")).key_by(lambda e: (e["a"], e["b"])).count(name="n").to(
        Topic("out", key_serde=JsonSerde()))
    d = TestDriver(p, partitions=2)
    for a, b in [("x", 1), ("x", 2), ("x", 1)]:
        d.pipe("in", {"a": a, "b": b})
    assert d.state("n", ("x", 1)) == 2
    assert d.state("n", ("x", 2)) == 1
    assert sorted((tuple(r.key), r.value) for r in d.output("out")) == [(("x", 1), 1), (("x", 1), 2), (("x", 2), 1)]


# --- fan-out ---------------------------------------------------------------------------------


@pytest.mark.parametrize("partitions", [1, 3])
def test_fan_out_sends_every_record_into_each_branch(partitions: int) -> None:
    data = events(80, seed=5)
    p = Pipeline("svc")
    s = p.source(Topic("in"))
    s.map(lambda e: e["x"], name="xs").to("xs-out")
    s.filter(lambda e: e["x"] > 0, name="positive").map(lambda e: e["i"]).to("pos-out")
    keyed = s.key_by(lambda e: e["user"])
    keyed.count(name="n").to("n-out")
    keyed.sum(lambda e: e["x"], name="total").to("total-out")
    d = TestDriver(p, partitions=partitions)
    for e in data:
        d.pipe("in", e)
    # keyless outputs are spread round-robin over the output partitions: compare as multisets
    assert sorted(d.values("xs-out")) == sorted(e["x"] for e in data)
    assert sorted(d.values("pos-out")) == [e["i"] for e in data if e["x"] > 0]
    assert last(per_key(d.output("n-out"))) == dict(Counter(e["user"] for e in data))
    totals: Counter[str] = Counter()
    for e in data:
        totals[e["user"]] += e["x"]
    assert last(per_key(d.output("total-out"))) == dict(totals)


# --- process functions with state --------------------------------------------------------------

TWEETS = [
    "loving #python and #kafka",
    "#Kafka streams all day #streaming",
    "no tags here",
    "#python #python #rust",
    "#flink vs #kafka streams #streaming #python",
    "",
    "#rust is fast, #python is friendly",
]


def hashtags(text: str) -> list[str]:
    return [t.lower() for t in re.findall(r"#(\w+)", text)]


class CountPerKey(ProcessFunction):
    def open(self, ctx):  # type: ignore[no-untyped-def]
        self.count = ctx.value_state("count", default=0)

    def process(self, key, value, ctx):  # type: ignore[no-untyped-def]
        n = self.count.get() + 1
        self.count.set(n)
        ctx.emit(n)


def tweet_stream(seed: int) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(TWEETS) for _ in range(120)]


@pytest.mark.parametrize("partitions", PARTITIONS)
def test_hashtag_count_with_a_process_function_equals_a_counter(partitions: int) -> None:
    tweets = tweet_stream(seed=partitions)
    p = Pipeline("tags")
    tags = p.source(Topic("tweets")).flat_map(hashtags).key_by(lambda t: t, name="by-tag")
    tags.process(CountPerKey(), name="pf").to("pf-counts")
    tags.count(name="counted").to("counts")
    d = TestDriver(p, partitions=partitions)
    for i, t in enumerate(tweets):
        d.pipe("tweets", t, key=f"user{i % 5}")
    expected = Counter(tag for t in tweets for tag in hashtags(t))
    assert last(per_key(d.output("pf-counts"))) == dict(expected)
    assert last(per_key(d.output("counts"))) == dict(expected)
    for tag, n in expected.items():
        assert d.state("pf", tag, state="count") == n
        assert d.state("counted", tag) == n
    assert d.state("pf", "nope", state="count") is None


class RollingMin(ProcessFunction):
    def open(self, ctx):  # type: ignore[no-untyped-def]
        self.low = ctx.value_state("low")

    def process(self, key, value, ctx):  # type: ignore[no-untyped-def]
        low = self.low.get()
        if low is None or value < low:
            self.low.set(value)
            low = value
        ctx.emit(low)


@pytest.mark.parametrize("partitions", PARTITIONS)
def test_rolling_minimum_with_value_state(partitions: int) -> None:
    data = events(150, seed=6)
    p = Pipeline("svc")
    p.source(Topic("in")).key_by(lambda e: e["user"]).map(lambda e: e["x"]).process(
        RollingMin(), name="low").to("out")
    d = TestDriver(p, partitions=partitions)
    for e in data:
        d.pipe("in", e)
    expected = running(data, lambda e: e["user"], lambda a, e: min(a, e["x"]), lambda e: e["x"])
    assert per_key(d.output("out")) == expected
    for user, low in last(expected).items():
        assert d.state("low", user, state="low") == low


class TagsPerUser(ProcessFunction):
    """Map state: tag -> count per user; list state: the user's last three tweets."""

    def open(self, ctx):  # type: ignore[no-untyped-def]
        self.tags = ctx.map_state("tags")
        self.recent = ctx.list_state("recent")

    def process(self, key, value, ctx):  # type: ignore[no-untyped-def]
        for tag in hashtags(value):
            self.tags.put(tag, self.tags.get(tag, 0) + 1)
        self.recent.add(value)
        self.recent.update(self.recent.get()[-3:])
        ctx.emit({"tags": {k.decode(): n for k, n in self.tags.items()}, "recent": self.recent.get()})


@pytest.mark.parametrize("partitions", PARTITIONS)
def test_map_and_list_state_per_key(partitions: int) -> None:
    tweets = tweet_stream(seed=10 + partitions)
    users = [f"user{i % 4}" for i in range(len(tweets))]
    p = Pipeline("svc")
    p.source(Topic("tweets")).process(TagsPerUser(), name="per-user").to("out")
    d = TestDriver(p, partitions=partitions)
    for u, t in zip(users, tweets):
        d.pipe("tweets", t, key=u)
    expected_tags: dict[str, Counter[str]] = defaultdict(Counter)
    expected_recent: dict[str, list[str]] = defaultdict(list)
    for u, t in zip(users, tweets):
        expected_tags[u].update(hashtags(t))
        expected_recent[u] = [*expected_recent[u], t][-3:]
    final = last(per_key(d.output("out")))
    assert set(final) == set(users)
    for u in final:
        assert final[u]["tags"] == dict(sorted(expected_tags[u].items()))
        assert list(final[u]["tags"]) == sorted(expected_tags[u])  # map keys ascending
        assert final[u]["recent"] == expected_recent[u]
        assert d.state("per-user", u, state="recent") == expected_recent[u]


class Dedupe(ProcessFunction):
    """A mutable default: each key must get its own copy."""

    def open(self, ctx):  # type: ignore[no-untyped-def]
        self.seen = ctx.value_state("seen", default=[])

    def process(self, key, value, ctx):  # type: ignore[no-untyped-def]
        seen = self.seen.get()
        if value not in seen:
            seen.append(value)
            self.seen.set(seen)
            ctx.emit(value)


def test_a_mutable_state_default_is_not_shared_between_keys() -> None:
    p = Pipeline("svc")
    p.source(Topic("in")).process(Dedupe(), name="dedupe").to("out")
    d = TestDriver(p)
    for key, v in [("a", 1), ("b", 1), ("a", 1), ("b", 2), ("c", 2)]:
        d.pipe("in", v, key=key)
    assert [(r.key, r.value) for r in d.output("out")] == [("a", 1), ("b", 1), ("b", 2), ("c", 2)]
    assert d.state("dedupe", "a", state="seen") == [1]


def test_a_plain_function_works_as_a_process_function() -> None:
    def totals(key: Any, value: Any, ctx: Any) -> None:
        total = ctx.value_state("total", 0)
        total.set(total.get() + value)
        ctx.emit(total.get())

    p = Pipeline("svc")
    p.source(Topic("in")).process(totals, name="t").to("out")
    d = TestDriver(p, partitions=2)
    for k, v in [("a", 1), ("b", 10), ("a", 2), ("b", 20)]:
        d.pipe("in", v, key=k)
    assert per_key(d.output("out")) == {"a": [1, 3], "b": [10, 30]}


def test_emit_can_override_key_and_timestamp() -> None:
    def split(key: Any, value: Any, ctx: Any) -> None:
        ctx.emit(value)
        ctx.emit(value * 10, key=f"{key}-x", timestamp=ctx.timestamp + 1)

    p = Pipeline("svc")
    p.source(Topic("in")).process(split, name="split").to("out")
    d = TestDriver(p)
    d.pipe("in", 4, key="k", timestamp=100)
    assert [(r.key, r.value, r.timestamp) for r in d.output("out")] == [("k", 4, 100), ("k-x", 40, 101)]


def test_each_task_gets_its_own_copy_of_the_process_function() -> None:
    class Local(ProcessFunction):
        def __init__(self) -> None:
            self.calls = 0

        def process(self, key, value, ctx):  # type: ignore[no-untyped-def]
            self.calls += 1
            ctx.emit((ctx.partition, self.calls))

    fn = Local()
    p = Pipeline("svc")
    p.source(Topic("in")).process(fn, name="local").to("out")
    d = TestDriver(p, partitions=4)
    for i in range(40):
        d.pipe("in", i, key=f"k{i}")
    assert fn.calls == 0
    by_task: dict[int, list[int]] = defaultdict(list)
    for r in d.output("out"):
        task, calls = r.value
        by_task[task].append(calls)
    assert len(by_task) > 1
    assert all(calls == list(range(1, len(calls) + 1)) for calls in by_task.values())


def test_process_context_exposes_the_record_headers() -> None:
    p = Pipeline("svc")
    p.source(Topic("in")).process(
        lambda k, v, ctx: ctx.emit({h: b.decode() for h, b in ctx.headers}), name="h").to("out")
    d = TestDriver(p)
    d.pipe("in", 1, key="k", headers=[("trace", b"abc")])
    d.pipe("in", 2, key="k")
    assert d.values("out") == [{"trace": "abc"}, {}]


# --- dead letters ------------------------------------------------------------------------------


def headers_of(msg: Any) -> dict[str, bytes]:
    return dict(msg.headers() or ())


@pytest.mark.parametrize("keyed_step", ["count", "sum", "reduce", "aggregate", "process"])
def test_a_record_without_key_into_a_keyed_step_goes_to_the_dead_letter_topic(keyed_step: str) -> None:
    p = Pipeline("svc")
    s = p.source(Topic("in"))
    steps: dict[str, Callable[[Stream], Stream]] = {
        "count": lambda st: st.count(name="keyed"),
        "sum": lambda st: st.sum(name="keyed"),
        "reduce": lambda st: st.reduce(max, name="keyed"),
        "aggregate": lambda st: st.aggregate(int, lambda a, v: a + v, name="keyed"),
        "process": lambda st: st.process(CountPerKey(), name="keyed"),
    }
    steps[keyed_step](s).to("out")
    d = TestDriver(p, partitions=2)
    d.pipe("in", 5, key="k")
    d.pipe("in", 6)  # no key
    d.pipe("in", 7, key="k")
    assert len(d.output("out")) == 2
    [dead] = d.dead_letters()
    h = headers_of(dead)
    message = h["fw.error.message"].decode()
    assert "key_by" in message
    assert "no key" in message
    assert h["fw.step"] == b"keyed"
    assert re.search(r"in\[\d\]@\d+", message)
    assert dead.key() is None and dead.value() == b"6"


@pytest.mark.parametrize("partitions", [1, 3])
def test_a_map_that_raises_sends_exactly_those_records_to_the_dead_letter_topic(partitions: int) -> None:
    def invert(v: int) -> float:
        if v % 7 == 0:
            raise ZeroDivisionError("no sevens")
        return 1 / v

    p = Pipeline("svc")
    p.source(Topic("in")).map(invert, name="invert").to("out")
    d = TestDriver(p, partitions=partitions)
    values = list(range(1, 50))
    for v in values:
        d.pipe("in", v, key=f"k{v}", timestamp=v, headers=[("origin", b"test")])
    assert sorted(d.values("out")) == sorted(1 / v for v in values if v % 7)
    dead = d.dead_letters()
    assert sorted(int(present(m.value())) for m in dead) == [v for v in values if v % 7 == 0]
    inputs = {(m.topic(), m.partition(), m.offset()): m for part in d.topics.log("in") for m in part}
    for m in dead:
        h = headers_of(m)
        assert h["fw.source.topic"] == b"in"
        assert h["fw.step"] == b"invert"
        assert h["fw.error.type"] == b"ZeroDivisionError"
        assert h["origin"] == b"test"  # the record's own headers are kept
        source = inputs[("in", int(h["fw.source.partition"]), int(h["fw.source.offset"]))]
        assert (source.key(), source.value(), source.timestamp()) == (m.key(), m.value(), m.timestamp())
        message = h["fw.error.message"].decode()
        assert f"in[{source.partition()}]@{source.offset()}" in message
        assert "'invert'" in message and "no sevens" in message
    assert sum(t.dead_letters for t in d.tasks) == len(dead)


def test_a_failure_after_key_by_names_the_step_and_the_repartition_record() -> None:
    p = Pipeline("svc")
    p.source(Topic("in")).key_by(lambda e: e["k"], name="by-k").aggregate(
        int, lambda acc, e: acc + 100 // e["d"], name="agg").to("out")
    d = TestDriver(p, partitions=2)
    for k, div in [("a", 1), ("a", 0), ("b", 5), ("a", 4)]:
        d.pipe("in", {"k": k, "d": div})
    assert per_key(d.output("out")) == {"a": [100, 125], "b": [20]}
    [dead] = d.dead_letters()
    h = headers_of(dead)
    assert h["fw.step"] == b"agg"
    assert h["fw.error.type"] == b"ZeroDivisionError"
    assert h["fw.source.topic"] == b"svc-by-k-repartition"
    assert d.state("agg", "a") == 125


def test_a_key_by_function_that_raises_sends_the_source_record_to_the_dead_letter_topic() -> None:
    p = Pipeline("svc")
    p.source(Topic("in")).key_by(lambda e: e["k"], name="by-k").count(name="n").to("out")
    d = TestDriver(p)
    d.pipe("in", {"k": "a"})
    d.pipe("in", {"nokey": 1})
    d.pipe("in", {"k": "a"})
    assert d.values("out") == [1, 2]
    [dead] = d.dead_letters()
    h = headers_of(dead)
    assert (h["fw.step"], h["fw.error.type"], h["fw.source.offset"]) == (b"by-k", b"KeyError", b"1")
    assert dead.value() == b'{"nokey":1}'


@pytest.mark.parametrize("partitions", [1, 2])
def test_malformed_json_goes_to_the_dead_letter_topic_with_its_coordinates(partitions: int) -> None:
    p = Pipeline("svc")
    p.source(Topic("in")).key_by(lambda e: e["k"]).count(name="n").to("out")
    d = TestDriver(p, partitions=partitions)
    d.pipe("in", {"k": "a"})
    d.pipe_raw("in", b'{"k": "a"', partition=partitions - 1)
    d.pipe_raw("in", b"\xff\xfe not utf-8", key=b"raw-key")
    d.pipe("in", {"k": "a"})
    assert d.values("out") == [1, 2]
    dead = d.dead_letters()
    assert sorted(present(m.value()) for m in dead) == sorted([b'{"k": "a"', b"\xff\xfe not utf-8"])
    for m in dead:
        h = headers_of(m)
        topic, part, off = h["fw.source.topic"].decode(), int(h["fw.source.partition"]), int(h["fw.source.offset"])
        assert topic == "in"
        assert d.topics.log("in")[part][off].value() == m.value()
        message = h["fw.error.message"].decode()
        assert message.startswith(f"in[{part}]@{off}")
        assert h["fw.step"] == b"source-0"
        assert "decode" in message
    by_value = {m.value(): m for m in dead}
    # The serde's DecodeError names what JSON expected and found, then the decoder's own reason.
    assert headers_of(by_value[b'{"k": "a"'])["fw.error.type"] == b"DecodeError"
    assert headers_of(by_value[b"\xff\xfe not utf-8"])["fw.error.type"] == b"DecodeError"
    assert b"found 9 bytes (7B 22 6B 22 3A 20 22 61 ...): JSONDecodeError: Expecting ',' delimiter" in headers_of(
        by_value[b'{"k": "a"'])["fw.error.message"]
    assert b"found 12 bytes (FF FE 20 6E 6F 74 20 75 ...): UnicodeDecodeError: " in headers_of(
        by_value[b"\xff\xfe not utf-8"])["fw.error.message"]
    assert by_value[b"\xff\xfe not utf-8"].key() == b"raw-key"
