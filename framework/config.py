"""Configuration: one typed, frozen tree, from defaults, a TOML file, the environment and code.

Precedence, lowest first: defaults < TOML file (``file`` argument, else ``$FW_CONFIG``) <
environment < explicit overrides. The TOML file has the sections ``[kafka]``,
``[kafka.security]``, ``[kafka.consumer]``, ``[kafka.producer]``, ``[processing]``,
``[state]`` and ``[observe]``. Environment variables::

    FW_<SECTION>__<FIELD>           FW_PROCESSING__CHECKPOINT_INTERVAL_MS=500, FW_STATE__DIR=/x
    FW_KAFKA_SECURITY__<KEY>        librdkafka keys, "_" -> ".": SASL_PASSWORD -> sasl.password
    FW_KAFKA_CONSUMER__<KEY>        FW_KAFKA_PRODUCER__<KEY>   (the same, per client)
    FW_BOOTSTRAP_SERVERS  FW_STATE_DIR  FW_GUARANTEE            short aliases

When nothing names the cluster (no ``kafka.bootstrap_servers`` in the file, the environment or
the overrides), it is the local broker's address, by the rule of ``framework.home``:
``127.0.0.1:$FW_BROKER_PORT``, else the port of the broker recorded in the local broker's
directory, else ``127.0.0.1:28092``. ``Config.load_with_origins`` also says where each setting
came from (``fw doctor`` prints it for the bootstrap servers).

Empty variables count as unset. Durations are milliseconds and say so (``_ms``). Every
error names the setting (or variable), the bad value and what is accepted; secrets
(passwords, tokens, keys) never appear in ``repr`` or ``redacted()``.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from types import MappingProxyType, UnionType
from typing import Any, get_args, get_origin, get_type_hints

from framework.errors import ConfigError
from framework.home import DEFAULT_BROKER_PORT, local_broker_address

__all__ = [
    "Config", "Guarantee", "KafkaConfig", "ObserveConfig", "OnError", "ProcessingConfig", "StateConfig",
    "is_secret"
]

# Substrings of librdkafka (or our) keys whose values are credentials.
_SECRET_MARKERS = (
    "password", "secret", "token", "key.pem", "key.password", "sasl.jaas.config", "oauthbearer"
)
_REDACTED = "***"


def is_secret(key: str) -> bool:
    """Whether a setting's value is a credential that must never be printed or logged."""
    lowered = key.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


class Guarantee(str, Enum):
    EXACTLY_ONCE = "exactly_once"
    AT_LEAST_ONCE = "at_least_once"

    def __str__(self) -> str:
        return self.value


class OnError(str, Enum):
    DEAD_LETTER = "dead_letter"
    FAIL = "fail"

    def __str__(self) -> str:
        return self.value


