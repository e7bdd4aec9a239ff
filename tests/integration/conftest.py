import os
from collections.abc import Iterator

import pytest

from framework.broker.local import LocalBroker, free_port_pair
from framework.broker.registry import DEFAULT_PORT, LocalRegistry, external_registry, free_port
from tests.integration.harness import ServiceProcess


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def services() -> Iterator[list[ServiceProcess]]:
    """The test's services; any still running at the end (a failed test) is SIGKILLed."""
    started: list[ServiceProcess] = []
    yield started
    for svc in started:
        if svc.alive:
            svc.kill()


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Confluent-compatible schema registry for the session, its API URL:
    ``FW_SCHEMA_REGISTRY_URL`` when set, else a local one (``fw registry start``'s code) in a
    temporary directory on a free port, stopped at the end. Tests use subjects of their own."""
    external = external_registry()
    if external:
        yield external
        return
    # From a port that depends on the process: concurrent test runs look in different places
    # (a port found free can still be taken by another run's registry while this one starts).
    port = free_port(start=DEFAULT_PORT + 1 + os.getpid() % 800)
    registry = LocalRegistry(tmp_path_factory.mktemp("registry"), port=port)
    status = registry.start()
    try:
        yield status.url
    finally:
        registry.stop()


@pytest.fixture
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A broker of the test's own, to kill and restart: its directory is named, so
    FW_BOOTSTRAP_SERVERS (the suite's cluster) does not stand in for it."""
    own = LocalBroker(tmp_path_factory.mktemp("fault-broker"), free_port_pair(29800))
    own.start()
    try:
        yield own
    finally:
        own.wipe()
