"""Shared fixtures. Integration tests get the real broker through ``kafka_bootstrap``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from framework.broker import LocalBroker


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """A real Apache Kafka broker for the whole session.

    Uses ``FW_BOOTSTRAP_SERVERS`` when set, a broker that already runs for the configured
    instance (``scripts/test`` starts one), or starts one through the same code as
    ``fw broker start`` and stops it at the end.
    """
    broker = LocalBroker()
    already = broker.status().running
    status = broker.start()
    yield status.bootstrap
    if not already and not status.external:
        broker.stop()


@pytest.fixture
def unique() -> str:
    """A short random suffix for topic and group names, so tests never share them."""
    return uuid.uuid4().hex[:10]
