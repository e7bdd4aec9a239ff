"""Pipeline definitions as pure data: step names, derived topic names, wiring, describe()."""

from __future__ import annotations

import pytest

from framework.errors import PipelineError
from framework.pipeline import Pipeline, ProcessFunction, Topic
from framework.pipeline import steps as S
from framework.testing import TestDriver


def build_word_count(name: str = "wc") -> Pipeline:
    p = Pipeline(name)
    words = p.source(Topic("lines")).flat_map(str.split).filter(bool)
    words.key_by(lambda w: w).count().to(Topic("counts"))
    return p


class Noop(ProcessFunction):
    def process(self, key, value, ctx):  # type: ignore[no-untyped-def]
        ctx.emit(value)


def test_step_names_default_to_kind_and_index() -> None:
    p = build_word_count()
    assert list(p.steps) == ["source-0", "flat_map-1", "filter-2", "key_by-3", "count-4", "to-5"]


def test_default_names_of_every_kind() -> None:
    p = Pipeline("svc")
    s = p.source("in")
    s.map(str).peek(lambda k, v, t: None).to("a")
    k = s.key_by(len)
    k.sum()
    k.min()
    k.max()
    k.mean()
    k.reduce(lambda a, b: a + b)
    k.aggregate(list, lambda acc, v: acc + [v])
    k.process(Noop())
    assert list(p.steps) == ["source-0", "map-1", "peek-2", "to-3", "key_by-4", "sum-5", "min-6",
                             "max-7", "mean-8", "reduce-9", "aggregate-10", "process-11"]


def test_step_names_are_stable_across_builds() -> None:
    assert list(build_word_count().steps) == list(build_word_count().steps)
    assert build_word_count().describe() == build_word_count().describe()


def test_given_names_are_used_and_count_towards_the_index() -> None:
    p = Pipeline("svc")
    s = p.source("in", name="numbers")
    s.map(abs, name="absolute").filter(bool).to("out", name="sink")
    assert list(p.steps) == ["numbers", "absolute", "filter-2", "sink"]


def test_step_kinds() -> None:
    p = build_word_count()
    assert [s.kind for s in p.steps.values()] == ["source", "flat_map", "filter", "key_by",
                                                  "aggregate", "to"]


DUPLICATES = {
    "map": lambda p, s, k: s.map(str, name="dup"),
    "count": lambda p, s, k: k.count(name="dup"),
    "sum": lambda p, s, k: k.sum(name="dup"),
    "reduce": lambda p, s, k: k.reduce(max, name="dup"),
    "aggregate": lambda p, s, k: k.aggregate(int, max, name="dup"),
    "key_by": lambda p, s, k: s.key_by(str, name="dup"),
    "to": lambda p, s, k: s.to("out", name="dup"),
    "process": lambda p, s, k: k.process(Noop(), name="dup"),
    "source": lambda p, s, k: p.source("other", name="dup"),
}


@pytest.mark.parametrize("kind", list(DUPLICATES))
def test_duplicate_step_name_raises_pipeline_error_naming_it(kind: str) -> None:
    p = Pipeline("svc")
    s = p.source("in")
    k = s.key_by(str, name="keyed")
    s.filter(bool, name="dup")
    with pytest.raises(PipelineError) as info:
        DUPLICATES[kind](p, s, k)
    message = str(info.value)
    assert "'dup'" in message and "used twice" in message and "'svc'" in message
    assert isinstance(p.steps["dup"], S.Filter)  # the first step keeps the name


def test_a_default_name_that_collides_with_a_given_one_raises() -> None:
    p = Pipeline("svc")
    s = p.source("in", name="map-1")
    with pytest.raises(PipelineError, match="'map-1'"):
        s.map(str)


def test_a_failed_step_leaves_the_pipeline_unchanged() -> None:
    p = Pipeline("svc")
    s = p.source("in")
    s.map(str, name="m")
    before = dict(p.steps)
    with pytest.raises(PipelineError):
        s.filter(bool, name="m")
    assert p.steps == before
    s.filter(bool)  # and the next default name is as if nothing happened
    assert list(p.steps)[-1] == "filter-2"


@pytest.mark.parametrize("bad", ["has space", "-leading-dash", ".dot", "a/b", "a:b", "naïve", "x" * 202,
                                 "tab\there", "semi;colon"])
def test_invalid_step_name_raises_pipeline_error_naming_it(bad: str) -> None:
    p = Pipeline("svc")
    s = p.source("in")
    with pytest.raises(PipelineError) as info:
        s.map(str, name=bad)
    assert repr(bad) in str(info.value)
    assert bad not in p.steps


