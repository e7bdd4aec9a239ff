"""Before a static member joins, it asks the holder of its instance id (the endpoint the holder
advertised) whether it is alive: only a healthy member of the same service refuses the start.
The advertised port of a dead member may answer for another service's member since then."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from framework.errors import RuntimeProblem
from framework.runtime import membership


@pytest.fixture
def answering() -> Iterator[tuple[dict[str, Any], int]]:
    """A /status endpoint on a free port answering the dict it yields."""
    body: dict[str, Any] = {}

    class Status(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Status)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield body, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _held_at(monkeypatch: pytest.MonkeyPatch, port: int) -> None:
    """The cluster says instance "0" of group "orders" is held by a client advertising ``port``."""
    monkeypatch.setattr(membership, "static_member",
                        lambda admin, group, instance: (f"{group}-{instance}@127.0.0.1:{port}", "/127.0.0.1"))


def test_a_healthy_member_of_the_same_service_holding_the_id_refuses_the_start(
        answering: tuple[dict[str, Any], int], monkeypatch: pytest.MonkeyPatch) -> None:
    body, port = answering
    body.update(service="orders", members=[{"instance": "0", "healthy": True, "pid": 4242}])
    _held_at(monkeypatch, port)
    with pytest.raises(RuntimeProblem, match=r"instance id '0' of service 'orders' is taken.*pid 4242"):
        membership.refuse_a_taken_instance_id(None, "orders", "0", "orders-0@127.0.0.1:1")


def test_another_service_now_answering_at_the_dead_holders_port_does_not(
        answering: tuple[dict[str, Any], int], monkeypatch: pytest.MonkeyPatch) -> None:
    body, port = answering
    body.update(service="payments", members=[{"instance": "0", "healthy": True, "pid": 4242}])
    _held_at(monkeypatch, port)
    membership.refuse_a_taken_instance_id(None, "orders", "0", "orders-0@127.0.0.1:1")


def test_an_unhealthy_holder_is_replaced(answering: tuple[dict[str, Any], int],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    body, port = answering
    body.update(service="orders", members=[{"instance": "0", "healthy": False, "pid": 4242}])
    _held_at(monkeypatch, port)
    membership.refuse_a_taken_instance_id(None, "orders", "0", "orders-0@127.0.0.1:1")
