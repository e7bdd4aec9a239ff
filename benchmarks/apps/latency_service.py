"""An HTTP service of fixed latency for ``benchmarks/async_calls.py``: ``GET /price?n=N``
answers ``{"n": N, "price": 10 * N}`` after ``LATENCY_MS``, whatever the load.

    python -m benchmarks.apps.latency_service PORT LATENCY_MS [asyncio|aiohttp]

``asyncio`` (the default): a minimal HTTP/1.1 responder on asyncio's protocols (keep-alive,
GET only). The service called runs on the benchmark's machine, where in production it runs on
another, so it should take as little of the machine's cores as it can; ``aiohttp``: the same
answers from an aiohttp web server, which takes several times its CPU per call (the results
give both: ``service_cpu_s_per_1000``).
"""

from __future__ import annotations

import asyncio
import sys
from urllib.parse import parse_qs, urlsplit

_BAD = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"


class _Price(asyncio.Protocol):
    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a TCP server's transports are Transports

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        loop = asyncio.get_running_loop()
        while b"\r\n\r\n" in self.buffer:  # GET requests only: a request ends with its headers
            head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
            loop.call_later(self.latency_s, self._answer, head.split(b"\r\n", 1)[0])

    def _answer(self, request_line: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        try:
            method, target, _ = request_line.decode("ascii").split(" ")
            url = urlsplit(target)
            n = int(parse_qs(url.query)["n"][0])
            if method != "GET" or url.path != "/price":
                raise ValueError(request_line)
        except (ValueError, KeyError):
            self.transport.write(_BAD)
            return
        body = b'{"n": %d, "price": %d}' % (n, 10 * n)
        self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(body), body))

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def serve(port: int, latency_s: float) -> None:
    server = await asyncio.get_running_loop().create_server(lambda: _Price(latency_s), "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def serve_aiohttp(port: int, latency_s: float) -> None:
    from aiohttp import web

    async def price(request: web.Request) -> web.Response:
        await asyncio.sleep(latency_s)
        n = int(request.query["n"])
        return web.json_response({"n": n, "price": 10 * n})

    app = web.Application()
    app.add_routes([web.get("/price", price)])
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def main() -> None:
    port, latency_s = int(sys.argv[1]), float(sys.argv[2]) / 1000
    if sys.argv[3:] == ["aiohttp"]:
        serve_aiohttp(port, latency_s)
    else:
        asyncio.run(serve(port, latency_s))


if __name__ == "__main__":
    main()
