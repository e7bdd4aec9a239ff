"""The endpoint of ``fw run --processes N``: one address for all the children.

``/metrics`` sums the children's metrics from prometheus-client's multiprocess files;
``/status`` lists every child's member entry (each child serves its own endpoint on a free
port and writes it to ``member-<instance>.json`` in the shared directory); ``/health`` and
``/ready`` are true when they are true of every child.
"""

from __future__ import annotations

import glob
import json
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prometheus_client import multiprocess

from framework.observe.endpoint import ask_json
from framework.observe.metrics import exposition

_TIMEOUT_S = 3.0


class Children:
    """The ``Source`` of the supervisor's endpoint (``framework.observe.server``)."""

    def __init__(self, directory: str, host: str, pids: Callable[[], dict[str, int]]) -> None:
        self.directory = directory
        self.host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        self.pids = pids  # instance -> pid of the children running now

    @staticmethod
    def prepare(directory: str) -> None:
        """Empty the shared directory: values of an earlier run must not add to this one's."""
        for path in glob.glob(os.path.join(directory, "*.db")) + glob.glob(os.path.join(directory, "member-*")):
            os.remove(path)

    def child_died(self, instance: str, pid: int) -> None:
        multiprocess.mark_process_dead(pid, self.directory)  # its live gauges go; its counters stay
        try:
            os.remove(os.path.join(self.directory, f"member-{instance}.json"))
        except FileNotFoundError:
            pass

    def _endpoints(self) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for instance, pid in sorted(self.pids().items()):
            try:
                with open(os.path.join(self.directory, f"member-{instance}.json"), encoding="utf-8") as f:
                    info = json.load(f)
            except (OSError, ValueError):
                info = {}
            out[instance] = f"http://{self.host}:{info['port']}" if info.get("pid") == pid else None
        return out

    def _ask(self, path: str) -> dict[str, tuple[int, Any]]:
        """GET ``path`` of every child: ``instance -> (HTTP status or 0, JSON body or error)``."""
        endpoints = self._endpoints()

        def get(url: str | None) -> tuple[int, Any]:
            if url is None:
                return 0, "starting: no endpoint yet"
            return ask_json(url + path, _TIMEOUT_S)

        with ThreadPoolExecutor(max_workers=max(len(endpoints), 1)) as pool:
            answers = list(pool.map(get, endpoints.values()))
        return dict(zip(endpoints, answers, strict=True))

    def metrics_text(self) -> bytes:
        return exposition(None, self.directory)

    def _all(self, path: str) -> tuple[bool, dict[str, Any]]:
        answers = self._ask(path)
        ok = bool(answers) and all(code == 200 for code, _ in answers.values())
        return ok, {"ok": ok, "members": {i: body for i, (_, body) in answers.items()}}

    def health(self) -> tuple[bool, dict[str, Any]]:
        return self._all("/health")

    def ready(self) -> tuple[bool, dict[str, Any]]:
        return self._all("/ready")

    def snapshot(self) -> dict[str, Any]:
        members, service = [], None
        pids = self.pids()
        for instance, (code, body) in self._ask("/status").items():
            if code == 200 and isinstance(body, dict) and body.get("members"):
                service = service or body.get("service")
                members.extend(body["members"])
            else:
                members.append({"instance": instance, "pid": pids.get(instance), "state": "unreachable",
                                "healthy": False, "ready": False, "error": body})
        return {"service": service, "generated_at": time.time(), "members": members}

    def history_doc(self) -> dict[str, Any] | None:
        return None  # each child's page has its own charts
