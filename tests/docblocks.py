"""Code blocks of the Markdown docs: which are runnable, and how a test runs them.

The convention, for README.md, docs/*.md and docs/tutorial.md alike. A fenced block runs
when an HTML comment (invisible on the rendered page) stands on the line right before
its opening fence; every other block is documentation only::

    <!-- run -->                    run it; it must exit 0
    <!-- run: exit=2 expect="RE" --> the exit status it must have, and a regular
                                     expression its output (stdout and stderr) must match
    <!-- run: until="RE" -->         run it again until its output matches: the records it
                                     shows are still to come (at most ``timeout`` seconds,
                                     default 60, polled every half second)
    <!-- run: background=NAME ready="http:/ready" -->
                                     a command that runs until stopped (a service): start it
                                     in the background and go on once it is ready:
                                     ``http:PATH`` answers 200 at the first http://host:port
                                     address it prints, or ``log:RE`` matches its output
    <!-- stop: NAME -->              standalone: Ctrl-C (SIGINT) to that background block; it
                                     must exit 0 (``exit=N`` otherwise)
    <!-- excerpt: FILE -->           not run: the block's non-blank lines are lines of FILE
                                     (relative to the working directory), in order

Option ``timeout=SECONDS`` applies to each (default 300 for a command, 60 for waits).
The blocks of one page run in page order, as a reader types them:

- ``bash``/``sh`` blocks run with bash (``set -eo pipefail``) in the working directory the
  previous block left (a ``cd`` carries over; shell variables do not);
- ``python`` blocks run in one interpreter namespace per page (a later block may use what
  an earlier one defined); a block that defines ``test_*`` functions without parameters
  has them called, as pytest would.

Checks for the blocks that do not run: every ``python`` block compiles, and every ``fw``
command in a ``bash``/``sh`` block (and on a ``$ fw ...`` line of a ``text``/``console``
transcript) parses against the click CLI: its command and subcommand exist, and so do its
options, their values' types and choices, and its arguments.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[1]
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_DIRECTIVE = re.compile(r"^<!--\s*(?P<kind>run|stop|excerpt)(?::(?P<options>.*?))?\s*-->\s*$")
SHELLS = ("bash", "sh", "shell")
TRANSCRIPTS = ("text", "console")


@dataclass(frozen=True)
class Directive:
    """A ``<!-- run ... -->``, ``<!-- stop ... -->`` or ``<!-- excerpt ... -->`` comment and
    its options (a bare word is the ``name``: the background block, or the file)."""

    kind: str
    options: dict[str, str]
    line: int

    @property
    def name(self) -> str:
        return self.options.get("background") or self.options.get("name", "")


@dataclass(frozen=True)
class Block:
    """A fenced code block: ``lang`` is the first word of its info string."""

    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    run: Directive | None = None  # the run or excerpt comment before it

    @property
    def where(self) -> str:
        try:
            shown = self.path.relative_to(ROOT)
        except ValueError:
            shown = self.path
        return f"{shown}:{self.line}"


@dataclass
class Page:
    """A Markdown page: its blocks and, in page order, the steps to run."""

    path: Path
    blocks: list[Block] = field(default_factory=list)
    steps: list[Block | Directive] = field(default_factory=list)  # runnable blocks and stops


def _options(text: str, line: int, path: Path) -> dict[str, str]:
    options: dict[str, str] = {}
    for token in shlex.split(text or ""):
        key, eq, value = token.partition("=")
        if not eq:
            options.setdefault("name", key)
            continue
        options[key] = value
    unknown = set(options) - {"exit", "expect", "until", "background", "ready", "timeout", "name"}
    if unknown:
        raise ValueError(f"{path}:{line}: unknown run option(s) {sorted(unknown)}")
    return options


def parse(path: Path) -> Page:
    """The page's fenced blocks and run steps. A ``run`` comment must stand right before a
    fence; a ``stop`` comment stands alone."""
    page = Page(path)
    lines = path.read_text().splitlines()
    pending: Directive | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        directive = _DIRECTIVE.match(line.strip())
        if directive:
            d = Directive(directive["kind"], _options(directive["options"], i + 1, path), i + 1)
            if d.kind == "stop":
                page.steps.append(d)
            else:
                pending = d
            i += 1
            continue
        fence = _FENCE.match(line)
        if not fence:
            if pending is not None and line.strip():
                raise ValueError(f"{path}:{pending.line}: a run comment must stand right before a code fence")
            i += 1
            continue
        marker, info = fence["fence"], fence["info"].strip()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not (lines[j].strip().startswith(marker[0] * len(marker))
                                      and not lines[j].strip().strip(marker[0])):
            body.append(lines[j])
            j += 1
        block = Block(path, i + 1, (info.split() or [""])[0].lower(), "\n".join(body) + "\n", pending)
        page.blocks.append(block)
        if pending is not None:
            page.steps.append(block)
        pending = None
        i = j + 1
    return page


def doc_pages() -> list[Path]:
    """README.md and every page of docs/ (docs/tutorial.md included)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