def _empty() -> Mapping[str, str]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class KafkaConfig:
    """How to reach the cluster; ``security``/``consumer``/``producer`` go to librdkafka."""

    # Config.load puts the local broker's address here (framework.home) when nothing names one
    bootstrap_servers: str = f"127.0.0.1:{DEFAULT_BROKER_PORT}"
    security: Mapping[str, str] = field(default_factory=_empty)
    consumer: Mapping[str, str] = field(default_factory=_empty)
    producer: Mapping[str, str] = field(default_factory=_empty)
    transaction_timeout_ms: int = 60000
    connect_timeout_ms: int = 60000  # how long a starting service waits for an unreachable cluster
    create_topics: bool = True  # false: a missing source or sink topic stops the service
    # the service's own topics (repartition, changelogs, dead letters, the backfill ledger):
    # -1 and 0 take the cluster's default.replication.factor and min.insync.replicas
    internal_replication_factor: int = -1
    internal_min_insync_replicas: int = 0

    def __post_init__(self) -> None:
        # Read-only string views, whatever was passed in (dicts, TOML numbers, booleans).
        for name in _MAPPING_FIELDS:
            flat = _flatten(getattr(self, name), f"kafka.{name}")
            object.__setattr__(self, name, MappingProxyType(flat))

    def client_settings(self) -> dict[str, str]:
        """``bootstrap.servers`` plus the security settings: what every client gets."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.security}

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in _plain(self).items())
        return f"KafkaConfig({shown})"

    def __hash__(self) -> int:
        return hash(tuple(_frozen(getattr(self, f.name)) for f in fields(self)))

    def __reduce__(self) -> tuple[Any, ...]:
        # mappingproxy cannot be pickled; rebuild from plain dicts (for spawn, Spark).
        return (type(self), tuple(_thaw(getattr(self, f.name)) for f in fields(self)))


@dataclass(frozen=True, slots=True)
class ProcessingConfig:
    """How records are processed and checkpointed."""

    guarantee: Guarantee = Guarantee.EXACTLY_ONCE
    checkpoint_interval_ms: int = 1000
    consume_batch_size: int = 5000
    # How long one consume waits for a batch that is not full. Records wait for it before
    # they are processed, and the checkpoint after them too: at a low rate a batch never fills
    consume_timeout_ms: int = 10
    on_error: OnError = OnError.DEAD_LETTER
    revoke_timeout_ms: int = 30000
    max_tolerated_downtime_ms: int = 10000
    watermark_interval_ms: int = 200
    stall_warning_ms: int = 30000
    # One record in a step for this long: one WARNING naming the step, the record and the time
    # (docs/operations.md, Slow steps)
    slow_record_warning_ms: int = 5000
    # How long a member waits for a cluster it cannot reach (every broker down, a network cut)
    # before it gives up and exits; meanwhile it keeps its state and endpoint, and resumes by
    # itself from its last checkpoint when the cluster answers (docs/operations.md, Outages).
    broker_outage_timeout_ms: int = 600000
    # A static member (--instance-id) leaves the group on SIGTERM as a dynamic one does, so its
    # partitions move at once; false: it stays until its session times out, and a restart
    # within it takes the partitions back without a rebalance (docs/operations.md, Failover).
    leave_group_on_shutdown: bool = True
    # Warm copies of each task's state on this many other members, kept current from the
    # changelogs, so a task that moves restores only the tail (docs/operations.md, Warm standbys).
    standby_replicas: int = 0


@dataclass(frozen=True, slots=True)
class StateConfig:
    """Where local state lives: ``dir/<service>/<store>/<partition>``."""

    dir: Path = Path("./state")

    def __post_init__(self) -> None:
        if not isinstance(self.dir, Path):
            object.__setattr__(self, "dir", Path(self.dir))


@dataclass(frozen=True, slots=True)
class ObserveConfig:
    """Each member's HTTP endpoint (status page, /metrics, /health, /ready, /status) and the
    metrics behind it (docs/observability.md)."""

    enabled: bool = True
    host: str = "0.0.0.0"
    port: int | None = None  # None: 9400, or a free port when 9400 is taken; 0: a free port
    advertised_host: str = ""  # empty: the address the broker sees the member connect from
    interval_ms: int = 1000
    health_timeout_ms: int = 60000


@dataclass(frozen=True, slots=True)
class Config:
    """The whole configuration. Build it with ``Config.load()``; it is immutable."""

    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    processing: ProcessingConfig = field(default_factory=ProcessingConfig)
    state: StateConfig = field(default_factory=StateConfig)
    observe: ObserveConfig = field(default_factory=ObserveConfig)

    @classmethod
    def load(
        cls, file: Path | str | None = None, env: Mapping[str, str] | None = None, **overrides: Any
    ) -> Config:
        """Defaults < TOML ``file`` (or ``$FW_CONFIG``) < ``env`` (default ``os.environ``) <
        ``overrides`` (``section={"field": value}`` or a section instance); validated. Without
        a ``kafka.bootstrap_servers`` from any of them, the local broker's address."""
        return cls.load_with_origins(file, env, **overrides)[0]

    @classmethod
    def load_with_origins(
        cls, file: Path | str | None = None, env: Mapping[str, str] | None = None, **overrides: Any
    ) -> tuple[Config, Mapping[str, str]]:
        """``load``, and where each setting not left at its default came from, by
        ``"section.field"``: the variable (``"FW_BOOTSTRAP_SERVERS"``), the file
        (``"kafka.bootstrap_servers in fw.toml"``), an override, or for the bootstrap servers
        the local broker's rule (``"FW_BROKER_PORT"``, the recorded broker, its default)."""
        env = os.environ if env is None else env
        values = _Values()
        path = file if file is not None else env.get("FW_CONFIG") or None
        if path is not None:
            _apply_toml(values, Path(path), "file argument" if file is not None else "FW_CONFIG")
        _apply_env(values, env)
        _apply_overrides(values, overrides)
        if "bootstrap_servers" not in values["kafka"]:
            local = local_broker_address(env)
            _set(values, "kafka", "bootstrap_servers", local.bootstrap, local.origin)
        return _build(values), MappingProxyType(values.origins)

    def replace(self, **section_overrides: Any) -> Config:
        """A validated copy with ``section={"field": value}`` (or section instances) applied;
        mapping fields (``kafka.security`` ...) are merged key by key."""
        values = _Values({name: _fields_of(getattr(self, name)) for name in _SECTIONS})
        _apply_overrides(values, section_overrides)
        return _build(values)

    def validate(self) -> None:
        """Raise ``ConfigError`` naming the setting and the fix for any inconsistency."""
        kafka, processing = self.kafka, self.processing
        if not kafka.bootstrap_servers.strip():
            raise ConfigError("kafka.bootstrap_servers is empty; set FW_BOOTSTRAP_SERVERS")
        if processing.checkpoint_interval_ms == 0:
            raise ConfigError(
                "processing.checkpoint_interval_ms is 0: no checkpoints means no guarantee "
                "(offsets, state and outputs are committed at checkpoints). Fix: set a "
                "positive interval in milliseconds (default 1000)"
            )
        for section, name, minimum in _MINIMUMS:
            value = getattr(getattr(self, section), name)
            if value < minimum:
                what = "positive" if minimum else "zero or more"
                raise ConfigError(f"{section}.{name}={value} must be {what}")
        for section, key, reason in _RESERVED:
            if key in getattr(kafka, section):
                raise ConfigError(f"kafka.{section} must not set {key!r}: {reason}")
        if processing.guarantee is Guarantee.EXACTLY_ONCE:
            _check_transaction_timeout(kafka, processing)
        _check_poll_interval(kafka, processing)
        port = self.observe.port
        if port is not None and not 0 <= port <= 65535:
            raise ConfigError(f"observe.port={port} is not a TCP port; use 1-65535, or 0 for any free port")
        if "$(" in self.observe.advertised_host:
            raise ConfigError(
                f"observe.advertised_host={self.observe.advertised_host!r} holds a $(VAR) reference nobody expanded "
                "(Kubernetes expands them in env values, podman kube play does not): no other member could reach "
                "this one there. Fix: set FW_OBSERVE__ADVERTISED_HOST to a name the other members resolve")

    def max_poll_interval_ms(self) -> int:
        """The consumer's ``max.poll.interval.ms``: ``kafka.consumer``'s if set, else 300000 or
        longer. The loop polls at least once per checkpoint interval plus one record's time
        (it checkpoints on time), so only one record slower than the transaction timeout keeps
        it away longer; the poll interval is longer than that, so such a record ends the
        member with the transaction timeout's line, never with an eviction from the group
        (a rebalance of every member) first (docs/operations.md, "Slow steps")."""
        given = self.kafka.consumer.get("max.poll.interval.ms")
        if given is not None:
            return int(given)
        return max(300_000, _poll_floor(self.kafka, self.processing) + 30_000)

    def redacted(self) -> dict[str, Any]:
        """Plain nested dict for logging, with every secret replaced by ``"***"``."""
        return {name: _plain(getattr(self, name)) for name in _SECTIONS}


