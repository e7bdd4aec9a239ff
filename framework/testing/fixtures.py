"""pytest fixtures for tests on a real broker, for projects built on the framework.

Import them into a ``conftest.py`` (``from framework.testing.fixtures import kafka_bootstrap,
unique``): ``kafka_bootstrap`` gives a broker for the session, ``unique`` a suffix for topic
and group names. Needs pytest (a test dependency, not one of the framework's).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from framework.broker import LocalBroker, external_bootstrap
from framework.broker.cluster import LocalCluster, is_cluster

__all__ = ["kafka_bootstrap", "unique"]


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """A real Apache Kafka broker for the whole session: ``FW_BOOTSTRAP_SERVERS`` when set,
    else the local broker (``fw broker start``) at its one address (``framework.home``:
    ``FW_BROKER_PORT``, the broker its directory records, or 28092), started if needed and
    then stopped again at the end; or the local cluster its directory holds
    (``fw broker start --nodes 3``), started if needed and left running."""
    if is_cluster() and not external_bootstrap():
        yield LocalCluster().start().bootstrap
        return
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
