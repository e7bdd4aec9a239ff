"""docs/tutorial.md, executed: its marked blocks run in page order, as a reader types them.

The marker convention (``<!-- run -->`` and its options, background blocks and their
readiness, ``<!-- stop: NAME -->``, ``<!-- excerpt: FILE -->``) is described and
implemented in ``tests/docblocks.py``.

Each run starts in a fresh directory, so the tutorial's ``fw new project shop`` makes a
new project. The commands run with this virtualenv's ``fw``, ``python`` and ``pytest``
first on PATH: the virtualenv that the tutorial's first (unmarked) step, ``source
scripts/bootstrap.sh``, makes; the project uses the framework installed there instead of a
``.venv`` of its own (tests/integration/test_scaffold.py covers that one). They reach the
test broker through ``FW_BOOTSTRAP_SERVERS``, so the tutorial's ``fw broker start`` only
checks that cluster and prints its address. The tutorial's names are fixed (service
``orders``), so the topics and consumer groups of that service are deleted before and
after a run, and reruns on one broker start clean.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from framework.kafka.io import delete_topics
from tests.docblocks import ROOT, Runner, clean_env, parse
from tests.integration.harness import wait_until

TUTORIAL = ROOT / "docs" / "tutorial.md"
SERVICE = "orders"  # the service the tutorial creates: its topics and groups start with this


def _leftovers(admin: AdminClient) -> tuple[list[str], list[str]]:
    topics = [t for t in admin.list_topics(timeout=30).topics if t.startswith(f"{SERVICE}-")]
    listed = admin.list_consumer_groups(request_timeout=30).result()
    groups = [g.group_id for g in listed.valid
              if g.group_id == SERVICE or g.group_id.startswith(f"{SERVICE}-replay-")]
    return sorted(topics), sorted(groups)


def _clean(bootstrap: str) -> None:
    """Delete the tutorial service's topics (its own, internal and replayed ones) and its
    consumer groups (the service's and its replays'), and wait until they are gone. A group
    still holds a member killed by a failed run until its session times out: its deletion
    is tried again until then."""
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def gone() -> bool:
        topics, groups = _leftovers(admin)
        delete_topics(bootstrap, topics)
        for future in admin.delete_consumer_groups(groups, request_timeout=30).values() if groups else []:
            try:
                future.result()
            except KafkaException:
                pass  # not empty yet: the next round tries again
        return _leftovers(admin) == ([], [])

    wait_until(gone, 120, f"the {SERVICE} topics and groups to be deleted", lambda: repr(_leftovers(admin)))


@pytest.fixture
def clean_broker(kafka_bootstrap: str):  # type: ignore[no-untyped-def]
    _clean(kafka_bootstrap)
    yield kafka_bootstrap
    _clean(kafka_bootstrap)


@pytest.mark.timeout(900)
def test_the_tutorial_runs_as_written(clean_broker: str, tmp_path: Path) -> None:
    page = parse(TUTORIAL)
    assert f"fw new service {SERVICE}\n" in TUTORIAL.read_text(), "SERVICE no longer names the tutorial's service"
    start = tmp_path / "work"
    start.mkdir()
    Runner(start, clean_env(FW_BOOTSTRAP_SERVERS=clean_broker), tmp_path / "blocks").run_all(page.steps)
    # The tutorial's own claims about where things end up.
    project = start / "shop"
    assert (project / "services" / SERVICE / "pipeline.py").is_file()
    assert (project / "state" / SERVICE / "totals").is_dir()  # fw run's local state, under ./state
