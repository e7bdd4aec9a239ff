"""``framework.replay.launch``: a run whose JVM writes the class archive ends for the user when
the job says its code; the archive is put in place by the keeper only when the JVM ends well.

The "JVM" here is a shell script named as spark-submit's JVM would be told to write the archive
(``-XX:ArchiveClassesAtExit=...``): it prints, says the job's code as job.py does, then holds
its exit (the archive's writing) until the test releases it through a FIFO."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

import pytest

from framework.replay import launch
from framework.replay.submit import ClassArchive

_JVM = """
echo "[replay] done: records read 3"
printf 'progress\\r' >&2
[ -n "$FW_REPLAY_EXIT_MARK" ] && [ "$SAYS" != no ] && echo "$FW_REPLAY_EXIT_MARK $CODE"
read release < "$RELEASE"
printf whole > "${0#-XX:ArchiveClassesAtExit=}"
[ "$SAYS" = no ] && echo "Traceback: it failed" >&2
exit $CODE
"""


def _run(tmp_path: Path, code: int, says: bool = True) -> tuple[ClassArchive, int]:
    """The launch of the script above; returns when ``launch.run`` does (the script is held)."""
    archive = ClassArchive(tmp_path / "k.jsa", tmp_path / "k.jsa.7.tmp")
    release = tmp_path / "release"
    os.mkfifo(release)
    cmd = ["sh", "-c", _JVM, f"-XX:ArchiveClassesAtExit={archive.writing}"]
    env = {**os.environ, "RELEASE": str(release), "CODE": str(code), "SAYS": "yes" if says else "no"}
    if not says:  # the run waits for the script's end: released beforehand, through the FIFO's buffer
        fd = os.open(release, os.O_RDWR | os.O_NONBLOCK)
        os.write(fd, b"go\n")
        result = launch.run(cmd, env, archive)
        os.close(fd)
        return archive, result
    return archive, launch.run(cmd, env, archive)


def _release(tmp_path: Path) -> None:
    with open(tmp_path / "release", "w") as fifo:
        fifo.write("go\n")
    launch.wait_for_archives(tmp_path)


def test_the_command_ends_with_the_jobs_code_while_the_jvm_writes_the_archive_and_its_keeper_puts_it_in_place(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    archive, code = _run(tmp_path, 0)
    out, err = capfd.readouterr()
    assert code == 0
    assert out == "[replay] done: records read 3\n" and err == "progress\r"  # the marker's line is not shown
    fd = os.open(tmp_path, os.O_RDONLY)  # the JVM still runs: its keeper holds the directory
    with pytest.raises(BlockingIOError):
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(fd)
    assert not archive.path.exists()
    _release(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.jsa", "release"]
    assert archive.path.read_bytes() == b"whole"


def test_a_job_that_failed_ends_the_command_with_its_code_and_its_archive_is_not_kept(tmp_path: Path) -> None:
    _archive, code = _run(tmp_path, 1)
    assert code == 1
    _release(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["release"]


def test_a_job_that_does_not_say_its_code_is_waited_for_to_the_end(tmp_path: Path,
                                                                  capfd: pytest.CaptureFixture[str]) -> None:
    _archive, code = _run(tmp_path, 2, says=False)
    _out, err = capfd.readouterr()
    assert code == 2
    assert err.endswith("Traceback: it failed\n")  # what it says last is shown
    assert sorted(p.name for p in tmp_path.iterdir()) == ["release"]  # its keeper is done: nothing left


def test_a_run_that_maps_the_archive_ends_with_the_jobs_code_before_its_jvm_and_marks_the_archive_used(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    archive = ClassArchive(tmp_path / "k.jsa", tmp_path / "k.jsa.7.tmp")
    archive.path.write_bytes(b"whole")
    os.utime(archive.path, (0, 0))
    release = tmp_path / "release"
    os.mkfifo(release)
    jvm = 'echo "$0"; echo "$FW_REPLAY_EXIT_MARK 3"; read go < "$RELEASE"; exit 0'
    cmd = ["sh", "-c", jvm, f"-XX:SharedArchiveFile={archive.path}"]
    assert launch.run(cmd, {**os.environ, "RELEASE": str(release)}, archive) == 3  # the JVM is held
    assert capfd.readouterr().out == f"-XX:SharedArchiveFile={archive.path}\n"
    assert time.time() - archive.path.stat().st_mtime < 86_400  # used: its 14 days start again
    with open(release, "w") as fifo:  # the "JVM" ends
        fifo.write("go\n")