_SECTIONS: dict[str, type] = {"kafka": KafkaConfig, "processing": ProcessingConfig, "state": StateConfig,
                                  "observe": ObserveConfig}
_MAPPING_FIELDS = ("security", "consumer", "producer")
_HINTS = {cls: get_type_hints(cls) for cls in _SECTIONS.values()}
_ALIASES = {
    "FW_BOOTSTRAP_SERVERS": ("kafka", "bootstrap_servers"),
    "FW_STATE_DIR": ("state", "dir"),
    "FW_GUARANTEE": ("processing", "guarantee"),
}
_ENV_PREFIXES = {
    **{name.upper(): (name, None) for name in _SECTIONS},
    **{f"KAFKA_{m.upper()}": ("kafka", m) for m in _MAPPING_FIELDS},
}
_MINIMUMS = (  # (section, field, smallest allowed value)
    ("processing", "standby_replicas", 0),
    ("kafka", "transaction_timeout_ms", 1),
    ("processing", "checkpoint_interval_ms", 1),
    ("processing", "consume_batch_size", 1),
    ("processing", "consume_timeout_ms", 0),  # 0: poll without waiting
    ("processing", "revoke_timeout_ms", 1),
    ("processing", "max_tolerated_downtime_ms", 0),
    ("processing", "watermark_interval_ms", 1),
    ("processing", "stall_warning_ms", 1),
    ("processing", "slow_record_warning_ms", 1),
    ("processing", "broker_outage_timeout_ms", 1),
    ("observe", "interval_ms", 1),
    ("observe", "health_timeout_ms", 1),
)
_RESERVED = (  # settings the framework owns; a second way to set them would be ambiguous
    *((m, "bootstrap.servers", "use kafka.bootstrap_servers") for m in _MAPPING_FIELDS),
    ("producer", "transaction.timeout.ms", "use kafka.transaction_timeout_ms"),
    ("producer", "transactional.id", "the framework derives it from the service"),
    ("consumer", "group.id", "the consumer group is the service name"),
    ("consumer", "group.instance.id", "fw run --instance-id sets it, one per member"),
)

