"""The member's HTTP endpoint: status page, ``/metrics``, ``/health``, ``/ready``, ``/status``,
``/history``, ``/topology`` (docs/observability.md) and the live queries of its stores, ``/stores/...``
(docs/queries.md), and ``POST /savepoint/hold`` and ``/savepoint/release`` that hold the member at
a checkpoint for a savepoint of the running service (docs/savepoints.md). A standard-library
server in a daemon thread; it reads what the processing loop published, and the stores'
committed data, so it never blocks the loop (a hold is handed to the loop, which acts on it
between batches)."""

from __future__ import annotations

import errno
import html
import json
import logging
import threading
import urllib.parse
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, Protocol

from framework.errors import ConfigError
from framework.pipeline import topology as T

log = logging.getLogger("framework.observe")
DEFAULT_PORT = 9400


class Source(Protocol):
    """What the endpoint shows: a member's ``Observer``, or the ``--processes`` supervisor's view."""

    def metrics_text(self) -> bytes: ...
    def health(self) -> tuple[bool, dict[str, Any]]: ...
    def ready(self) -> tuple[bool, dict[str, Any]]: ...
    def snapshot(self) -> dict[str, Any]: ...
    def history_doc(self) -> dict[str, Any] | None: ...


FORWARDED = "X-FW-Forwarded"  # marks a query one member passed to another: it is never passed on


class Queries(Protocol):
    """What answers ``/stores/...`` (``framework.runtime.queries.LiveQueries``)."""

    def answer(self, path: str, params: dict[str, str], forwarded: bool) -> tuple[int, dict[str, Any]]: ...


class Control(Protocol):
    """What answers ``POST /savepoint/hold`` and ``/savepoint/release``
    (``framework.runtime.hold.Holds``)."""

    def ask(self, action: str, params: dict[str, str]) -> tuple[int, dict[str, Any]]: ...


TOPOLOGY_SLOT = b"<!-- topology -->"  # where status.html takes the topology section


def _page(topology: Mapping[str, Any] | None = None) -> bytes:
    """The status page, with ``topology`` (``Pipeline.describe()``) drawn in it as text, and
    its Mermaid source folded below: the page loads no script from elsewhere, so nothing
    draws the graph here (docs/observability.md)."""
    try:
        page = resources.files("framework.observe").joinpath("static/status.html").read_bytes()
    except FileNotFoundError:
        page = b"<!doctype html><title>status</title><p>See <a href='/status'>/status</a>." + TOPOLOGY_SLOT
    return page.replace(TOPOLOGY_SLOT, b"" if topology is None else topology_section(topology).encode())


def topology_section(topology: Mapping[str, Any]) -> str:
    """The page's topology section: the text tree, and the Mermaid source in a ``<details>``."""
    return (
        '<section id="topology">\n<h2>Topology</h2>\n'
        f'<pre id="topology-text">{html.escape(T.text(topology))}</pre>\n'
        "<details>\n<summary>Mermaid source</summary>\n"
        '<p class="muted">Paste it into any Mermaid renderer to draw the graph '
        "(this page loads no script from elsewhere).</p>\n"
        f'<pre class="mermaid" id="topology-mermaid">{html.escape(T.mermaid(topology))}</pre>\n'
        "</details>\n</section>"
    )


class StatusServer:
    """Serves ``source`` on ``host:port``. ``port=None``: 9400, or a free port when 9400 is taken.
    ``topology`` (``Pipeline.describe()``): shown on the page and served at ``/topology``."""

    def __init__(self, source: Source, host: str, port: int | None, queries: Queries | None = None,
                 control: Control | None = None, topology: Mapping[str, Any] | None = None) -> None:
        self.source = source
        handler = _handler(source, queries, control, topology)
        try:
            self.httpd = ThreadingHTTPServer((host, DEFAULT_PORT if port is None else port), handler)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise ConfigError(f"cannot serve the status endpoint on {host}:{port}: {exc}") from exc
            if port is not None:
                raise ConfigError(f"port {port} of {host} is taken: the status endpoint cannot listen there. "
                                  "Fix: set another FW_OBSERVE__PORT (0: any free port), or stop what holds "
                                  "it") from exc
            self.httpd = ThreadingHTTPServer((host, 0), handler)
            log.warning("port %d is taken: the status endpoint listens on port %d instead (set "
                        "FW_OBSERVE__PORT to choose one)", DEFAULT_PORT, self.httpd.server_address[1])
        self.httpd.daemon_threads = True
        self.host = host
        self.port: int = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="fw-status", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> StatusServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _handler(source: Source, queries: Queries | None, control: Control | None,
             topology: Mapping[str, Any] | None) -> type[BaseHTTPRequestHandler]:
    page = _page(topology)

    class Handler(BaseHTTPRequestHandler):
        server_version = "fw-status"

        def do_GET(self) -> None:
            path, _, query = self.path.partition("?")
            path = path.rstrip("/") or "/"
            try:
                if path == "/":
                    self._send(200, page, "text/html; charset=utf-8")
                elif path == "/metrics":
                    self._send(200, source.metrics_text(), "text/plain; version=0.0.4; charset=utf-8")
                elif path in ("/health", "/ready"):
                    ok, body = source.health() if path == "/health" else source.ready()
                    self._json(200 if ok else 503, body)
                elif path == "/status":
                    self._json(200, source.snapshot())
                elif path == "/history" and (doc := source.history_doc()) is not None:
                    self._json(200, doc)
                elif path == "/topology" and topology is not None:
                    self._json(200, topology)
                elif queries is not None and (path == "/stores" or path.startswith("/stores/")):
                    params = {k: v[-1] for k, v in urllib.parse.parse_qs(query, keep_blank_values=True).items()}
                    self._json(*queries.answer(path, params, self.headers.get(FORWARDED) is not None))
                else:
                    shown = ", /topology" if topology is not None else ""
                    stores = ", /stores/<store>[/<key>]" if queries is not None else ""
                    self._json(404, {"error": f"no {path}; try /, /metrics, /health, /ready, /status, /history"
                                              f"{shown}{stores}"})
            except Exception as exc:
                log.exception("status endpoint: %s failed", path)
                self._json(500, {"error": f"{type(exc).__name__}: {exc}"})

        def do_POST(self) -> None:
            """``/savepoint/hold`` and ``/savepoint/release``: a savepoint of the running
            service (``framework.runtime.hold``); nothing else changes anything of the member."""
            path, _, query = self.path.partition("?")
            path = path.rstrip("/")
            try:
                action = path.removeprefix("/savepoint/")
                if control is None or not path.startswith("/savepoint/"):
                    self._json(404, {"error": f"no POST {path}; try POST /savepoint/hold or /savepoint/release"})
                    return
                params = {k: v[-1] for k, v in urllib.parse.parse_qs(query, keep_blank_values=True).items()}
                self._json(*control.ask(action, params))
            except Exception as exc:
                log.exception("status endpoint: POST %s failed", path)
                self._json(500, {"error": f"{type(exc).__name__}: {exc}"})

        def _json(self, code: int, body: Any) -> None:
            self._send(code, json.dumps(body, default=str).encode(), "application/json")

        def _send(self, code: int, body: bytes, kind: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("status endpoint: " + format, *args)

    return Handler
