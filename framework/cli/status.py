"""``fw status SERVICE``: a running service's members, partitions, lag, watermarks,
checkpoints and restores, from the broker and each member's ``/status`` endpoint.

The logic is in ``framework.ops.status``; this module parses options and renders: one
table (a row per member and task partition) and a line per member, or JSON with ``--json``;
``--watch`` redraws them in place until Ctrl-C. Without ``--watch`` the exit status is 1 for
a service with no member running (what the broker knows is printed all the same), 0 otherwise.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import click
from rich.console import Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from framework.cli import output as out
from framework.cli.ops import _common, _group_target, _settings
from framework.errors import FrameworkError
from framework.ops import status as S

_DEFAULT_WATCH_S = 2.0


@click.command()
@click.argument("service")
@click.option("--watch", "watch", type=click.FloatRange(min=0.1), is_flag=False, flag_value=_DEFAULT_WATCH_S,
              default=None, metavar="[SECONDS]",
              help=f"Refresh in place every SECONDS (default {_DEFAULT_WATCH_S:g}) until Ctrl-C.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.1), default=S.DEFAULT_TIMEOUT_S,
              show_default=True, help="Seconds to wait for each member's /status.")
@_common
def status(service: str, watch: float | None, timeout_s: float, as_json: bool, config_file: str | None) -> None:
    """Members of SERVICE (module:pipeline, or its consumer-group id) with their partitions,
    state, lag, watermarks, checkpoint age and restore progress, from the broker and each
    member's /status endpoint. Exit status 1 when no member runs (without --watch)."""
    name, pipeline = _group_target(service)
    settings = _settings(config_file)
    target = service if pipeline is not None else None

    def current() -> S.ServiceStatus:
        return S.service_status(settings, name, pipeline, timeout_s)

    if watch is None:
        st = current()
        if as_json:
            out.emit_json(st.as_dict())
        else:
            out.console().print(render(st, target=target))
        sys.exit(0 if st.running else 1)
    try:
        if as_json:
            _watch_json(name, current, watch)
        else:
            _watch_table(current, watch, target)
    except KeyboardInterrupt:
        return


# The first view's failure is the command's error; later ones (a broker restarting) are
# shown in its place, and the next refresh tries again.

def _watch_json(name: str, current: Callable[[], S.ServiceStatus], every_s: float) -> None:
    """One JSON line per refresh; ``{"service", "error"}`` for a refresh that failed."""
    out.emit_json(current().as_dict(), lines=True)
    while True:
        time.sleep(every_s)
        try:
            document = current().as_dict()
        except FrameworkError as exc:
            document = {"service": name, "error": str(exc)}
        out.emit_json(document, lines=True)


def _watch_table(current: Callable[[], S.ServiceStatus], every_s: float, target: str | None) -> None:
    """Redraw the view every ``every_s`` seconds; its header says when it was taken."""
    first = render(current(), at=time.time(), target=target)
    with Live(first, console=out.console(), auto_refresh=False, transient=False) as live:
        while True:
            time.sleep(every_s)
            try:
                view = render(current(), at=time.time(), target=target)
            except FrameworkError as exc:
                view = Text(f"error: {exc} (trying again every {every_s:g}s; Ctrl-C stops)")
            live.update(view, refresh=True)


# -- rendering -------------------------------------------------------------------------------

COLUMNS = ["member", "endpoint", "partition", "state", "lag", "watermark", "delay", "checkpoint age",
           "restore"]


