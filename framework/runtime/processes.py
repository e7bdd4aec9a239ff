"""``--processes N``: N group members of one service, one per core.

Each child is a fresh ``fw run`` with its own ``--instance-id``, the same across its restarts,
so each has its own transactional.id: a restarted child fences its killed predecessor's
transaction at once instead of waiting for the transaction timeout. Given ``--instance-id ID``,
child i is ``ID-i`` and a static group member (``group.instance.id``): restarted, it takes its
partitions back without a rebalance. Without one, child i is ``<host>-i`` (this machine's
host name: a container's is its own) and a dynamic member: with the same ids on every host,
members of two hosts would share a transactional id, and one starting would fence the other.
A child that dies from a signal is restarted; one that exits with an error is not (it would
fail again the same way).

The supervisor serves the status endpoint at the configured port for all the children
(``framework.observe.supervisor``); each child serves its own on a free port.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

from framework.config import Config
from framework.observe.metrics import MULTIPROC_ENV
from framework.observe.server import StatusServer
from framework.observe.supervisor import Children

log = logging.getLogger("framework.processes")


def supervise(target: str, processes: int, extra_args: list[str], config: Config | None = None,
              instance_id: str | None = None) -> int:
    obs = (config or Config.load()).observe
    ids = child_ids(processes, instance_id)
    env = dict(os.environ)
    children: dict[int, subprocess.Popen[bytes]] = {}
    view = server = None
    if obs.enabled:
        shared = env.get(MULTIPROC_ENV) or tempfile.mkdtemp(prefix="fw-metrics-")
        Children.prepare(shared)
        env[MULTIPROC_ENV], env["FW_OBSERVE__PORT"] = shared, "0"
        view = Children(shared, obs.host, lambda: {ids[i]: c.pid for i, c in list(children.items())})
        server = StatusServer(view, obs.host, obs.port).start()
        log.info("status endpoint %s for all %d processes (/metrics sums them; each child serves its own "
                 "too)", server.url, processes)

    def spawn(i: int) -> subprocess.Popen[bytes]:
        membership = [] if instance_id else ["--dynamic-membership"]
        cmd = [sys.executable, "-m", "framework.cli", "run", target, "--instance-id", ids[i], *membership,
               *extra_args]
        return subprocess.Popen(cmd, env=env)

    for i in range(processes):
        children[i] = spawn(i)
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    rc = 0
    while children:
        for i, child in list(children.items()):
            code = child.poll()
            if code is None:
                continue
            if view is not None:
                view.child_died(ids[i], child.pid)
            if code < 0 and not stopping:
                log.warning("instance %s died from signal %d: restarting it", ids[i], -code)
                children[i] = spawn(i)
                continue
            rc = rc or code
            del children[i]
        time.sleep(0.2)
    if server is not None:
        server.close()
    return rc


def child_ids(processes: int, instance_id: str | None) -> list[str]:
    """The instance id of each child: ``<instance_id>-<i>``, or ``<host name>-<i>`` without one."""
    return [f"{instance_id or socket.gethostname()}-{i}" for i in range(processes)]
