"""The pipeline of ``benchmarks/async_calls.py``: each record priced by an HTTP call to the
service at ``BENCH_SERVICE_URL``, in an async step (``BENCH_MODE=async``, ``BENCH_CAPACITY``
calls in flight per task, aiohttp) or in a plain ``map`` (``BENCH_MODE=sync``, one call at a
time over one kept-alive ``http.client`` connection), for comparison.

Run as ``fw run framework.testing.kafka:suffixed_pipeline`` with
``FW_TEST_PIPELINE=benchmarks.apps.async_app:build_pipeline`` (``ServiceRun``).
"""

from __future__ import annotations

import http.client
import json
import os
from typing import Any
from urllib.parse import urlsplit

from framework import AsyncCall, AsyncFunction, JsonSerde, Pipeline, StringSerde, Topic


class Price(AsyncFunction):
    def __init__(self, url: str) -> None:
        self.url = url

    async def open(self) -> None:
        import aiohttp

        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def __call__(self, record: dict[str, Any], call: AsyncCall) -> dict[str, Any]:
        async with self.session.get(f"{self.url}/price", params={"n": str(record["n"])}) as resp:
            resp.raise_for_status()
            body = await resp.json()
        return {**record, "price": body["price"]}

    async def close(self) -> None:
        await self.session.close()


class SyncPrice:
    def __init__(self, url: str) -> None:
        self.host = urlsplit(url).netloc
        self.conn: http.client.HTTPConnection | None = None

    def __call__(self, record: dict[str, Any]) -> dict[str, Any]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, timeout=10)
        self.conn.request("GET", f"/price?n={record['n']}")
        resp = self.conn.getresponse()
        body = json.loads(resp.read())
        return {**record, "price": body["price"]}


def build_pipeline(suffix: str) -> Pipeline:
    url = os.environ.get("BENCH_SERVICE_URL", "http://127.0.0.1:8080")  # the topics are made without it
    p = Pipeline(f"bench-async{suffix}")
    src = p.source(Topic(f"bench-async-in{suffix}", key_serde=StringSerde(), value_serde=JsonSerde(), partitions=1))
    out = Topic(f"bench-async-out{suffix}", key_serde=StringSerde(), value_serde=JsonSerde(), partitions=1)
    if os.environ.get("BENCH_MODE", "async") == "sync":
        src.map(SyncPrice(url), name="price").to(out)
    else:
        src.map_async(Price(url), capacity=int(os.environ.get("BENCH_CAPACITY", "100")), timeout_ms=10_000,
                      name="price").to(out)
    return p