# -- fw commands in shell text ---------------------------------------------------------

_SEPARATORS = {"|", "||", "&&", ";", "&", "(", ")", "|&", ";;"}
_REDIRECTS = {">", ">>", "<", "<<", "<<<", ">&", "&>", "<&", ">|"}


def fw_commands(block: Block) -> list[list[str]]:
    """The argument lists of the ``fw`` commands in a shell block (or on ``$ `` lines of a
    transcript): after any ``NAME=value`` assignments, up to a pipe, ``&&``, ``;`` or a
    redirection; ``$(fw ...)`` substitutions included."""
    if block.lang in TRANSCRIPTS:
        text = "\n".join(ln[2:] for ln in block.text.splitlines() if ln.startswith("$ "))
    elif block.lang in SHELLS:
        text = _without_heredocs(block.text)
    else:
        return []
    text = text.replace("\\\n", " ")
    found: list[list[str]] = []
    for inner in re.findall(r"\$\(([^()]*)\)", text):
        found += _split_commands(inner)
    return found + _split_commands(re.sub(r"\$\([^()]*\)", "X", text))


def _without_heredocs(text: str) -> str:
    out: list[str] = []
    end: str | None = None
    for line in text.splitlines():
        if end is not None:
            if line.strip() == end:
                end = None
            continue
        out.append(line)
        m = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line)
        if m:
            end = m[1]
    return "\n".join(out)


def _split_commands(text: str) -> list[list[str]]:
    commands: list[list[str]] = []
    for line in text.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
        lexer.commenters = "#"
        lexer.wordchars += ":,@%+[]{}!^"
        try:
            tokens = list(lexer)
        except ValueError:  # an unclosed quote: a string that goes on over lines
            tokens = line.split("#", 1)[0].split()
        current: list[str] = []
        skip_next = False
        for token in tokens:
            if skip_next:
                skip_next = False
            elif token in _SEPARATORS:
                commands.append(current)
                current = []
            elif token in _REDIRECTS:
                if current and current[-1].isdigit():
                    current.pop()  # 2> and the like
                skip_next = True
            else:
                current.append(token)
        commands.append(current)
    fw: list[list[str]] = []
    for words in commands:
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            words = words[1:]
        if words and words[0] == "fw":
            fw.append(words)
    return fw


def check_fw_command(argv: list[str]) -> str | None:
    """None when ``argv`` (``["fw", ...]``) parses against the click CLI, else why not."""
    from framework.cli import cli

    command: click.Command = cli
    names = ["fw"]
    args = list(argv[1:])
    parent: click.Context | None = None
    while isinstance(command, click.Group):
        ctx = click.Context(command, info_name=names[-1], parent=parent)
        default = getattr(command, "default_command", None)  # `fw dead-letters SERVICE` is its `list`
        if default is not None and (not args or args[0] not in command.list_commands(ctx)) \
                and args[:1] not in (["--help"], ["-h"]):
            args.insert(0, default)
        if not args or args[0].startswith("-"):
            if args and args[0] in ("--help", "--version"):
                return None
            return f"`{' '.join(names)}` needs a subcommand: {', '.join(command.list_commands(ctx))}"
        sub = command.get_command(ctx, args[0])
        if sub is None:
            return f"`{' '.join(names)}` has no subcommand {args[0]!r}: {', '.join(command.list_commands(ctx))}"
        names.append(args.pop(0))
        command, parent = sub, ctx
    try:
        command.make_context(names[-1], args, parent=parent)
    except click.exceptions.Exit:
        return None
    except click.BadParameter as exc:
        if isinstance(getattr(exc.param, "type", None), click.Path):
            return None  # a path the example names need not exist here
        return f"`{shlex.join(argv)}`: {exc.format_message()}"
    except click.ClickException as exc:
        return f"`{shlex.join(argv)}`: {exc.format_message()}"
    return None


# -- running -----------------------------------------------------------------------------


@dataclass
class Background:
    block: Block
    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


