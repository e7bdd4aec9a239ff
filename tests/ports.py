"""Ports for what a test starts of its own (a broker, a registry, a Spark master, an HTTP
service), from a window of the pytest-xdist worker running it: workers look for free ports in
different places, so two of them never both find one port free and race to bind it. Within the
window the search starts at a place of the run's own (xdist's run id, or the process without
xdist), so two runs on one machine rarely race either."""

from __future__ import annotations

import os

from framework.broker.local import free_ports
from framework.errors import BrokerError

FIRST = 20000  # below the suite broker's pairs (29192 and up) and the kernel's ephemeral range
WIDTH = 1000  # per worker: pairs in the first half, single ports in the second


def _free(first: int, count: int) -> int:
    """``count`` free consecutive ports in the half-window from ``first``, searched from this
    run's place in it and then from its start."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    start = FIRST + (int(worker) if worker.isdigit() else 0) * WIDTH + first
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    place = (int(run[:8], 16) if run else os.getpid()) % (WIDTH // 2 // count) * count
    try:
        return free_ports(start + place, start + WIDTH // 2, count)
    except BrokerError:  # nothing free after this run's place
        return free_ports(start, start + WIDTH // 2, count)


def worker_port_pair() -> int:
    """Two free consecutive ports of this worker (a broker's, a Spark master's and its UI)."""
    return _free(0, 2)


def worker_ports(count: int) -> int:
    """``count`` free consecutive ports of this worker (a local cluster's port pairs)."""
    return _free(0, count)


def worker_port() -> int:
    """One free port of this worker."""
    return _free(WIDTH // 2, 1)
