"""A minimal client of the Confluent Schema Registry REST API, on the standard library only.

Two calls are all the Avro serde needs::

    POST /subjects/{subject}/versions   {"schema": "<schema JSON>"}  ->  {"id": 7}
    GET  /schemas/ids/{id}                                           ->  {"schema": "<JSON>"}

Both answers are cached for the life of the client: a subject/schema pair always maps to
the same id, and an id always names the same schema, so nothing ever needs invalidating.
Credentials (``auth`` or ``user:password@`` in the URL) are sent as HTTP Basic auth and
never appear in reprs or exception messages.
"""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from framework.errors import ConfigError, FrameworkError

__all__ = ["SchemaRegistryClient", "SchemaRegistryError"]

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_ENV_URL = "FW_SCHEMA_REGISTRY_URL"
_ENV_USER = "FW_SCHEMA_REGISTRY_USER"
_ENV_PASSWORD = "FW_SCHEMA_REGISTRY_PASSWORD"


class SchemaRegistryError(FrameworkError):
    """The registry refused a request or could not be reached.

    ``status`` is the HTTP status (``None`` when no answer came) and ``error_code`` the
    registry's own code (e.g. 40403 "schema not found", 409 "incompatible schema").
    """

    def __init__(self, message: str, status: int | None = None, error_code: int | None = None):
        super().__init__(message)
        self.status = status
        self.error_code = error_code


def _split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """``http://u:p@host`` -> (``http://host``, (u, p)): keeps secrets out of the URL we print."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"schema registry URL {_redact_url(url)!r} is not an http(s) URL; "
            "set it like http://registry:8081"
        )
    if parts.username is None:
        return url.rstrip("/"), None
    netloc = parts.netloc.rpartition("@")[2]
    clean = urllib.parse.urlunsplit(parts._replace(netloc=netloc)).rstrip("/")
    user = urllib.parse.unquote(parts.username)
    return clean, (user, urllib.parse.unquote(parts.password or ""))


def _redact_url(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    return f"{scheme}{sep}***@{rest.rpartition('@')[2]}" if "@" in rest else url


class SchemaRegistryClient:
    """Registers schemas and fetches them by id; safe to share between serdes and threads.

    ``register(subject, schema)`` returns the schema's global id (registering an identical
    schema again returns the existing id, as the registry does). ``get_schema(id)`` returns
    the schema as a dict. Failures raise ``SchemaRegistryError`` naming the request, the
    HTTP status and the registry's message.
    """

    __slots__ = ("url", "timeout_s", "_auth_header", "_ids", "_schemas")

    def __init__(
        self, url: str, *, auth: tuple[str, str] | None = None, timeout_s: float = 10
    ) -> None:
        self.url, url_auth = _split_credentials(url)
        auth = auth or url_auth
        self.timeout_s = timeout_s
        self._auth_header: str | None = None
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode("ascii")
            self._auth_header = f"Basic {token}"
        self._ids: dict[tuple[str, str], int] = {}
        self._schemas: dict[int, Any] = {}

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SchemaRegistryClient | None:
        """A client from ``FW_SCHEMA_REGISTRY_URL`` (+ ``_USER`` / ``_PASSWORD``), or ``None``."""
        env = os.environ if env is None else env
        url = env.get(_ENV_URL, "").strip()
        if not url:
            return None
        user, password = env.get(_ENV_USER), env.get(_ENV_PASSWORD)
        if (user is None) != (password is None):
            if password is None:
                given, missing = _ENV_USER, _ENV_PASSWORD
            else:
                given, missing = _ENV_PASSWORD, _ENV_USER
            raise ConfigError(
                f"{given} is set but {missing} is not: schema registry credentials need "
                f"both; set {missing} too, or unset {given}"
            )
        auth = (user, password) if user is not None and password is not None else None
        return cls(url, auth=auth)

    def register(self, subject: str, schema: Any) -> int:
        """Register ``schema`` (an Avro schema as dict, list or primitive name) under
        ``subject``; returns its global id."""
        text = json.dumps(schema, separators=(",", ":"))
        key = (subject, text)
        cached = self._ids.get(key)
        if cached is not None:
            return cached
        path = f"/subjects/{urllib.parse.quote(subject, safe='')}/versions"
        answer = self._request("POST", path, {"schema": text})
        schema_id = int(answer["id"])
        self._ids[key] = schema_id
        self._schemas.setdefault(schema_id, json.loads(text))
        return schema_id

    def get_schema(self, schema_id: int) -> Any:
        """The schema registered with global id ``schema_id``, parsed from its JSON."""
        cached = self._schemas.get(schema_id)
        if cached is not None:
            return cached
        answer = self._request("GET", f"/schemas/ids/{int(schema_id)}", None)
        kind = answer.get("schemaType", "AVRO")
        if kind != "AVRO":
            raise SchemaRegistryError(f"schema id {schema_id} is a {kind} schema, not Avro")
        schema = json.loads(answer["schema"])
        self._schemas[schema_id] = schema
        return schema

    def _request(self, method: str, path: str, body: Any) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Accept", _CONTENT_TYPE)
        if data is not None:
            request.add_header("Content-Type", _CONTENT_TYPE)
        if self._auth_header is not None:
            request.add_header("Authorization", self._auth_header)
        what = f"schema registry {method} {self.url}{path}"
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            message, code = _error_body(exc)
            raise SchemaRegistryError(
                f"{what} failed: HTTP {exc.code}: {message}", exc.code, code
            ) from None  # the chained HTTPError adds nothing but noise
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise SchemaRegistryError(f"{what} failed: {reason}") from None
        except ValueError as exc:  # the answer was not JSON
            raise SchemaRegistryError(f"{what} answered with invalid JSON: {exc}") from None

    def __repr__(self) -> str:
        auth = ", auth=***" if self._auth_header else ""
        return f"SchemaRegistryClient({self.url!r}{auth})"


def _error_body(exc: urllib.error.HTTPError) -> tuple[str, int | None]:
    """The registry's ``{"error_code": .., "message": ..}``, or the raw reason."""
    try:
        body = json.loads(exc.read() or b"{}")
        return str(body.get("message") or exc.reason), body.get("error_code")
    except (ValueError, AttributeError, OSError):
        return str(exc.reason), None
