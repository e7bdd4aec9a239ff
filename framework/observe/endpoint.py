"""A member's status endpoint as others find and read it: the ``client.id`` that advertises
it (``<service>-<instance>@<host>:<port>``, docs/observability.md) and its ``/status``
document. ``fw status`` (``framework.ops.status``) reads every member's; a starting member
reads the one of a member holding its instance id (``framework.runtime.membership``).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Advertised", "StatusUnavailable", "ask_json", "broker_host", "fetch_status", "parse_client_id"]


class StatusUnavailable(Exception):
    """A member's ``/status`` could not be read; the message says why, in a few words."""


@dataclass(frozen=True)
class Advertised:
    """What a member's ``client.id`` says: its instance and its endpoint (None when it
    advertises none: the endpoint is disabled, or the member runs an older framework)."""

    instance: str
    endpoint: str | None


def broker_host(host: str) -> str:
    """A member's host as the broker reports it (librdkafka: ``/127.0.0.1``), without the slash."""
    return host.strip().lstrip("/")


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def parse_client_id(client_id: str, service: str, host: str) -> Advertised:
    """The instance and endpoint a member advertises: ``<service>-<instance>@<host>:<port>``,
    ``host`` (the broker's view of the member) standing in for an empty ``<host>``."""
    name, at, address = client_id.rpartition("@")
    if not at:
        return Advertised(client_id, None)
    where, colon, port = address.rpartition(":")
    if not colon or not port.isdigit():
        return Advertised(name or client_id, None)
    if name.startswith(f"{service}-") and len(name) > len(service) + 1:
        instance = name[len(service) + 1:]
    else:
        instance = name.rpartition("-")[2] or name
    where = where.strip("[]") or broker_host(host)
    if not where:
        return Advertised(instance, None)
    return Advertised(instance, f"http://{_url_host(where)}:{int(port)}")


def fetch_status(endpoint: str, timeout_s: float) -> Mapping[str, Any]:
    """GET ``endpoint``/status; a ``StatusUnavailable`` for anything but a JSON object."""
    try:
        with urllib.request.urlopen(f"{endpoint.rstrip('/')}/status", timeout=timeout_s) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        raise StatusUnavailable(f"HTTP {exc.code} from /status") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        raise StatusUnavailable("timed out" if isinstance(reason, TimeoutError)
                                else str(getattr(reason, "strerror", None) or reason)) from None
    except TimeoutError:
        raise StatusUnavailable("timed out") from None
    except (OSError, ValueError) as exc:  # reset connections, malformed responses
        raise StatusUnavailable(str(exc) or type(exc).__name__) from None
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise StatusUnavailable("/status did not answer JSON") from None
    if not isinstance(document, dict):
        raise StatusUnavailable("/status did not answer a JSON object")
    return document


def ask_json(url: str, timeout_s: float, headers: Mapping[str, str] | None = None,
             method: str = "GET") -> tuple[int, Any]:
    """GET (or ``method``) ``url``: ``(HTTP status, JSON body)``, or ``(0, what went wrong)``
    when no JSON answer came (unreachable, timed out, not JSON). Error statuses are answers too."""
    request = urllib.request.Request(url, headers=dict(headers or {}), method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read() or b"null")
        except ValueError:
            return exc.code, f"HTTP {exc.code}"
    except (OSError, ValueError) as exc:  # refused, reset, timed out, not JSON
        return 0, f"{type(exc).__name__}: {exc}"
