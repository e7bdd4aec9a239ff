"""The code blocks of README.md and docs/*.md are right: the marked ones run, the others check.

- Every page's blocks marked runnable (``<!-- run -->``, the convention of
  ``tests/docblocks.py``) run in page order, in a copy of this repository (what they write,
  such as ``fw new service``, lands there), on the test broker (``FW_BOOTSTRAP_SERVERS``,
  so ``fw broker start`` only reports that cluster). docs/tutorial.md has a test of its
  own, tests/integration/test_tutorial.py.
- Every ``python`` block compiles, fragments included; every ``json`` block parses, and
  every ``toml`` block loads as the framework's configuration.
- Every ``fw`` command of a ``bash`` block or a ``$ fw ...`` transcript line parses against
  the click CLI: command, subcommand, options, their values and the arguments; a
  ``module:pipeline`` target names a module of this repository that defines it.
- Every ``FW_*`` setting the pages name is one the code reads, and every link between the
  pages reaches its file and heading.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.docblocks import (
    ROOT,
    SHELLS,
    TRANSCRIPTS,
    Block,
    Runner,
    check_fw_command,
    clean_env,
    doc_pages,
    fw_commands,
    parse,
)

PAGES = [p for p in doc_pages() if p.name != "tutorial.md"]
RUNNABLE = [p for p in PAGES if parse(p).steps]


def _blocks() -> list[Block]:
    return [b for p in doc_pages() for b in parse(p).blocks]


@pytest.fixture(scope="module")
def repo_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This repository's files (tracked, and new ones not ignored) in a temporary directory."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    copy = tmp_path_factory.mktemp("docs") / "repo"
    for rel in filter(None, listed):
        if (ROOT / rel).is_file():
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, copy / rel)
    return copy


@pytest.mark.parametrize("page", RUNNABLE, ids=[p.name for p in RUNNABLE])
def test_the_runnable_blocks_of_a_page_run(page: Path, repo_copy: Path, kafka_bootstrap: str,
                                           tmp_path: Path) -> None:
    # A page's blocks may write (a new service, a project beside the checkout): each page
    # gets its own copy of the copy.
    work = tmp_path / "repo"
    shutil.copytree(repo_copy, work, symlinks=True)
    Runner(work, clean_env(FW_BOOTSTRAP_SERVERS=kafka_bootstrap), tmp_path / "blocks").run_all(parse(page).steps)


def test_there_are_runnable_blocks_beyond_the_tutorial() -> None:
    runnable = [s for p in PAGES for s in parse(p).steps]
    assert {s.lang for s in runnable if isinstance(s, Block)} >= {"bash", "python"}, runnable


def test_every_python_block_compiles() -> None:
    blocks = [b for b in _blocks() if b.lang == "python"]
    assert len(blocks) > 10
    for block in blocks:
        compile(block.text, block.where, "exec")  # a SyntaxError names the page and line


def test_every_json_block_parses_and_every_toml_block_is_a_configuration(tmp_path: Path) -> None:
    from framework.config import Config

    checked = 0
    for block in _blocks():
        if block.lang == "json":
            json.loads(block.text)
        elif block.lang == "toml":
            (tmp_path / "fw.toml").write_text(block.text)
            Config.load(tmp_path / "fw.toml", env={})  # a ConfigError names the setting
        else:
            continue
        checked += 1
    assert checked >= 4, checked


def test_every_fw_command_in_the_docs_exists_with_its_options() -> None:
    checked, wrong = 0, []
    for block in _blocks():
        if block.lang not in (*SHELLS, *TRANSCRIPTS):
            continue
        for argv in fw_commands(block):
            checked += 1
            # The tutorial's services live in the project it makes; its test runs them.
            in_repo = block.path.name != "tutorial.md"
            why = check_fw_command(argv) or (_target_missing(argv) if in_repo else None)
            if why:
                wrong.append(f"{block.where}: {why}")
    assert checked > 50, checked
    assert not wrong, "\n".join(wrong)


def _target_missing(argv: list[str]) -> str | None:
    """Why a ``services.<name>.pipeline:<attr>`` argument does not name a definition of this
    repository (None if it does, or if there is none)."""
    for arg in argv:
        m = re.fullmatch(r"((?:services|tests)(?:\.\w+)+):(\w+)", arg)
        if not m:
            continue
        module = ROOT / (m[1].replace(".", "/") + ".py")
        if not module.is_file():
            return f"{arg}: no module {module.relative_to(ROOT)}"
        if not re.search(rf"^(?:{m[2]}\s*[:=]|def {m[2]}\()", module.read_text(), re.MULTILINE):
            return f"{arg}: {module.relative_to(ROOT)} defines no {m[2]!r}"
    return None


def test_the_cli_check_catches_drift() -> None:
    assert check_fw_command(["fw", "topics", "list", "--json"]) is None
    assert check_fw_command(["fw", "topic", "list"])  # no such command
    assert check_fw_command(["fw", "topics", "purge", "numbers"])  # no such subcommand
    assert check_fw_command(["fw", "topics", "list", "--format", "json"])  # no such option
    assert check_fw_command(["fw", "new", "service", "x", "--template", "sliding"])  # not a choice
    assert check_fw_command(["fw", "status"])  # its argument is missing
    assert check_fw_command(["fw", "dead-letters", "services.x.pipeline:pipeline", "--json"]) is None  # its list
    assert check_fw_command(["fw", "dead-letters", "redrive", "s:p", "--step", "a", "--dry-run"]) is None
    assert check_fw_command(["fw", "dead-letters", "s:p", "--dry-run"])  # the listing has no --dry-run
    assert _target_missing(["fw", "run", "services.nothing_here.pipeline:pipeline"])


def _settings_read_by_the_code() -> str:
    files = [*ROOT.glob("framework/**/*.py"), *ROOT.glob("framework/**/*.j2"), *ROOT.glob("scripts/*")]
    return "\n".join(p.read_text(errors="replace") for p in files if p.is_file())


def test_every_setting_the_docs_name_is_read_by_the_code() -> None:
    from framework.config import Config

    code = _settings_read_by_the_code()
    sections = {name: set(type(getattr(Config(), name)).__dataclass_fields__)
                for name in ("kafka", "processing", "state", "observe")}
    wrong = []
    for page in doc_pages():
        for name in sorted(set(re.findall(r"\bFW_[A-Z0-9_]*[A-Z0-9]", page.read_text()))):
            m = re.fullmatch(r"FW_(KAFKA|PROCESSING|STATE|OBSERVE)__([A-Z0-9_]+)", name)
            if m:
                if m[2].lower() not in sections[m[1].lower()]:
                    wrong.append(f"{page.name}: {name}: {m[1].lower()} has no setting {m[2].lower()!r}")
            elif re.fullmatch(r"FW_KAFKA_(SECURITY|CONSUMER|PRODUCER)(__[A-Z0-9_]+)?", name):
                continue  # librdkafka settings passed through
            elif name not in code:
                wrong.append(f"{page.name}: {name} is read nowhere in framework/ or scripts/")
    assert not wrong, "\n".join(wrong)


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lowercase, punctuation dropped, spaces to dashes."""
    anchors = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*$", _outside_fences(page.read_text()), re.MULTILINE):
        text = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower())
        anchors.add(text.replace(" ", "-"))
    return anchors


def _outside_fences(text: str) -> str:
    return re.sub(r"^(```|~~~).*?^\1\s*$", "", text, flags=re.MULTILINE | re.DOTALL)


def test_every_link_between_pages_reaches_its_file_and_heading() -> None:
    wrong = []
    for page in doc_pages():
        for target in re.findall(r"\]\(([^)\s]+)\)", _outside_fences(page.read_text())):
            if re.match(r"^[a-z]+:", target):
                continue  # http:, mailto:
            file_part, _, anchor = target.partition("#")
            linked = (page.parent / file_part).resolve() if file_part else page
            if not linked.exists():
                wrong.append(f"{page.name}: ({target}): no file {file_part}")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                wrong.append(f"{page.name}: ({target}): no heading #{anchor} in {linked.name}")
    assert not wrong, "\n".join(wrong)
