"""Shared fixtures. Integration tests get the real broker through ``kafka_bootstrap``
(``FW_BOOTSTRAP_SERVERS`` when set, the broker ``scripts/test`` started, or one started
through the same code as ``fw broker start`` and stopped at the end) and fresh topic and
group names through ``unique``: the fixtures the framework gives every project.

At the end of a run, the seconds each test file took (setup, call and teardown of its tests,
summed over the workers that ran them): where the suite's time goes, in CI's output."""

from collections import defaultdict

import pytest

from framework.testing.fixtures import kafka_bootstrap, unique

__all__ = ["kafka_bootstrap", "unique"]

_SHOWN_FILES = 30
_seconds_per_file: defaultdict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _seconds_per_file[report.nodeid.partition("::")[0]] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _seconds_per_file:
        return
    total = sum(_seconds_per_file.values())
    terminalreporter.write_sep("=", f"seconds per test file, the {_SHOWN_FILES} longest "
                                    f"(all {len(_seconds_per_file)}: {total:.0f} s of workers' time)")
    for path, seconds in sorted(_seconds_per_file.items(), key=lambda kv: -kv[1])[:_SHOWN_FILES]:
        terminalreporter.write_line(f"{seconds:8.1f}s  {path}")
