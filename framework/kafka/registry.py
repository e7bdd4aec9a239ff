"""The Confluent Schema Registry REST API through ``confluent_kafka.schema_registry``.

``RegistryConnection`` is the one place the framework talks to a registry: the public
``framework.serde.SchemaRegistryClient`` (URL, credentials, caches) delegates every request
to it. Each call names the request it makes, so that any failure becomes one
``SchemaRegistryError`` saying which request failed and why; the library's own exception
types, and those of its HTTP client, never leave this module.

The calls are the Confluent API's, which other registries speak too (Apicurio Registry's
``/apis/ccompat/v7``, for one)::

    POST /subjects/{subject}/versions            register a schema, answers its id
    GET  /schemas/ids/{id}                        a schema by id
    GET  /subjects                                every subject
    GET  /subjects/{subject}/versions[/{v}]       a subject's versions, one of them
    GET  /config[/{subject}]                      the compatibility level
    PUT  /config[/{subject}]                      set it
    POST /compatibility/subjects/{subject}/versions   would this schema be accepted?
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from framework.errors import FrameworkError

# confluent_kafka.schema_registry, imported with the first connection (``_load``): with its
# HTTP client and OAuth libraries it took 0.12-0.16 s of every process's start (each fw
# command, service member and replay worker), most of which never talk to a registry.
Schema: Any = None
_ConfluentClient: Any = None
_ConfluentError: Any = None
_http: Any = None  # the HTTP library the registry client runs on (httpx2, else httpx)


def _load() -> None:
    global Schema, _ConfluentClient, _ConfluentError, _http
    if _ConfluentClient is not None:
        return
    from confluent_kafka.schema_registry import Schema as schema_type
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.error import SchemaRegistryError as library_error

    try:
        from confluent_kafka.schema_registry.common._httpx_compat import httpx as http
    except ImportError:  # pragma: no cover - older confluent_kafka
        import httpx as http  # type: ignore[no-redef]
    Schema, _ConfluentError, _http = schema_type, library_error, http
    _ConfluentClient = SchemaRegistryClient


__all__ = ["RegistryConnection", "SchemaRegistryError", "SubjectVersion"]

T = TypeVar("T")

# Transient failures (connection refused, 503) are asked again twice within about a
# second: enough for a registry that restarts, short enough that a wrong URL is reported
# at once.
_RETRIES = 2
_RETRY_WAIT_MS = 200
_RETRY_MAX_WAIT_MS = 2_000
SUBJECT_NOT_FOUND = 40401
NO_SUBJECT_LEVEL = 40408  # the subject has no compatibility level of its own


class SchemaRegistryError(FrameworkError):
    """The registry refused a request or could not be reached.

    ``status`` is the HTTP status (``None`` when no answer came) and ``error_code`` the
    registry's own code (e.g. 40403 "schema not found", 409 "incompatible schema").
    """

    def __init__(self, message: str, status: int | None = None, error_code: int | None = None):
        super().__init__(message)
        self.status = status
        self.error_code = error_code


@dataclass(frozen=True)
class SubjectVersion:
    """One version of a subject: its number, the schema's global id, type and text."""

    subject: str
    version: int
    schema_id: int
    schema_type: str
    schema: str


