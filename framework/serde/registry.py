"""The schema registry client of the Avro serde and of ``fw schemas``: a Confluent Schema
Registry (or one that speaks its API, such as Apicurio Registry's ``/apis/ccompat/v7``).

The requests go through ``confluent_kafka.schema_registry`` (``framework.kafka.registry``);
this class adds what the framework needs around them:

- the settings ``FW_SCHEMA_REGISTRY_URL``, ``FW_SCHEMA_REGISTRY_USER`` and
  ``FW_SCHEMA_REGISTRY_PASSWORD`` (``from_env``);
- credentials (``auth``, or ``user:password@`` in the URL) sent as HTTP Basic auth and never
  shown in reprs or exception messages;
- caches of what never changes: a subject/schema pair always maps to the same id, and an id
  always names the same schema, so nothing ever needs invalidating;
- every failure one ``SchemaRegistryError`` naming the request, the HTTP status and the
  registry's message.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Mapping
from typing import Any

from framework.errors import ConfigError
from framework.kafka.registry import RegistryConnection, SchemaRegistryError, SubjectVersion

__all__ = ["SchemaRegistryClient", "SchemaRegistryError", "SubjectVersion"]

_ENV_URL = "FW_SCHEMA_REGISTRY_URL"
_ENV_USER = "FW_SCHEMA_REGISTRY_USER"
_ENV_PASSWORD = "FW_SCHEMA_REGISTRY_PASSWORD"


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
    the schema as a dict. ``subjects``, ``versions``, ``version``, ``compatibility``,
    ``set_compatibility`` and ``is_compatible`` serve ``fw schemas check``. ``timeout_s``
    bounds each HTTP request. Failures raise ``SchemaRegistryError`` naming the request,
    the HTTP status and the registry's message.
    """

    __slots__ = ("_auth", "_connection", "_ids", "_schemas", "timeout_s", "url")

    def __init__(
        self, url: str, *, auth: tuple[str, str] | None = None, timeout_s: float = 10
    ) -> None:
        self.url, url_auth = _split_credentials(url)
        self._auth = auth or url_auth
        self.timeout_s = timeout_s
        self._connection: RegistryConnection | None = None
        self._ids: dict[tuple[str, str], int] = {}
        self._schemas: dict[int, Any] = {}

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, *, timeout_s: float = 10
    ) -> SchemaRegistryClient | None:
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
        return cls(url, auth=auth, timeout_s=timeout_s)

    @property
    def _registry(self) -> RegistryConnection:
        # Made on first use, so that a client can be built (and timeout_s set) without I/O.
        if self._connection is None:
            self._connection = RegistryConnection(self.url, self._auth, self.timeout_s)
        return self._connection

    def register(self, subject: str, schema: Any) -> int:
        """Register ``schema`` (an Avro schema as dict, list or primitive name) under
        ``subject``; returns its global id."""
        text = json.dumps(schema, separators=(",", ":"))
        key = (subject, text)
        cached = self._ids.get(key)
        if cached is not None:
            return cached
        schema_id = self._registry.register(subject, text)
        self._ids[key] = schema_id
        self._schemas.setdefault(schema_id, json.loads(text))
        return schema_id

    def get_schema(self, schema_id: int) -> Any:
        """The schema registered with global id ``schema_id``, parsed from its JSON."""
        cached = self._schemas.get(schema_id)
        if cached is not None:
            return cached
        kind, text = self._registry.schema(int(schema_id))
        if kind != "AVRO":
            raise SchemaRegistryError(f"schema id {schema_id} is a {kind} schema, not Avro")
        try:
            schema = json.loads(text)
        except ValueError as exc:
            raise SchemaRegistryError(f"schema id {schema_id} is not valid JSON: {exc}") from None
        self._schemas[schema_id] = schema
        return schema

    def subjects(self) -> list[str]:
        """Every subject of the registry."""
        return self._registry.subjects()

    def versions(self, subject: str) -> list[int]:
        """The version numbers of ``subject``, oldest first."""
        return self._registry.versions(subject)

    def version(self, subject: str, version: int | str = "latest") -> SubjectVersion:
        """Version ``version`` of ``subject`` (``"latest"``: the newest)."""
        return self._registry.version(subject, version)

    def compatibility(self, subject: str | None = None) -> str | None:
        """The compatibility level of ``subject`` (``None`` when it has none of its own,
        so the global one applies), or without a subject the global level."""
        return self._registry.compatibility(subject)

    def set_compatibility(self, level: str, subject: str | None = None) -> None:
        """Set the compatibility level of ``subject``, or the global one."""
        self._registry.set_compatibility(level, subject)

    def is_compatible(self, subject: str, schema: Any) -> bool:
        """Whether the registry would accept the Avro ``schema`` as the next version of
        ``subject`` under the subject's compatibility level."""
        return self._registry.is_compatible(subject, json.dumps(schema, separators=(",", ":")))

    def close(self) -> None:
        """Close the HTTP connections (the client opens them again when used)."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def __repr__(self) -> str:
        auth = ", auth=***" if self._auth else ""
        return f"SchemaRegistryClient({self.url!r}{auth})"