@pytest.mark.parametrize("good", ["a", "A.b_c-1", "9lives", "x" * 201])
def test_valid_step_names_are_accepted(good: str) -> None:
    p = Pipeline("svc")
    p.source("in").map(str, name=good)
    assert good in p.steps


@pytest.mark.parametrize("bad", ["bad name", "", "-x", "a/b"])
def test_invalid_pipeline_name_raises_pipeline_error_naming_it(bad: str) -> None:
    with pytest.raises(PipelineError) as info:
        Pipeline(bad)
    assert repr(bad) in str(info.value)


@pytest.mark.parametrize("bad", ["bad topic", "", "t/x"])
def test_invalid_topic_name_raises_pipeline_error_naming_it(bad: str) -> None:
    with pytest.raises(PipelineError) as info:
        Topic(bad)
    assert repr(bad) in str(info.value)


def test_changelog_and_repartition_topic_names() -> None:
    p = Pipeline("orders")
    p.source("in").key_by(lambda v: v["id"], name="by-id").count(name="per-id").to("out")
    assert p.changelog_topic("per-id") == "orders-per-id-changelog"
    assert p.repartition_topic("by-id") == "orders-by-id-repartition"


def test_input_topics_are_the_sources_then_every_repartition_topic() -> None:
    p = Pipeline("svc")
    a = p.source("a")
    b = p.source(Topic("b"))
    a.key_by(str, name="k1").count(name="c1").to("out")
    b.key_by(str).key_by(len, name="k3").sum(name="s").to("out2")
    assert p.input_topics() == ["a", "b", "svc-k1-repartition", "svc-key_by-5-repartition",
                                "svc-k3-repartition"]


def test_a_pipeline_without_key_by_consumes_only_its_sources() -> None:
    p = Pipeline("svc")
    p.source("in").map(str).to("out")
    assert p.input_topics() == ["in"]


def test_stateful_steps_and_their_changelogs() -> None:
    p = Pipeline("svc")
    k = p.source("in").map(str).key_by(len, name="by-len")
    k.count(name="n")
    k.process(Noop(), name="pf")
    k.filter(bool).to("out")
    assert [s.name for s in p.stateful_steps()] == ["n", "pf"]
    assert [p.changelog_topic(s.name) for s in p.stateful_steps()] == ["svc-n-changelog", "svc-pf-changelog"]


def test_sources_and_sinks() -> None:
    p = Pipeline("svc")
    counts = Topic("counts", partitions=3)
    s = p.source("in")
    s.to(counts)
    s.map(str).to("strings")
    assert [t.topic.name for t in p.sources()] == ["in"]
    assert [t.name for t in p.sink_topics()] == ["counts", "strings"]
    assert p.sink_topics()[0] is counts


def test_dead_letter_topic_defaults_to_the_pipeline_name() -> None:
    assert Pipeline("svc").dead_letter.name == "svc-dead-letter"
    assert Pipeline("svc", dead_letter="errors").dead_letter.name == "errors"
    custom = Topic("dlq", partitions=1)
    assert Pipeline("svc", dead_letter=custom).dead_letter is custom


def test_fan_out_wires_one_step_into_several_children() -> None:
    p = Pipeline("svc")
    s = p.source("in")
    s.map(str, name="left")
    s.filter(bool, name="right")
    assert p.children["source-0"] == ["left", "right"]
    assert p.steps["left"].parents == ("source-0",)
    assert p.steps["right"].parents == ("source-0",)


def test_describe_lists_every_step_with_kind_and_parents() -> None:
    p = build_word_count()
    steps = p.describe()["steps"]
    assert [(s["kind"], s["name"], s["parents"]) for s in steps] == [
        ("source", "source-0", []),
        ("flat_map", "flat_map-1", ["source-0"]),
        ("filter", "filter-2", ["flat_map-1"]),
        ("key_by", "key_by-3", ["filter-2"]),
        ("aggregate", "count-4", ["key_by-3"]),
        ("to", "to-5", ["count-4"]),
    ]


def test_key_by_changes_the_key_serde_of_the_stream() -> None:
    p = Pipeline("svc")
    s = p.source(Topic("in"))
    k = s.key_by(len)
    assert k.key_serde is not s.key_serde
    assert k.key_serde.serialize(("a", 1)) == b'["a",1]'
    agg = k.count()
    step = p.steps[agg.step]
    assert isinstance(step, S.Aggregate)
    assert step.key_serde.serialize("x") == b'"x"'


def test_building_a_pipeline_does_no_io_and_the_same_source_twice_fails_at_compile() -> None:
    p = Pipeline("svc")
    p.source("in", name="one").to("a")
    p.source("in", name="two").to("b")  # defining is fine: it is pure data
    with pytest.raises(PipelineError, match="'in'"):
        TestDriver(p)
