"""The state directory (``state.dir``), checked before anything depends on it.

A member that cannot write its state finds out when its first store opens, after it has
joined the group and been given partitions; ``fw doctor`` would see nothing wrong with it
either, only free space. ``unwritable`` creates the directory if it is missing and writes
and deletes a probe file in it, as this process's user: the answer is the one RocksDB would
get, for the member (``framework.runtime.service``, before it joins) and ``fw doctor`` alike.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

from framework.errors import EnvironmentProblem

__all__ = ["ensure_writable", "store_dirs", "unwritable", "writable_fix"]

_PROBE = ".fw-write-probe"


def _user() -> tuple[str, str]:
    """This process's user: as ``chown`` names it, and as a message does (``name (uid N)``;
    the uid alone for a user without a name, a container's arbitrary uid)."""
    uid = os.geteuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid), f"uid {uid}"
    return name, f"{name} (uid {uid})"


def unwritable(state_dir: Path, service: str | None = None) -> str | None:
    """Why this process cannot keep state in ``state_dir`` (in its ``service`` subdirectory,
    when given), creating the directories that are missing; None when it can."""
    state_dir = state_dir.absolute()
    directory = state_dir / service if service else state_dir
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return _said(state_dir, f"cannot create {exc.filename or directory}: {exc.strerror or exc}")
    probe = directory / f"{_PROBE}-{os.getpid()}"
    try:
        probe.write_bytes(b"probe")
        probe.unlink()
    except OSError as exc:
        return _said(state_dir, f"cannot write a file in {directory}: {exc.strerror or exc}")
    return None


def _said(state_dir: Path, why: str) -> str:
    return f"the state directory {state_dir} (state.dir) is not writable by user {_user()[1]}: {why}"


def writable_fix(state_dir: Path) -> str:
    """The fix for an unwritable state directory: the user, or the setting."""
    name = _user()[0]
    return (f"let {name} write there (e.g. chown -R {name} {state_dir.absolute()}), or set FW_STATE__DIR "
            "(state.dir in the configuration file) to a directory it may write")


def ensure_writable(state_dir: Path, service: str | None = None) -> None:
    """``EnvironmentProblem`` (one line: what, who, the fix) unless ``unwritable`` finds nothing."""
    why = unwritable(state_dir, service)
    if why is not None:
        raise EnvironmentProblem(f"{why}. Fix: {writable_fix(state_dir)}")


def store_dirs(state_dir: Path, service: str) -> list[str]:
    """The stores of ``service`` this host keeps in ``state_dir`` (its subdirectories
    ``<service>/<store>``: the stores of every release that ran here, a global table's
    further copies ``<table>@<n>`` included), by name."""
    directory = state_dir.absolute() / service
    if not directory.is_dir():
        return []
    return sorted(d.name for d in directory.iterdir() if d.is_dir())
