"""How the operations commands print: JSON for scripts (``--json``), rich tables for people.

JSON documents are indented; ``fw topics tail --json`` prints one compact JSON object per
record (JSON Lines), so a follower can read them as they come. Tables fold long values
instead of cutting them. Timestamps are milliseconds since the epoch in JSON and UTC ISO
8601 in tables.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from framework.ops.targets import plain

_TRAILING = re.compile(r" +((?:\x1b\[[0-9;]*m)*)$")  # spaces at a line's end, before its style's reset
_PIPE_WIDTH = 200  # a pipe or file has no width: rich would assume 80 and fold every value


def console() -> Console:
    # highlighting off: output goes to pipes and files as often as to a terminal
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else _PIPE_WIDTH
    return Console(highlight=False, soft_wrap=False, width=width)


def emit_json(document: Any, *, lines: bool = False) -> None:
    """``document`` as JSON on stdout (one line with ``lines``)."""
    click.echo(json.dumps(plain(document), ensure_ascii=False, indent=None if lines else 2, sort_keys=False))


def when(ms: int | None) -> str:
    """A timestamp in ms as UTC ISO 8601 with milliseconds ("-" for none)."""
    if ms is None:
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")  # noqa: UP017
    except (OverflowError, OSError, ValueError):
        return str(ms)


def shown(value: Any) -> str:
    """A decoded value in one cell: text as is, anything else as compact JSON."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return json.dumps(plain(value), ensure_ascii=False, separators=(",", ":"))


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]], *,
          fold: Sequence[str] = ()) -> None:
    """Print a table: ``columns`` named, cells through ``shown``; columns in ``fold`` wrap
    long values over several lines."""
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False, box=None, header_style="bold")
    for name in columns:
        t.add_column(name, overflow="fold" if name in fold else "ellipsis", no_wrap=name not in fold)
    for r in rows:
        t.add_row(*(shown(c) if not isinstance(c, str) else c for c in r))
    con = console()
    with con.capture() as captured:
        con.print(t)
    # rich pads every cell to its column's width, the last one too: no line ends in spaces
    click.echo("\n".join(_TRAILING.sub(r"\1", line) for line in captured.get().splitlines()),
               color=con.is_terminal)


def lines(items: Iterable[str]) -> None:
    for item in items:
        click.echo(item)
