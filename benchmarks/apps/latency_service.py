"""An HTTP service of fixed latency for ``benchmarks/async_calls.py``: ``GET /price?n=N``
answers ``{"n": N, "price": 10 * N}`` after ``LATENCY_MS``, whatever the load.

    python -m benchmarks.apps.latency_service PORT LATENCY_MS
"""

from __future__ import annotations

import asyncio
import sys

from aiohttp import web


def main() -> None:
    port, latency_s = int(sys.argv[1]), float(sys.argv[2]) / 1000

    async def price(request: web.Request) -> web.Response:
        await asyncio.sleep(latency_s)
        n = int(request.query["n"])
        return web.json_response({"n": n, "price": 10 * n})

    app = web.Application()
    app.add_routes([web.get("/price", price)])
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


if __name__ == "__main__":
    main()
