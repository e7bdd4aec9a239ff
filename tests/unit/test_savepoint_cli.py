"""``fw savepoint`` as people meet it, without a broker: its help says what it works on, and
every refusal exits with the code of the CLI's other refusals (1), one line on stderr, where a
wrong argument stays a usage error (2)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from framework.cli import cli, main
from framework.savepoint.files import PART
from framework.savepoint.manifest import MANIFEST
from tests.unit.test_savepoint_verify import _savepoint

TARGET = "tests.unit.test_savepoint_files:_pipeline"  # service 'shop'


def test_the_help_says_a_running_service_can_be_savepointed() -> None:
    shown = CliRunner().invoke(cli, ["savepoint", "--help"])
    assert shown.exit_code == 0, shown.output
    said = " ".join(shown.output.split())
    assert "Snapshot a service's state and positions (running: its members held at a checkpoint meanwhile; or " \
           "stopped)" in said and "stopped service's" not in said
    restore = " ".join(CliRunner().invoke(cli, ["savepoint", "restore", "--help"]).output.split())
    assert "--dry-run Read and check every file as a restore does, show what would change; change nothing." in restore


def _fw(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["fw", *args])
    monkeypatch.setenv("FW_BOOTSTRAP_SERVERS", "127.0.0.1:1")  # never reached: each refusal comes first
    with pytest.raises(SystemExit) as ended:
        main()
    return int(ended.value.code or 0), capsys.readouterr().err


def _other_service(path: Path) -> None:
    text = (path / MANIFEST).read_text()
    (path / MANIFEST).write_text(text.replace('"service": "shop"', '"service": "shop-2"'))


def _dropped_store(path: Path) -> None:
    text = (path / MANIFEST).read_text()
    (path / MANIFEST).write_text(text.replace('"per-minute": {', '"per-hour": {', 1))  # a store the pipeline lacks


@pytest.mark.parametrize(("damage", "line"), [
    (lambda p: (p / "stores" / "per-minute" / PART).write_bytes(b"PAR1"), "is damaged: "),
    (lambda p: (p / MANIFEST).write_text("{"), "is damaged (JSONDecodeError: "),
    (_other_service, "is of service 'shop-2', not of 'shop'"),
    (_dropped_store, "holds state the pipeline of 'shop' no longer has: store per-hour"),
], ids=["damaged-file", "damaged-manifest", "other-service", "dropped-state"])
def test_every_refusal_of_a_restore_exits_1_with_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], damage: object,
        line: str) -> None:
    _savepoint(tmp_path)
    damage(tmp_path)  # type: ignore[operator]
    for args in (["--dry-run"], []):
        code, err = _fw(monkeypatch, capsys, "savepoint", "restore", TARGET, str(tmp_path), *args)
        assert (code, err.count("\n"), err.startswith("error: ")) == (1, 1, True), err
        assert line in err


def test_a_savepoint_into_a_directory_not_empty_is_a_refusal_and_a_wrong_argument_a_usage_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("")
    code, err = _fw(monkeypatch, capsys, "savepoint", "create", TARGET, "--path", str(tmp_path / "taken"))
    assert code == 1
    assert err == (f"error: {tmp_path / 'taken'} exists and is not empty: a savepoint goes to a directory of its "
                   "own. Fix: name another --path, or leave it out (a new directory under FW_SAVEPOINT_DIR)\n")
    code, err = _fw(monkeypatch, capsys, "savepoint", "restore", TARGET)
    assert code == 2 and err.startswith("error: Missing argument 'PATH'"), err
    code, err = _fw(monkeypatch, capsys, "savepoint", "restore", "shop", str(tmp_path))
    assert (code, err) == (2, ("error: fw savepoint restore needs the pipeline's code for its stores, topics and "
                              "serdes, and there is no services/shop/pipeline.py here: give SERVICE as module:pipeline "
                              "(e.g. services.shop.pipeline:pipeline), or run it from the project's root\n")), err


@pytest.mark.parametrize(("damage", "reason", "fix"), [
    (lambda p: (p / MANIFEST).write_text("{"),
     ("its manifest is damaged (JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 "
      "(char 1))"), "copy it again from where it was made, or delete its directory"),
    (lambda p: (p / MANIFEST).write_text('{"format": 1, "stores": {}}'),
     "its manifest is damaged (KeyError: 'offsets')", "copy it again from where it was made, or delete its directory"),
    (lambda p: (p / MANIFEST).write_text('{"format": 2}'),
     "its manifest is of savepoint format 2, this version reads format 1",
     "list and restore it with the release that made it"),
], ids=["not-json", "field-missing", "another-format"])
def test_a_savepoint_whose_manifest_does_not_read_is_listed_with_the_reason_and_the_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], damage: object,
        reason: str, fix: str) -> None:
    root = tmp_path / "savepoints"
    good, bad = root / "shop" / "20261122T120000.000Z", root / "shop" / "20261123T120000.000Z"
    _savepoint(good)
    _savepoint(bad)
    damage(bad)  # type: ignore[operator]
    monkeypatch.setenv("FW_SAVEPOINT_DIR", str(root))
    line = f"error: savepoint {bad} cannot be read: {reason}. Fix: {fix}\n"

    code, err = _fw(monkeypatch, capsys, "savepoint", "list", "shop")
    assert (code, err) == (1, line)  # as a restore of it exits: 1, one line on stderr
    table = CliRunner().invoke(cli, ["savepoint", "list"], env={"FW_SAVEPOINT_DIR": str(root), "COLUMNS": "400"})
    assert (table.exit_code, table.stderr) == (1, line)
    shown = table.stdout.splitlines()  # the table lists both
    assert [r.split()[:3] for r in shown[1:3]] == [[str(good), "shop", "2026-11-23T12:00:00.000+00:00"],
                                                   [str(bad), "shop", "unreadable"]]
    assert shown[3] == f"2 savepoints under {root}, 1 of them unreadable"

    listed = CliRunner().invoke(cli, ["savepoint", "list", "--json"], env={"FW_SAVEPOINT_DIR": str(root)})
    assert listed.exit_code == 1
    [first, second] = json.loads(listed.stdout)
    assert (first["path"], first["service"], "unreadable" in first) == (str(good), "shop", False)
    assert (second["path"], second["service"], second["unreadable"]) == (str(bad), "shop", reason)
    assert listed.stderr == line


def test_savepoints_that_all_read_are_listed_with_exit_0(tmp_path: Path) -> None:
    _savepoint(tmp_path / "shop" / "20261122T120000.000Z")
    listed = CliRunner().invoke(cli, ["savepoint", "list"], env={"FW_SAVEPOINT_DIR": str(tmp_path)})
    assert (listed.exit_code, listed.stderr, listed.stdout.splitlines()[-1]) == (
        0, "", f"1 savepoint under {tmp_path}")