class RegistryConnection:
    """Requests to one registry at ``url`` (no credentials in it: they come as ``auth``)."""

    def __init__(self, url: str, auth: tuple[str, str] | None, timeout_s: float) -> None:
        self.url = url
        conf: dict[str, Any] = {"url": url, "timeout": timeout_s, "max.retries": _RETRIES,
                                "retries.wait.ms": _RETRY_WAIT_MS, "retries.max.wait.ms": _RETRY_MAX_WAIT_MS}
        if auth is not None:
            conf["basic.auth.user.info"] = f"{auth[0]}:{auth[1]}"
        _load()
        self._client = _ConfluentClient(conf)

    def register(self, subject: str, schema: str) -> int:
        """Register the Avro ``schema`` text under ``subject``; its global id."""
        return self._call("POST", f"/subjects/{subject}/versions",
                          lambda: self._client.register_schema(subject, Schema(schema, "AVRO")))

    def schema(self, schema_id: int) -> tuple[str, str]:
        """The type (``AVRO``, ``JSON``, ``PROTOBUF``) and text of the schema ``schema_id``."""
        found = self._call("GET", f"/schemas/ids/{schema_id}", lambda: self._client.get_schema(schema_id))
        return found.schema_type or "AVRO", _text(found.schema_str)

    def subjects(self) -> list[str]:
        return list(self._call("GET", "/subjects", self._client.get_subjects))

    def versions(self, subject: str) -> list[int]:
        return sorted(self._call("GET", f"/subjects/{subject}/versions", lambda: self._client.get_versions(subject)))

    def version(self, subject: str, version: int | str = "latest") -> SubjectVersion:
        """One version of ``subject`` (``"latest"``: the newest)."""
        def ask() -> Any:
            if version == "latest":
                return self._client.get_latest_version(subject)
            return self._client.get_version(subject, int(version))

        found = self._call("GET", f"/subjects/{subject}/versions/{version}", ask)
        return SubjectVersion(subject, int(found.version), int(found.schema_id),
                              found.schema.schema_type or "AVRO", _text(found.schema.schema_str))

    def compatibility(self, subject: str | None = None) -> str | None:
        """The compatibility level of ``subject`` (``None`` when it has none of its own),
        or the registry's global one."""
        path = f"/config/{subject}" if subject else "/config"
        try:
            return str(self._call("GET", path, lambda: self._client.get_compatibility(subject)))
        except SchemaRegistryError as exc:
            if subject and exc.error_code in (NO_SUBJECT_LEVEL, SUBJECT_NOT_FOUND):
                return None
            raise

    def set_compatibility(self, level: str, subject: str | None = None) -> None:
        path = f"/config/{subject}" if subject else "/config"
        self._call("PUT", path, lambda: self._client.set_compatibility(subject, level))

    def is_compatible(self, subject: str, schema: str) -> bool:
        """Whether the registry would accept the Avro ``schema`` as the next version of
        ``subject``, under the subject's compatibility level (against every version the
        level covers: the latest, or all of them for a ``_TRANSITIVE`` level)."""
        return bool(self._call("POST", f"/compatibility/subjects/{subject}/versions",
                               lambda: self._client.test_compatibility_all_versions(subject, Schema(schema, "AVRO"))))

    def close(self) -> None:
        self._client.close()

    def _call(self, method: str, path: str, call: Callable[[], T]) -> T:
        what = f"schema registry {method} {self.url}{path}"
        try:
            return call()
        except _ConfluentError as exc:
            raise SchemaRegistryError(f"{what} failed: HTTP {exc.http_status_code}: {_message(exc)}",
                                      exc.http_status_code, _code(exc)) from None
        except (_http.TransportError, OSError) as exc:
            raise SchemaRegistryError(f"{what} failed: {_reason(exc)}") from None
        except ValueError as exc:  # the answer was not JSON
            raise SchemaRegistryError(f"{what} answered with invalid JSON: {exc}") from None
        except (KeyError, TypeError, AttributeError) as exc:  # JSON, but not a registry's answer
            raise SchemaRegistryError(f"{what} answered, but not as a schema registry does "
                                      f"({type(exc).__name__}: {exc}); is the URL the registry's API root?") from None


def _text(schema: str | None) -> str:
    if schema is None:
        raise TypeError("no schema in the answer")
    return schema


def _code(exc: _ConfluentError) -> int | None:
    return None if exc.error_code == _ConfluentError.UNKNOWN else exc.error_code


def _message(exc: _ConfluentError) -> str:
    """The registry's message, or for an answer that is not a registry's (an HTML error
    page, say) a hint instead of the page."""
    if exc.error_code == _ConfluentError.UNKNOWN:
        return "the answer is not a schema registry's; is the URL the registry's API root?"
    return " ".join(str(exc.error_message).split())


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())
