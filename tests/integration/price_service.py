"""A real HTTP service for the async steps' tests, run as its own process:
``python -m tests.integration.price_service PORT``.

``GET /price?n=N`` answers ``{"n": N, "price": 10 * N}`` after 5-50 ms, except:
- N divisible by 97: 500 every time (a call that fails for good: a dead letter);
- at random, 5% of calls: 503 (a transient failure, retried) and 1% of calls: no answer for 30 s
  (a hang: the step's timeout ends the attempt).
``GET /stats``: calls per idempotency key (the header ``Idempotency-Key``), so a test can see a
record called twice.
"""

from __future__ import annotations

import asyncio
import random
import sys
from collections import Counter

from aiohttp import web

calls: Counter[str] = Counter()


async def price(request: web.Request) -> web.Response:
    n = int(request.query["n"])
    calls[request.headers.get("Idempotency-Key", "")] += 1
    roll = random.random()
    if roll < 0.01:
        await asyncio.sleep(30)
    await asyncio.sleep(random.uniform(0.005, 0.05))
    if n % 97 == 0:
        return web.json_response({"error": "no price for this article"}, status=500)
    if roll < 0.06:
        return web.json_response({"error": "busy"}, status=503)
    return web.json_response({"n": n, "price": 10 * n})


async def stats(request: web.Request) -> web.Response:
    return web.json_response(dict(calls))


def main() -> None:
    app = web.Application()
    app.add_routes([web.get("/price", price), web.get("/stats", stats)])
    port = int(sys.argv[1])
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


if __name__ == "__main__":
    main()
