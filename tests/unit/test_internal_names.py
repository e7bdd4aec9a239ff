"""Which topics on a cluster are a service's own (``framework.pipeline.internal``): by the
exact names the framework makes, never another service's whose name extends this one's."""

from __future__ import annotations

import pytest

from framework.pipeline import Pipeline, Topic
from framework.pipeline.internal import (
    Internal,
    claimed_by,
    internal_topics,
    known_services,
    parse_internal,
    stale_stores,
    store_copies,
)


@pytest.mark.parametrize(("topic", "expected"), [
    ("orders-counts-changelog", Internal("orders-counts-changelog", "changelog", "counts")),
    ("orders-by-user-repartition", Internal("orders-by-user-repartition", "repartition", "by-user")),
    ("orders-_time-changelog", Internal("orders-_time-changelog", "changelog", "_time")),
    ("orders-enrich-counts-changelog", Internal("orders-enrich-counts-changelog", "changelog", "enrich-counts")),
    ("orders-changelog", None),  # no store between the service and the suffix
    ("orders--changelog", None),
    ("orders-_x-repartition", None),  # not a step name (only the clock's store starts with "_")
    ("orders-dead-letter", None),
    ("orders-backfills", None),
    ("orders-foo", None),  # the user's, with the service's prefix but no framework suffix
    ("orders-counts-changelog-copy", None),
    ("ordersx-counts-changelog", None),
    ("orders", None),
])
def test_an_internal_topic_is_read_by_its_exact_name(topic: str, expected: Internal | None) -> None:
    assert parse_internal("orders", topic) == expected


def test_the_names_the_pipeline_makes_are_read_back_as_its_own() -> None:
    p = Pipeline("even-odd")
    p.source(Topic("numbers")).key_by(lambda n: n % 2, name="parity").sum(name="sums").to(Topic("sums"))
    made = [p.changelog_topic("sums"), p.repartition_topic("parity")]
    assert [parse_internal("even-odd", t) for t in made] == [Internal(made[0], "changelog", "sums"),
                                                            Internal(made[1], "repartition", "parity")]


def test_known_services_come_from_groups_dead_letters_ledgers_and_clocks() -> None:
    topics = ["a-dead-letter", "b-backfills", "c-_time-changelog", "d-counts-changelog", "-dead-letter", "numbers"]
    assert known_services(topics, ["e", "a"]) == {"a", "b", "c", "e"}


CLUSTER = ["orders-counts-changelog", "orders-by-id-repartition", "orders-old-changelog", "orders-dead-letter",
           "orders-foo", "orders-enrich-counts-changelog", "orders-enrich-by-sku-repartition",
           "orders-enrich-dead-letter", "orders-enriched", "numbers"]


def test_a_longer_named_service_keeps_its_topics() -> None:
    known = known_services(CLUSTER, ["orders", "orders-enrich"])
    assert [t.topic for t in internal_topics("orders", CLUSTER, known)] == [
        "orders-by-id-repartition", "orders-counts-changelog", "orders-old-changelog"]
    assert [t.topic for t in internal_topics("orders-enrich", CLUSTER, known)] == [
        "orders-enrich-by-sku-repartition", "orders-enrich-counts-changelog"]
    assert claimed_by("orders", "orders-enrich-counts-changelog", known) == "orders-enrich"
    assert claimed_by("orders", "orders-old-changelog", known) is None


def test_without_a_sign_of_the_longer_service_its_topics_look_like_this_ones() -> None:
    """Names alone cannot tell: what the cluster shows of other services decides."""
    bare = [t for t in CLUSTER if t != "orders-enrich-dead-letter"]
    assert "orders-enrich-counts-changelog" in [t.topic for t in internal_topics("orders", bare)]
    assert "orders-enrich-counts-changelog" not in [t.topic for t in internal_topics("orders", bare, ["orders-enrich"])]


def test_a_topic_the_pipeline_names_itself_is_its_own_whatever_else_exists() -> None:
    known = {"orders-enrich"}
    found = internal_topics("orders", CLUSTER, known, mine=["orders-enrich-counts-changelog"])
    assert Internal("orders-enrich-counts-changelog", "changelog", "enrich-counts") in found


def test_stale_stores_are_changelogs_of_stores_the_pipeline_lacks() -> None:
    known = known_services(CLUSTER, ["orders-enrich"])
    assert stale_stores("orders", ["counts", "_time"], CLUSTER, known) == {"old": "orders-old-changelog"}
    assert stale_stores("orders", ["counts", "old"], CLUSTER, known) == {}


def test_a_stores_local_copies_include_a_global_tables_further_copies() -> None:
    dirs = ["rates", "rates@1", "rates@12", "rates-old", "rates@x", "other"]
    assert store_copies(dirs, "rates") == ["rates", "rates@1", "rates@12"]
