"""``fw savepoint`` as people meet it, without a broker: its help says what it works on, and
every refusal exits with the code of the CLI's other refusals (1), one line on stderr, where a
wrong argument stays a usage error (2)."""

from __future__ import annotations

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