def render(st: S.ServiceStatus, at: float | None = None, target: str | None = None) -> RenderableType:
    """The header line, the table and the member lines (or, with no members, a header that
    says how to start one, ``fw run target``, and the broker's committed offsets and lag);
    ``at`` (a time) ends the header with ``at HH:MM:SS``."""
    info = st.view.info
    when = f"  at {time.strftime('%H:%M:%S', time.localtime(at))}" if at is not None else ""
    if not st.running:
        start = (f"`fw run {target}`" if target is not None
                 else f"`fw run MODULE:PIPELINE`, the pipeline named {st.service}")
        head = (f"service {st.service} is not running: group {info.group} ({info.state}) has no members; "
                f"committed lag {st.lag}; start one with {start}{when}")
        return Group(Text(head), _table(["topic", "partition", "committed", "end", "lag"],
                                        offset_cells(st)))
    head = (f"service {st.service}  group {info.state}  members {len(st.members)}  "
            f"committed lag {st.lag}{when}")
    return Group(Text(head), _table(COLUMNS, table_cells(st)), *(Text(line) for line in member_texts(st)))


def _table(columns: list[str], cells: list[list[str]]) -> Table:
    """A table as ``framework.cli.output.table`` prints them, kept as a renderable (a live
    view redraws it)."""
    t = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for name in columns:
        t.add_column(name, no_wrap=True, overflow="ellipsis")
    for row in cells:
        t.add_row(*row)
    return t


def table_cells(st: S.ServiceStatus) -> list[list[str]]:
    """The table's cells: a row per member and task partition; the member, its endpoint and
    its checkpoint age on its first row only."""
    cells = []
    for r in S.rows(st):
        cells.append([r.instance if r.first else "", (r.endpoint or "-") if r.first else "",
                      "-" if r.partition is None else str(r.partition), r.state, _n(r.lag),
                      out.when(r.watermark_ms), duration(r.watermark_delay_s),
                      duration(r.checkpoint_age_s) if r.first else "", restore_text(r.restore)])
    return cells


def offset_cells(st: S.ServiceStatus) -> list[list[str]]:
    return [[r.topic, str(r.partition), _n(r.committed), str(r.end), str(r.lag)] for r in st.view.partitions]


def member_texts(st: S.ServiceStatus) -> list[str]:
    """A line per member: records processed and the rate, or why its endpoint did not answer."""
    texts = []
    for m in S.member_lines(st):
        where = f"member {m.instance}" + (f" ({m.endpoint})" if m.endpoint else "")
        if m.error is not None:
            texts.append(f"{where}: {m.error}")
            continue
        flags = [m.state or "-", "healthy" if m.healthy else "unhealthy" if m.healthy is False else "",
                 "ready" if m.ready else "not ready" if m.ready is False else ""]
        rate = "-" if m.process_rate is None else f"{m.process_rate:,.1f}"
        texts.append(f"{where}: {', '.join(f for f in flags if f)}; pid {_n(m.pid)}; "
                     f"{_n(m.records_processed, ',')} records processed, {rate} records/s; lag {_n(m.lag)}")
    return texts


def _n(value: int | None, spec: str = "") -> str:
    return "-" if value is None else format(value, spec)


def duration(seconds: float | None) -> str:
    """``0.4s``, ``12s``, ``2m05s``, ``3h07m`` (``-`` for none)."""
    if seconds is None:
        return "-"
    sign, s = ("-" if seconds < 0 else ""), abs(seconds)
    if s < 10:
        return f"{sign}{s:.1f}s"
    if s < 60:
        return f"{sign}{s:.0f}s"
    whole = round(s)
    if whole < 3600:
        return f"{sign}{whole // 60}m{whole % 60:02d}s"
    return f"{sign}{whole // 3600}h{whole % 3600 // 60:02d}m"


def restore_text(restore: Any) -> str:
    """A partition's restore progress: ``1,200 restored, 3,400 left, ETA 4.0s``; ``-`` when it
    does not restore."""
    if not isinstance(restore, Mapping) or not restore:
        return "-"
    done, left = restore.get("restored"), restore.get("remaining")
    eta = restore.get("eta_s")
    parts = [f"{done:,} restored" if isinstance(done, int) else "? restored",
             f"{left:,} left" if isinstance(left, int) else "? left"]
    if isinstance(eta, (int, float)):
        parts.append(f"ETA {duration(float(eta))}")
    return ", ".join(parts)
