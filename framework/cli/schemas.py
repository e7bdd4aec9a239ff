"""``fw schemas check``: the project's Avro schemas against the schema registry's subjects.

The logic is in ``framework.ops.schemas``; this module parses options and prints a line per
subject (or JSON with ``--json``) and sets the exit status.
"""

from __future__ import annotations

import sys

import click

from framework.cli import output as out
from framework.ops import schemas as S

_SYMBOLS = {True: "✓", False: "✗", None: "-"}
_ASCII = {True: "ok", False: "x", None: "-"}


@click.group()
def schemas() -> None:
    """Check the project's Avro schemas (schemas/*.avsc) against the schema registry."""


@schemas.command()
@click.option("--dir", "schemas_dir", type=click.Path(file_okay=False), default=None,
              help="The schemas directory (else FW_SCHEMAS_DIR, else ./schemas).")
@click.option("--registry", "url", default=None, metavar="URL",
              help="The registry's API root (else FW_SCHEMA_REGISTRY_URL).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts) instead of lines.")
def check(schemas_dir: str | None, url: str | None, as_json: bool) -> None:
    """Would the registry accept each .avsc file as the next version of its subjects?

    A subject belongs to a file when its latest schema has the file's full name
    (namespace.name). The registry judges the file under the subject's compatibility level
    (its own, else the global one); for a refused change the line names each field that
    breaks the level and why. Prints a line per subject, ✓ compatible, ✗ incompatible, then
    a line for the schemas no subject has; an unreadable file is a ✗ line of its own. Exit
    status 1 when any change is incompatible or any file unreadable.
    """
    client = S.client_for(url)
    try:
        results = S.check(client, schemas_dir)
    finally:
        client.close()
    if as_json:
        out.emit_json([r.__dict__ for r in results])
    else:
        symbols = _SYMBOLS if _can_print(_SYMBOLS) else _ASCII
        width = max((len(r.subject) for r in results if r.subject), default=0)
        # files no subject has are one line: a project has many schemas the registry never saw
        alone = [r.schema for r in results if r.subject is None and r.schema is not None]
        out.lines(_line(r, symbols, width) for r in results if r.subject is not None or r.schema is None)
        if alone:
            click.echo(f"{symbols[None]} no subject has {', '.join(alone)}")
        incompatible = sum(r.compatible is False for r in results)
        checked = sum(r.compatible is not None for r in results)
        click.echo(f"{checked} subject{'s' if checked != 1 else ''} checked, {incompatible} incompatible")
    sys.exit(1 if S.failed(results) else 0)


def _line(r: S.SchemaCheck, symbols: dict[bool | None, str], width: int) -> str:
    """``✗ numbers-value  demo.Number (schemas/number.avsc): field `unit` added ...``, the
    subjects padded to ``width``."""
    if r.schema is None:  # an unreadable file
        return f"{symbols[False]} {r.file}: {r.error}"
    symbol = symbols[r.compatible]
    head = f"{symbol} {r.subject:<{width}}  {r.schema} ({r.file})"
    if r.compatible:
        state = "unchanged" if r.unchanged else "compatible"
        return f"{head}: {state}, latest version {r.version} ({r.level})"
    return f"{head}: {'; '.join(r.reasons)}"


def _can_print(symbols: dict[bool | None, str]) -> bool:
    """Whether stdout's encoding has ✓ and ✗ (a C locale's ASCII has not)."""
    try:
        "".join(symbols.values()).encode(sys.stdout.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return False
    return True
