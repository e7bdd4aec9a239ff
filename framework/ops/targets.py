"""What an operations command works on: the service a ``module:pipeline`` target names (or a
service name, where a project's layout says which pipeline it is), the settings that reach
its cluster, and decoded values made printable.

``load_service`` turns every way a target can be wrong (no such module, no such attribute,
not a pipeline) into one ``ConfigError`` line that names close matches among the packages
of ``services/``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from datetime import date, datetime
from decimal import Decimal
from enum import Enum
from pathlib import Path
from typing import Any

from framework.config import Config
from framework.errors import ConfigError
from framework.kafka.logs import CLIENT_LOG
from framework.pipeline.definition import Pipeline, Topic


def is_target(service: str) -> bool:
    """True for ``module:pipeline``; a bare name is a consumer-group id."""
    return ":" in service


def load_service(target: str) -> Pipeline:
    """The pipeline ``target`` (``module:attribute``) names, imported from the current directory."""
    from framework.pipeline.loading import load_pipeline

    return load_pipeline(target)


def service_pipeline(service: str, command: str) -> Pipeline:
    """The pipeline of ``service``, for a command that needs its definition (its stores,
    topics and serdes): a ``module:pipeline`` target, or the service's name as ``fw status``
    takes it (its consumer-group id) when ``services/<package>/pipeline.py`` below the current
    directory defines that service as ``pipeline`` (the layout ``fw new service`` writes;
    ``<package>`` is the name with ``-`` as ``_``). Anything else is one ``ConfigError`` line
    that says which form to give."""
    if is_target(service):
        return load_service(service)
    package = service.replace("-", "_")
    target = f"services.{package}.pipeline:pipeline"
    if (Path("services") / package / "pipeline.py").is_file():
        pipeline = load_service(target)
        if pipeline.name == service:
            return pipeline
        found = f"{target} here is service {pipeline.name!r}"
    else:
        found = f"there is no services/{package}/pipeline.py here"
    raise ConfigError(f"fw {command} needs the pipeline's code for its stores, topics and serdes, and {found}: "
                      f"give SERVICE as module:pipeline (e.g. {target}), or run it from the project's root")


def user_topics(pipeline: Pipeline) -> dict[str, Topic]:
    """The topics a user writes to or reads from service ``pipeline``, by name: its sources,
    sinks and late topics, with their serdes (not its own internal topics)."""
    return {t.name: t for t in [*(s.topic for s in pipeline.sources()), *pipeline.sink_topics()]}


def load_config(config_file: str | None) -> Config:
    """The configuration as ``fw run`` reads it: FW_CONFIG or ``config_file``, the environment."""
    return Config.load(Path(config_file) if config_file else None)


def client_settings(config: Config) -> dict[str, Any]:
    """The connection settings of ``config`` for every client of a command. librdkafka's own
    log lines go to Python logging (``framework.kafka.client``): warnings and errors still reach
    stderr, its informational chatter (a client closing with events queued) does not."""
    return {**config.kafka.client_settings(), "logger": CLIENT_LOG}


def plain(value: Any) -> Any:
    """``value`` as JSON can carry it: tuples and sets as lists, bytes as text when they are
    printable UTF-8 (else ``{"base64": ...}``), dates, decimals and enums as text, other
    objects as their ``repr``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return raw_bytes(bytes(value))
    if isinstance(value, Mapping):
        return {k if isinstance(k, str) else str(plain(k)): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((plain(v) for v in value), key=repr)
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, Enum):
        return plain(value.value)
    if hasattr(value, "__dataclass_fields__"):
        return {name: plain(getattr(value, name)) for name in value.__dataclass_fields__}
    return repr(value)


def raw_bytes(data: bytes) -> str | dict[str, str]:
    """Bytes read without a serde: the text when they are printable UTF-8, else base64."""
    try:
        text = data.decode()
    except UnicodeDecodeError:
        text = None
    if text is not None and (text.isprintable() or not text):
        return text
    return {"base64": base64.b64encode(data).decode()}


def as_bytes(value: Any) -> bytes:
    """The bytes ``raw_bytes`` shows as ``value``: text as UTF-8, ``{"base64": ...}`` decoded;
    any other JSON value as its compact JSON. A ``ValueError`` for bad base64."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, dict) and list(value) == ["base64"] and isinstance(value["base64"], str):
        try:
            return base64.b64decode(value["base64"], validate=True)
        except binascii.Error as exc:
            raise ValueError(f"not base64: {exc}") from None
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
