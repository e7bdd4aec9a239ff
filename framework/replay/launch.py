"""Running a replay's ``spark-submit`` command: the command ends when the job has, not when
Spark has stopped and its JVM has exited; on a machine's first replay that JVM's exit writes
the class archive (``submit.ClassArchive``), which no one waits for.

``fw replay`` relays the JVM's output; the job, told so by ``EXIT_MARK_ENV``, ends its output
with a marker line and its exit code once its outputs are committed and its summary printed
(before ``sc.stop()``). There ``fw replay`` stops relaying and exits with that code while the
JVM stops Spark and exits on its own: 0.5 s, or, with ``-XX:ArchiveClassesAtExit``, 15-25 s on
two cores. Nothing of the caller's is held (the JVM writes to pipes only ``fw replay`` read).
A job that fails without saying its code (a traceback) is waited for to the end, as before.

A JVM that writes the archive is started through a keeper (``python -m
framework.replay.launch ARCHIVE WRITING -- COMMAND``): the JVM's parent, which waits for it,
puts the archive in its place only when the JVM exited cleanly (``ClassArchive.keep``), and
exits with it. The keeper holds a shared lock on the archive's directory while it waits:
``wait_for_archives`` takes it exclusively, to wait for every archive being written there.
"""

from __future__ import annotations

import fcntl
import os
import selectors
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from framework.replay.submit import ClassArchive

EXIT_MARK_ENV = "FW_REPLAY_EXIT_MARK"  # job.py reads it (it imports nothing of this module)
EXIT_MARK = "\x1e[fw-replay-exit]"  # a control character first: no output of a job starts so


# What the driver's JVM says on stderr before log4j can be asked: Spark's launcher starts it
# with ``--add-modules=jdk.incubator.vector``, and Java announces an incubator module on every
# start, with no option to keep it quiet. Not relayed, unless ``fw replay --verbose``.
JVM_NOISE = (b"WARNING: Using incubator modules: ",)


