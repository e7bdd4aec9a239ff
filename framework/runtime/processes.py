"""``--processes N``: N group members of one service, one per core.

Each child is a fresh ``fw run`` with its own ``--instance-id`` (0..N-1), so each has its
own transactional.id: a restarted child fences its killed predecessor's transaction at once
instead of waiting for the transaction timeout. A child that dies from a signal is restarted;
one that exits with an error is not (it would fail again the same way).
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time

log = logging.getLogger("framework.processes")


def supervise(target: str, processes: int, extra_args: list[str]) -> int:
    def spawn(i: int) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-m", "framework.cli", "run", target, "--instance-id", str(i), *extra_args]
        return subprocess.Popen(cmd)

    children = {i: spawn(i) for i in range(processes)}
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
            if code < 0 and not stopping:
                log.warning("instance %d died from signal %d: restarting it", i, -code)
                children[i] = spawn(i)
                continue
            rc = rc or code
            del children[i]
        time.sleep(0.2)
    return rc
