"""Java's dynamic class-data sharing for the JVMs the framework starts: an archive of the
classes a JVM loaded, written as it exits (``-XX:ArchiveClassesAtExit``), that later JVMs of
the same Java and class path map instead of loading, parsing and verifying those classes
again (``-XX:SharedArchiveFile``). Java checks an archive against the build of Java and each
jar of the class path (the file, its size and its modification time) and starts without it
when they differ; an archive is named by the same things here, so another Java or other jars
get an archive of their own.

A replay's driver writes its archive under a keeper that waits for it
(``framework.replay.submit.ClassArchive``). The local broker's JVM runs detached, and nobody
waits for it: ``DetachedArchive`` lets one broker at a time write the archive (a lock its JVM
holds until it exits), and puts the file in place only after a JVM of its own has mapped it
whole: an archive cut short (a JVM killed while writing it, a full disk) crashes the JVM
that maps it (SIGBUS), whatever ``-Xshare`` says."""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

ARCHIVE_DAYS = 14  # an archive unused this long is removed by the next JVM that looks for one
# What CDS says of classes it leaves out of an archive is not the user's concern; errors show.
QUIET = "-Xlog:cds*=error"


def file_identity(files: list[Path | str]) -> str:
    """16 hex digits naming ``files`` as the files they are: real path, size, modification time."""
    lines = []
    for f in files:
        st = os.stat(f)
        lines.append(f"{os.path.realpath(f)}\0{st.st_size}\0{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def remove_unused(directory: Path, *, days: float, keep: Path | None = None, named: str = "") -> None:
    """What is in ``directory`` (but ``keep``; only names matching ``named``, a regular
    expression, when given) and was not modified (or used) for ``days``."""
    limit = time.time() - days * 86_400
    for other in directory.iterdir() if directory.is_dir() else ():
        if other == keep or named and not re.fullmatch(named, other.name):
            continue
        try:
            if other.stat().st_mtime < limit:
                if other.is_dir():
                    shutil.rmtree(other, ignore_errors=True)
                else:
                    other.unlink()
        except OSError:  # another run removed it first
            pass


class DetachedArchive:
    """The class-data archive of a JVM started detached (``java``, class path ``classpath``),
    in ``directory``: ``<key>.jsa`` once there is one, ``<key>.jsa.tmp`` while a JVM writes
    it, ``<key>.jsa.lock`` held by that JVM as long as it runs."""

    def __init__(self, java: str, classpath: list[Path], directory: Path) -> None:
        self.java, self.classpath = java, classpath
        key = file_identity([os.path.realpath(java), *classpath])
        self.path = directory / f"{key}.jsa"
        self.writing = directory / f"{key}.jsa.tmp"
        self._lock = directory / f"{key}.jsa.lock"

    def options(self) -> tuple[list[str], int | None]:
        """The JVM options for a start, and a file descriptor to hand to the JVM (it holds the
        writer's lock; the caller closes its own copy once the JVM runs): the archive mapped
        when there is one; else, unless another JVM writes it now, written at this one's exit;
        else none (the JVM starts as it would without)."""
        self.settle()
        mapped = self.mapped()
        if mapped:
            return mapped, None
        fd = self._take_lock()
        if fd is None:
            return [], None
        self.writing.unlink(missing_ok=True)  # what a writer that did not finish left
        return [f"-XX:ArchiveClassesAtExit={self.writing}", QUIET], fd

    def mapped(self) -> list[str]:
        """The options that map the archive, when there is one (none else: nothing is written)."""
        if not self.path.is_file():
            return []
        try:
            os.utime(self.path)  # used: kept
        except OSError:
            pass
        return [f"-XX:SharedArchiveFile={self.path}", QUIET]

    def settle(self) -> None:
        """After its writer has exited: the archive it wrote goes in place if a JVM maps it
        whole (verifying its checksums), else it is removed; then archives of other keys not
        used for ``ARCHIVE_DAYS`` go. Nothing while the writer runs."""
        if self.writing.is_file() and not self.path.exists():
            fd = self._take_lock()
            if fd is not None:
                try:
                    if self.writing.is_file() and self._maps(self.writing):
                        os.replace(self.writing, self.path)
                    else:
                        self.writing.unlink(missing_ok=True)
                finally:
                    os.close(fd)
        remove_unused(self.path.parent, days=ARCHIVE_DAYS, keep=self.path, named=r".+\.jsa")

    def _maps(self, archive: Path) -> bool:
        cmd = [self.java, "-Xshare:on", "-XX:+VerifySharedSpaces", f"-XX:SharedArchiveFile={archive}",
               "-XX:ErrorFile=/dev/null", "-cp", os.pathsep.join(map(str, self.classpath)), "-version"]
        try:
            return subprocess.run(cmd, capture_output=True, timeout=60, check=False, cwd=archive.parent).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def _take_lock(self) -> int | None:
        """The writer's lock, taken (its descriptor), or None while another process holds it."""
        try:
            self._lock.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self._lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        return fd