_BOOLEANS = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False,
             "off": False}


class _Values(dict[str, dict[str, Any]]):
    """Section -> field -> converted value, and where each value came from
    (``origins["section.field"]``, the place an error message names)."""

    def __init__(self, sections: Mapping[str, dict[str, Any]] | None = None) -> None:
        super().__init__(sections or {name: {} for name in _SECTIONS})
        self.origins: dict[str, str] = {}


def _check_transaction_timeout(kafka: KafkaConfig, processing: ProcessingConfig) -> None:
    # A transaction stays open for one checkpoint interval; the broker aborts (and fences)
    # it once older than transaction.timeout.ms, so a stall longer than the slack loses it.
    timeout, interval = kafka.transaction_timeout_ms, processing.checkpoint_interval_ms
    downtime = processing.max_tolerated_downtime_ms
    needed = interval + downtime
    if timeout >= needed:
        return
    fix = f"raise kafka.transaction_timeout_ms to at least {needed}, or lower "
    if timeout - downtime > 0:
        fix += f"processing.checkpoint_interval_ms to at most {timeout - downtime}"
    else:  # no positive interval fits: the tolerated downtime alone exceeds the timeout
        fix += f"processing.max_tolerated_downtime_ms below {timeout}"
    raise ConfigError(
        f"kafka.transaction_timeout_ms={timeout} is shorter than "
        f"processing.checkpoint_interval_ms={interval} + "
        f"processing.max_tolerated_downtime_ms={downtime} = {needed}: under exactly_once the "
        "broker would abort a transaction still open after a stall of "
        f"more than {max(timeout - interval, 0)} ms. Fix: {fix} (the broker caps the timeout at "
        "its transaction.max.timeout.ms, 900000 by default)"
    )


def _poll_floor(kafka: KafkaConfig, processing: ProcessingConfig) -> int:
    """What a member's poll interval must exceed: the longest a record may hold it."""
    return kafka.transaction_timeout_ms + processing.checkpoint_interval_ms


