from collections.abc import Iterator

import pytest

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