class Runner:
    """Runs a page's steps in order: shell blocks with bash, in a working directory that a
    ``cd`` moves, python blocks in one namespace; background blocks until stopped."""

    def __init__(self, cwd: Path, env: dict[str, str], workdir: Path) -> None:
        self.cwd = cwd
        self.env = env
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.background: dict[str, Background] = {}
        self.python: list[tuple[str, str]] = []  # the page's python blocks so far
        self.transcript: list[str] = []
        self._n = 0

    # -- steps -----------------------------------------------------------------------

    def run_all(self, steps: Iterable[Block | Directive]) -> None:
        """Run ``steps`` in order; every background command must have been stopped by then.
        On failure the transcript's tail is printed; background commands are killed either way."""
        try:
            for step in steps:
                self.run(step)
            assert not self.background, f"background blocks never stopped: {sorted(self.background)}"
        except BaseException:
            print(self.transcript_tail())
            raise
        finally:
            self.kill_all()

    def run(self, step: Block | Directive) -> str:
        if isinstance(step, Directive):
            return self.stop(step)
        assert step.run is not None
        if step.run.kind == "excerpt":
            return self.check_excerpt(step)
        if step.lang == "python":
            return self.run_python(step)
        if step.lang not in SHELLS:
            raise AssertionError(f"{step.where}: a runnable block must be bash, sh or python, not {step.lang!r}")
        if "background" in step.run.options:
            return self.start_background(step)
        return self.run_shell(step)

    def run_shell(self, block: Block) -> str:
        assert block.run is not None
        opts = block.run.options
        timeout = float(opts.get("timeout", 300 if "until" not in opts else 60))
        if "until" in opts:
            deadline = time.monotonic() + timeout
            while True:
                done = self._bash(block, min(300.0, timeout))
                if done.returncode == 0 and re.search(opts["until"], done.stdout, re.MULTILINE):
                    return done.stdout
                if time.monotonic() > deadline:
                    raise AssertionError(f"{block.where}: output did not match {opts['until']!r} within "
                                         f"{timeout}s; last output:\n{done.stdout[-4000:]}")
                time.sleep(0.5)  # poll: the records it waits for are produced elsewhere
        done = self._bash(block, timeout)
        want = int(opts.get("exit", 0))
        if done.returncode != want:
            raise AssertionError(f"{block.where}: exit status {done.returncode}, expected {want}\n"
                                 f"{block.text}\n---- output\n{done.stdout[-6000:]}")
        if "expect" in opts and not re.search(opts["expect"], done.stdout, re.MULTILINE):
            raise AssertionError(f"{block.where}: output does not match {opts['expect']!r}:\n{done.stdout[-6000:]}")
        return done.stdout

    def _script(self, block: Block) -> Path:
        self._n += 1
        script = self.workdir / f"block-{self._n:02d}-line{block.line}.sh"
        script.write_text(block.text)
        return script

    def _bash(self, block: Block, timeout: float) -> subprocess.CompletedProcess[str]:
        script = self._script(block)
        cwd_file = self.workdir / "cwd"
        wrapper = (f"cd {shlex.quote(str(self.cwd))} || exit 97\n"
                   f"trap 'pwd > {shlex.quote(str(cwd_file))}' EXIT\n"
                   f"set -eo pipefail\nsource {shlex.quote(str(script))}\n")
        cwd_file.unlink(missing_ok=True)
        done = subprocess.run(["bash", "-c", wrapper], env=self.env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False)
        if cwd_file.exists():
            self.cwd = Path(cwd_file.read_text().strip())
        self.transcript.append(f"$ # {block.where} (cwd {self.cwd}, exit {done.returncode})\n"
                               f"{block.text}{done.stdout}")
        return done

    def start_background(self, block: Block) -> str:
        assert block.run is not None
        name, ready = block.run.options["background"], block.run.options.get("ready", "")
        if name in self.background:
            raise AssertionError(f"{block.where}: background block {name!r} runs already")
        log = self.workdir / f"background-{name}.log"
        with open(log, "wb") as out:
            script = f"cd {shlex.quote(str(self.cwd))} || exit 97\nsource {shlex.quote(str(self._script(block)))}\n"
            proc = subprocess.Popen(["bash", "-c", script], env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        bg = self.background[name] = Background(block, proc, log)
        self.transcript.append(f"$ # {block.where}: background {name!r}, ready when {ready}\n{block.text}")
        self._wait_ready(bg, ready, float(block.run.options.get("timeout", 60)))
        return bg.output()

    def _wait_ready(self, bg: Background, ready: str, timeout: float) -> None:
        kind, _, what = ready.partition(":")
        if kind == "log":
            def condition() -> bool:
                return re.search(what, bg.output(), re.MULTILINE) is not None
        elif kind == "http":
            def condition() -> bool:
                m = re.search(r"http://([\w.\-]+):(\d+)", bg.output())
                if not m:
                    return False
                host = "127.0.0.1" if m[1] in ("0.0.0.0", "") else m[1]
                try:
                    with urllib.request.urlopen(f"http://{host}:{m[2]}{what}", timeout=5) as resp:
                        return bool(resp.status == 200)
                except (urllib.error.URLError, OSError):
                    return False
        else:
            raise AssertionError(f"{bg.block.where}: ready must be http:PATH or log:REGEX, not {ready!r}")
        deadline = time.monotonic() + timeout
        while not condition():
            if bg.proc.poll() is not None:
                raise AssertionError(f"{bg.block.where}: exited {bg.proc.returncode} before it was ready "
                                     f"({ready}):\n{bg.output()[-6000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{bg.block.where}: not ready ({ready}) within {timeout}s:\n"
                                     f"{bg.output()[-6000:]}")
            time.sleep(0.2)  # poll the real condition

    def stop(self, directive: Directive) -> str:
        bg = self.background.pop(directive.name, None)
        if bg is None:
            raise AssertionError(f"line {directive.line}: no background block {directive.name!r} runs")
        os.killpg(bg.proc.pid, signal.SIGINT)  # Ctrl-C reaches every process of the terminal's group
        code = bg.proc.wait(float(directive.options.get("timeout", 60)))
        out = bg.output()
        self.transcript.append(f"$ # line {directive.line}: Ctrl-C to {directive.name!r}, exit {code}\n{out}")
        want = int(directive.options.get("exit", 0))
        if code != want:
            raise AssertionError(f"line {directive.line}: {directive.name!r} exited {code} on Ctrl-C, "
                                 f"expected {want}:\n{out[-6000:]}")
        return out

    def kill_all(self) -> None:
        """End every background block still running (a failed run): SIGKILL to its group."""
        for bg in self.background.values():
            if bg.proc.poll() is None:
                os.killpg(bg.proc.pid, signal.SIGKILL)
                bg.proc.wait(30)
        self.background.clear()

    def check_excerpt(self, block: Block) -> str:
        assert block.run is not None
        path = self.cwd / block.run.name
        lines = [ln.rstrip() for ln in path.read_text().splitlines()]
        at = 0
        for line in filter(str.strip, block.text.splitlines()):
            try:
                at = lines.index(line.rstrip(), at) + 1
            except ValueError:
                raise AssertionError(f"{block.where}: {line.strip()!r} is not in {path} after line {at} "
                                     "(the excerpt no longer matches the file)") from None
        self.transcript.append(f"# {block.where}: an excerpt of {path}, as it is")
        return ""

    def run_python(self, block: Block) -> str:
        """Run the page's python blocks so far in one fresh interpreter (one namespace), so
        that this block sees what the earlier ones defined; each block's ``test_*``
        functions are called."""
        self.python.append((block.where, block.text))
        program = self.workdir / f"python-{len(self.python):02d}.json"
        program.write_text(json.dumps(self.python))
        done = subprocess.run([sys.executable, "-c", _PYTHON_DRIVER, str(program)], cwd=self.cwd, env=self.env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
                              check=False)
        self.transcript.append(f">>> # {block.where}\n{block.text}{done.stdout}")
        if done.returncode != 0:
            raise AssertionError(f"{block.where}: the python block failed:\n{done.stdout[-6000:]}")
        return done.stdout

    def transcript_tail(self, chars: int = 12_000) -> str:
        return "\n".join(self.transcript)[-chars:]


_PYTHON_DRIVER = """
import inspect, json, sys
namespace = {"__name__": "__main__"}
blocks = json.load(open(sys.argv[1]))
for where, code in blocks:
    before = set(namespace)
    exec(compile(code, where, "exec"), namespace)
    if where != blocks[-1][0]:
        continue  # an earlier block, run again for what it defines
    for name in sorted(set(namespace) - before):
        fn = namespace[name]
        if name.startswith("test_") and inspect.isfunction(fn) and not inspect.signature(fn).parameters:
            fn()
            print(f"{where}: {name} passed")
"""


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment for running doc commands: the interpreter's bin directory
    (its ``fw``, ``python`` and ``pytest``) first on PATH, no PYTHONPATH and no FW_*
    settings but FW_HOME (the caches), plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("FW_") and k != "FW_HOME") and k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(extra)
    return env
