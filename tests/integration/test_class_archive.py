"""The local broker's class-data archive (``framework.classdata.DetachedArchive``) with real
Java and the Kafka jars: one JVM at a time writes it as it exits, the archive goes in place
only once a JVM has mapped it whole, and one cut short is removed rather than handed to a
broker (mapping it would crash that JVM)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from framework.broker.local import LocalBroker
from framework.classdata import DetachedArchive


def _run(java: str, options: list[str], jars: list[Path], lock: int | None = None) -> subprocess.CompletedProcess[str]:
    """A short JVM on the broker's class path: Kafka's storage tool printing a new cluster id."""
    cmd = [java, *options, "-cp", os.pathsep.join(map(str, jars)), "kafka.tools.StorageTool", "random-uuid"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False,
                          pass_fds=() if lock is None else (lock,))


def _written(tmp_path: Path) -> tuple[str, list[Path], DetachedArchive]:
    """Java, the broker's jars, and an archive of theirs a JVM has written (not yet in place):
    the JVM was started with the options of the first start, which took the writer's lock."""
    java = shutil.which("java")
    assert java, "Java is needed by the local broker"
    jars = sorted(LocalBroker(tmp_path / "broker").fetch().glob("*.jar"))
    archive = DetachedArchive(java, jars, tmp_path / "cds")
    options, lock = archive.options()
    assert lock is not None and any(o.startswith("-XX:ArchiveClassesAtExit=") for o in options), options
    # another broker starting meanwhile neither writes nor maps: it starts as it did without
    assert DetachedArchive(java, jars, tmp_path / "cds").options() == ([], None)
    try:
        done = _run(java, options, jars, lock)
    finally:
        os.close(lock)
    assert done.returncode == 0 and done.stdout.strip(), done.stdout + done.stderr
    assert archive.writing.is_file() and not archive.path.exists()
    return java, jars, archive


def test_one_jvm_writes_the_archive_it_goes_in_place_once_mapped_and_the_next_jvm_maps_it(tmp_path: Path) -> None:
    java, jars, archive = _written(tmp_path)

    archive.settle()
    assert archive.path.is_file() and not archive.writing.exists()
    mapped, lock = DetachedArchive(java, jars, tmp_path / "cds").options()
    assert lock is None and mapped[0] == f"-XX:SharedArchiveFile={archive.path}", mapped
    done = _run(java, ["-Xshare:on", *mapped], jars)  # on: a JVM that could not map it would fail
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_archive_cut_short_is_removed_not_put_in_place(tmp_path: Path) -> None:
    _, _, archive = _written(tmp_path)
    whole = archive.writing.read_bytes()
    archive.writing.write_bytes(whole[:len(whole) // 2])  # as a JVM killed while writing it leaves it

    archive.settle()
    assert not archive.path.exists() and not archive.writing.exists()
    assert not list(tmp_path.rglob("hs_err_pid*")), "the JVM that tried it left no crash report"
    options, lock = archive.options()  # the next start writes it anew
    assert lock is not None and any(o.startswith("-XX:ArchiveClassesAtExit=") for o in options)
    os.close(lock)