def _check_poll_interval(kafka: KafkaConfig, processing: ProcessingConfig) -> None:
    given = kafka.consumer.get("max.poll.interval.ms")
    if given is None or processing.guarantee is not Guarantee.EXACTLY_ONCE:
        return
    floor = _poll_floor(kafka, processing)
    try:
        value = int(given)
    except ValueError:
        raise ConfigError(f"kafka.consumer max.poll.interval.ms={given!r} is not a number of milliseconds") from None
    if value <= floor:
        raise ConfigError(
            f"kafka.consumer max.poll.interval.ms={value} is not longer than kafka.transaction_timeout_ms="
            f"{kafka.transaction_timeout_ms} + processing.checkpoint_interval_ms={processing.checkpoint_interval_ms}: "
            "a slow record would get the member evicted from its group (a rebalance of every member) before its "
            f"transaction times out. Fix: leave max.poll.interval.ms unset (the framework takes at least {floor + 30000}"
            ") or set it above that sum")


def _build(values: _Values) -> Config:
    config = Config(**{name: cls(**values[name]) for name, cls in _SECTIONS.items()})
    config.validate()
    return config


def _fields_of(section: Any) -> dict[str, Any]:
    return {f.name: _thaw(getattr(section, f.name)) for f in fields(section)}


def _apply_toml(values: _Values, path: Path, source: str) -> None:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"config file {path} (from {source}) cannot be read: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    for section, table in data.items():
        _check_known(section, _SECTIONS, f"section [{section}] in {path}")
        if not isinstance(table, dict):
            raise ConfigError(f"{section} in {path} must be a [{section}] table")
        for name, raw in table.items():
            _set(values, section, name, raw, f"{section}.{name} in {path}")


def _apply_env(values: _Values, env: Mapping[str, str]) -> None:
    set_by: dict[tuple[str, str], str] = {}
    for var in sorted(env):
        raw = env[var]
        if not var.startswith("FW_") or raw == "":
            continue
        if var in _ALIASES:
            section, name = _ALIASES[var]
        elif "__" in var:  # other FW_ variables (FW_HOME, FW_BROKER_PORT ...) are not ours
            head, _, tail = var[3:].partition("__")
            if head not in _ENV_PREFIXES:
                close = difflib.get_close_matches(head, list(_ENV_PREFIXES), 1, 0.8)
                if close:
                    raise ConfigError(f"{var}: unknown section {head}; did you mean "
                                      f"FW_{close[0]}__{tail}?")
                continue
            section, mapping = _ENV_PREFIXES[head]
            if mapping is not None:
                key = tail.lower().replace("_", ".")
                _set(values, section, mapping, {key: raw}, var)
                continue
            if tail.lower() in _MAPPING_FIELDS:
                raise ConfigError(f"{var}: set each key as FW_KAFKA_{tail}__<KEY> instead")
            by_var = {f.upper(): f for f in _HINTS[_SECTIONS[section]]}
            _check_known(tail.upper(), by_var, var, hint=f"FW_{head}__")
            name = by_var[tail.upper()]
        else:
            continue
        if (section, name) in set_by:
            raise ConfigError(f"{set_by[section, name]} and {var} both set {section}.{name}; "
                              "unset one of them")
        set_by[section, name] = var
        _set(values, section, name, raw, var)


def _apply_overrides(values: _Values, overrides: Mapping[str, Any]) -> None:
    for section, given in overrides.items():
        _check_known(section, _SECTIONS, f"override {section}=")
        if isinstance(given, _SECTIONS[section]):
            values[section] = _fields_of(given)  # a whole section replaces the section
            continue
        if not isinstance(given, Mapping):
            raise ConfigError(f"override {section}= must be a mapping of fields or a "
                              f"{_SECTIONS[section].__name__}, not {type(given).__name__}")
        for name, raw in given.items():
            _set(values, section, name, raw, f"{section}.{name} (override)")