def run(cmd: list[str], env: dict[str, str], archive: ClassArchive | None, *, to_stderr: bool = False,
        verbose: bool = False) -> int:
    """Runs ``cmd`` (spark-submit) and returns the job's exit code as soon as the job says it:
    Spark's stop and the JVM's exit go on without the command (0.5 s; a first run's archive
    15-25 s). A JVM that writes ``archive`` is started through a keeper; a run that maps it
    marks it used. A job that never says its code (it raised; a driver that runs elsewhere,
    ``spark.submit.deployMode=cluster``) is waited for to its end. ``to_stderr``: all of the
    job's output goes to this command's stderr (a step of a command whose stdout is its own).
    ``verbose``: the JVM's ``JVM_NOISE`` lines are relayed too."""
    writes = archive is not None and archive.written_by(cmd)
    if writes and archive is not None:
        cmd = [sys.executable, "-m", __name__, str(archive.path), str(archive.writing), "--", *cmd]
    proc = subprocess.Popen(cmd, env={**env, EXIT_MARK_ENV: EXIT_MARK}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    said = relay(proc.stdout, proc.stderr, sys.stderr.buffer if to_stderr else sys.stdout.buffer,
                 sys.stderr.buffer, drop=() if verbose else JVM_NOISE)
    proc.stdout.close()  # the JVM's later output (its exit's) goes nowhere: it ignores a closed pipe
    proc.stderr.close()
    code = said if said is not None else proc.wait()  # said: the JVM (and its keeper) end on their own
    if archive is not None and not writes:
        archive.keep(code == 0)
    return code


def relay(out: IO[bytes], err: IO[bytes], to_out: IO[bytes], to_err: IO[bytes], *,
          drop: tuple[bytes, ...] = ()) -> int | None:
    """Copies ``out`` and ``err`` to ``to_out`` and ``to_err`` as they come (a progress line
    refreshed in place arrives without a newline) until ``out`` says ``EXIT_MARK`` and a code
    on a line: returns it, after what ``err`` holds already; None when both ended without it.
    The marker's line is not copied, nor a line of ``err`` that starts with one of ``drop``."""
    mark = EXIT_MARK.encode()
    pending = b""  # of ``out``: what could be the start of the marker
    errors = _Dropping(to_err, drop)
    streams = selectors.DefaultSelector()
    for stream, target in ((out, to_out), (err, errors)):
        os.set_blocking(stream.fileno(), False)
        streams.register(stream, selectors.EVENT_READ, target)
    while streams.get_map():
        for key, _ in streams.select():
            chunk = os.read(key.fd, 65536)
            if not chunk:
                streams.unregister(key.fileobj)
                continue
            if key.fileobj is not out:
                errors.write(chunk)
                continue
            pending += chunk
            at = pending.find(mark)
            if at >= 0 and b"\n" in pending[at:]:
                _write(to_out, pending[:at])
                line = pending[at + len(mark):].split(b"\n", 1)[0]
                _drain(err, errors)
                errors.close()
                return int(line.strip() or 1)
            keep = at if at >= 0 else _partial(pending, mark)
            _write(to_out, pending[:keep])
            pending = pending[keep:]
    _write(to_out, pending)
    errors.close()
    return None


class _Dropping:
    """``target``, without the lines that start with one of ``drop``: a line is held until its
    end (or the stream's) when it could still be one of them, and passes at once when it cannot."""

    def __init__(self, target: IO[bytes], drop: tuple[bytes, ...]) -> None:
        self.target, self.drop, self.held = target, drop, b""

    def write(self, data: bytes) -> None:
        if not self.drop:
            _write(self.target, data)
            return
        data, self.held = self.held + data, b""
        kept = []
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n") and any(d.startswith(line) or line.startswith(d) for d in self.drop):
                self.held = line  # its end decides
            elif not line.startswith(self.drop):
                kept.append(line)
        _write(self.target, b"".join(kept))

    def close(self) -> None:
        if self.held and not self.held.startswith(self.drop):
            _write(self.target, self.held)
        self.held = b""


def _partial(data: bytes, mark: bytes) -> int:
    """Where a prefix of ``mark`` ends ``data``, if one does (else its length)."""
    for n in range(min(len(mark) - 1, len(data)), 0, -1):
        if data.endswith(mark[:n]):
            return len(data) - n
    return len(data)


def _drain(stream: IO[bytes], target: _Dropping) -> None:
    """What ``stream`` (non-blocking) holds now, to ``target``."""
    try:
        while chunk := os.read(stream.fileno(), 65536):
            target.write(chunk)
    except BlockingIOError:
        pass


def _write(target: IO[bytes], data: bytes) -> None:
    if data:
        target.write(data)
        target.flush()


def wait_for_archives(directory: Path) -> None:
    """Returns when no keeper is writing an archive in ``directory`` (e.g. before it is
    removed, or to measure a run that maps the archive)."""
    if not directory.is_dir():
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    finally:
        os.close(fd)


def keep(path: Path, writing: Path, cmd: Sequence[str]) -> int:
    """The keeper: runs ``cmd`` (whose JVM writes ``writing``), holding a shared lock on the
    archive's directory; then ``ClassArchive.keep``. Returns the command's exit code. An
    interrupt is the JVM's to act on (it is in the same process group): the keeper stays to
    remove what it leaves (a handler, not SIG_IGN, which the JVM would inherit)."""
    signal.signal(signal.SIGINT, lambda *_: None)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        code = subprocess.run(list(cmd), check=False).returncode
        ClassArchive(path, writing).keep(code == 0)
    finally:
        os.close(fd)  # the lock goes with it
    return code


if __name__ == "__main__":
    _path, _writing, _dashes, *_cmd = sys.argv[1:]
    sys.exit(keep(Path(_path), Path(_writing), _cmd))
