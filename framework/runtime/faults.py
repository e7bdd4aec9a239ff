"""Crash points for recovery tests: ``FW_CRASH_POINT=<point>:<n>`` SIGKILLs this process the
n-th time it reaches ``<point>``, so a test can crash a real process at an exact step of a
checkpoint or a restore. Points: ``after_changelogs``, ``after_flush``, ``after_commit``
(before the RocksDB write), ``after_state_write``, ``restore_batch``. Unset: no effect; the
check runs only at checkpoint and restore steps, never per record."""

from __future__ import annotations

import os
import signal

_spec = os.environ.get("FW_CRASH_POINT", "")
_point, _, _n = _spec.partition(":")
_remaining = int(_n or 1) if _point else 0


def crash_point(name: str) -> None:
    global _remaining
    if _remaining and name == _point:
        _remaining -= 1
        if _remaining == 0:
            os.kill(os.getpid(), signal.SIGKILL)