def _set(values: _Values, section: str, name: str, raw: Any, where: str) -> None:
    """Convert ``raw`` to the field's type and store it; mapping fields merge key by key."""
    hints = _HINTS[_SECTIONS[section]]
    _check_known(name, hints, where, hint=f"{section}.")
    values.origins[f"{section}.{name}"] = where
    hint = hints[name]
    if get_origin(hint) is Mapping:
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{where} must be a table of librdkafka settings")
        merged = dict(values[section].get(name, {}))
        merged.update(_flatten(raw, f"{section}.{name}"))
        values[section][name] = merged
    else:
        values[section][name] = _convert(hint, raw, where, name)


def _convert(hint: Any, raw: Any, where: str, name: str) -> Any:
    if isinstance(hint, UnionType):  # ``int | None``: None (or an empty string) unsets it
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            return None
        hint = next(h for h in get_args(hint) if h is not type(None))
    if hint is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in _BOOLEANS:
            return _BOOLEANS[raw.strip().lower()]
        raise ConfigError(f"{where}={raw!r} is not valid; expected true or false")
    if isinstance(hint, type) and issubclass(hint, Enum):
        if isinstance(raw, hint):
            return raw
        if isinstance(raw, str):
            try:
                return hint(raw.strip().lower().replace("-", "_"))
            except ValueError:
                pass
        accepted = ", ".join(member.value for member in hint)
        raise ConfigError(f"{where}={raw!r} is not valid; accepted values: {accepted}")
    if hint is int:
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        if isinstance(raw, str):
            try:
                return int(raw.strip())
            except ValueError:
                pass
        unit = " of milliseconds" if name.endswith("_ms") else ""
        raise ConfigError(f"{where}={raw!r} is not valid; expected a whole number{unit}")
    if hint is Path:
        if isinstance(raw, (str, os.PathLike)) and os.fspath(raw).strip():
            return Path(os.fspath(raw)).expanduser()
        raise ConfigError(f"{where}={raw!r} is not valid; expected a directory path")
    if isinstance(raw, str):
        return raw
    raise ConfigError(f"{where}={raw!r} is not valid; expected a string")


def _check_known(name: str, known: Mapping[str, Any], where: str, hint: str = "") -> None:
    if name in known:
        return
    close = difflib.get_close_matches(name, list(known), 3, 0.6)
    listed = ", ".join(hint + k for k in (close or known))
    suggestion = f"did you mean {listed}?" if close else f"known: {listed}"
    raise ConfigError(f"{where}: unknown setting {name!r}; {suggestion}")


def _flatten(settings: Mapping[str, Any], where: str, prefix: str = "") -> dict[str, str]:
    """``{"sasl": {"mechanism": "PLAIN"}}`` (unquoted TOML keys) -> ``{"sasl.mechanism": ..}``;
    values become the strings librdkafka expects (``True`` -> ``"true"``)."""
    flat: dict[str, str] = {}
    for key, value in settings.items():
        full = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, where, f"{full}."))
        elif isinstance(value, bool):
            flat[full] = "true" if value else "false"
        elif isinstance(value, (str, int, float)):
            flat[full] = str(value)
        else:
            shown = _REDACTED if is_secret(full) else repr(value)
            raise ConfigError(f"{where}[{full!r}]={shown} must be a string, number or boolean")
    return flat


def _plain(section: Any) -> dict[str, Any]:
    """A section as plain values for printing, secrets replaced."""
    out: dict[str, Any] = {}
    for f in fields(section):
        value = getattr(section, f.name)
        if isinstance(value, Mapping):
            value = {k: _REDACTED if is_secret(k) else v for k, v in value.items()}
        elif isinstance(value, Enum):
            value = value.value
        elif isinstance(value, Path):
            value = str(value)
        out[f.name] = _REDACTED if is_secret(f.name) else value
    return out


def _thaw(value: Any) -> Any:
    return dict(value) if isinstance(value, Mapping) else value


def _frozen(value: Any) -> Any:
    return tuple(sorted(value.items())) if isinstance(value, Mapping) else value
