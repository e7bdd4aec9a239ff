"""Fault points for recovery tests, at exact steps of a checkpoint or a restore.

``FW_CRASH_POINT=<point>:<n>`` SIGKILLs this process the n-th time it reaches ``<point>``.
``FW_HOLD_POINT=<point>:<n>:<path>`` holds the processing loop there, the n-th time, until
the file ``<path>`` exists: a test can look at a member in the middle of a restore (its
``/status`` and ``/ready`` answer from another thread) and then let it go on.
Points: ``after_changelogs``, ``after_flush``, ``after_commit`` (before the RocksDB write),
``after_state_write``, ``restore_batch``. Unset: no effect; the check runs only at
checkpoint and restore steps, never per record."""

from __future__ import annotations

import os
import signal
import time

_spec = os.environ.get("FW_CRASH_POINT", "")
_point, _, _n = _spec.partition(":")
_remaining = int(_n or 1) if _point else 0

_hold_point, _, _hold_rest = os.environ.get("FW_HOLD_POINT", "").partition(":")
_hold_n, _, _hold_path = _hold_rest.partition(":")
_hold_remaining = int(_hold_n or 1) if _hold_point and _hold_path else 0


def crash_point(name: str) -> None:
    global _remaining, _hold_remaining
    if _remaining and name == _point:
        _remaining -= 1
        if _remaining == 0:
            os.kill(os.getpid(), signal.SIGKILL)
    if _hold_remaining and name == _hold_point:
        _hold_remaining -= 1
        if _hold_remaining == 0:
            while not os.path.exists(_hold_path):
                time.sleep(0.05)
