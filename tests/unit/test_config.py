"""Configuration: defaults, precedence, conversion, validation messages, secrets, immutability."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path
from typing import Any

import pytest

from framework.config import (
    Config,
    Guarantee,
    KafkaConfig,
    OnError,
    ProcessingConfig,
    is_secret,
)
from framework.errors import ConfigError

TOML = """
[kafka]
bootstrap_servers = "file:9092"
transaction_timeout_ms = 90000

[kafka.security]
"security.protocol" = "SASL_SSL"
sasl.mechanism = "PLAIN"          # unquoted dotted key: a nested table, flattened

[kafka.consumer]
"session.timeout.ms" = 45000
"enable.partition.eof" = false

[processing]
checkpoint_interval_ms = 2000
consume_batch_size = 100
guarantee = "at_least_once"

[state]
dir = "/var/lib/file-state"
"""


@pytest.fixture
def toml_file(tmp_path: Path) -> Path:
    path = tmp_path / "fw.toml"
    path.write_text(TOML)
    return path


def test_defaults(tmp_path: Path) -> None:
    config = Config.load(env={"FW_BROKER_DIR": str(tmp_path)})  # a directory no broker ran in
    assert config == Config()
    assert config.kafka.bootstrap_servers == "127.0.0.1:28092"
    assert config.kafka.transaction_timeout_ms == 60000
    assert config.processing.guarantee is Guarantee.EXACTLY_ONCE
    assert config.processing.on_error is OnError.DEAD_LETTER
    assert config.processing.checkpoint_interval_ms == 1000
    assert config.state.dir == Path("./state")
    assert dict(config.kafka.security) == {}


def test_file_values_and_toml_types(toml_file: Path) -> None:
    config = Config.load(file=toml_file, env={})
    assert config.kafka.bootstrap_servers == "file:9092"
    assert dict(config.kafka.security) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
    }
    # librdkafka wants strings: TOML numbers and booleans are converted
    assert dict(config.kafka.consumer) == {
        "session.timeout.ms": "45000",
        "enable.partition.eof": "false",
    }
    assert config.processing.guarantee is Guarantee.AT_LEAST_ONCE
    assert config.state.dir == Path("/var/lib/file-state")


def test_precedence_file_then_env_then_overrides(toml_file: Path) -> None:
    env = {
        "FW_CONFIG": str(toml_file),
        "FW_BOOTSTRAP_SERVERS": "env:9092",
        "FW_PROCESSING__CHECKPOINT_INTERVAL_MS": "3000",
        "FW_KAFKA_SECURITY__SASL_PASSWORD": "pw",
    }
    config = Config.load(env=env, processing={"checkpoint_interval_ms": 4000})
    assert config.processing.checkpoint_interval_ms == 4000  # override beats env and file
    assert config.kafka.bootstrap_servers == "env:9092"  # env beats file
    assert config.processing.consume_batch_size == 100  # file beats default
    assert config.kafka.transaction_timeout_ms == 90000
    # mappings merge across layers, key by key
    assert config.kafka.security["security.protocol"] == "SASL_SSL"
    assert config.kafka.security["sasl.password"] == "pw"


def test_file_argument_beats_fw_config(toml_file: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.toml"
    other.write_text('[kafka]\nbootstrap_servers = "other:9092"\n')
    config = Config.load(file=other, env={"FW_CONFIG": str(toml_file)})
    assert config.kafka.bootstrap_servers == "other:9092"
    with pytest.raises(ConfigError, match="FW_CONFIG"):
        Config.load(env={"FW_CONFIG": str(tmp_path / "missing.toml")})


def test_environment_mapping_and_conversion() -> None:
    config = Config.load(
        env={
            "FW_GUARANTEE": "AT-LEAST-ONCE",
            "FW_PROCESSING__ON_ERROR": "fail",
            "FW_PROCESSING__CONSUME_BATCH_SIZE": " 250 ",
            "FW_STATE_DIR": "/var/lib/x",
            "FW_KAFKA_SECURITY__SECURITY_PROTOCOL": "SSL",
            "FW_KAFKA_CONSUMER__FETCH_MAX_BYTES": "1048576",
            "FW_KAFKA_PRODUCER__LINGER_MS": "5",
            "FW_HOME": "/elsewhere",  # other components' variables are left alone
            "FW_BROKER_PORT": "39192",
            "FW_SCHEMA_REGISTRY_URL": "http://registry:8081",
            "FW_PROCESSING__REVOKE_TIMEOUT_MS": "",  # empty = unset
        }
    )
    assert config.processing.guarantee is Guarantee.AT_LEAST_ONCE
    assert config.processing.on_error is OnError.FAIL
    assert config.processing.consume_batch_size == 250
    assert config.processing.revoke_timeout_ms == 30000
    assert config.state.dir == Path("/var/lib/x")
    assert dict(config.kafka.security) == {"security.protocol": "SSL"}
    assert dict(config.kafka.consumer) == {"fetch.max.bytes": "1048576"}
    assert dict(config.kafka.producer) == {"linger.ms": "5"}
    assert Config.load(env={"FW_STATE__DIR": "/srv/s"}).state.dir == Path("/srv/s")


@pytest.mark.parametrize(
    ("var", "value", "expected"),
    [
        ("FW_PROCESSING__CHECKPOINT_INTERVAL_MS", "1s", ["'1s'", "whole number of milliseconds"]),
        ("FW_PROCESSING__CONSUME_BATCH_SIZE", "many", ["'many'", "whole number"]),
        ("FW_GUARANTEE", "exactly", ["'exactly'", "exactly_once, at_least_once"]),
        ("FW_PROCESSING__ON_ERROR", "ignore", ["'ignore'", "dead_letter, fail"]),
        ("FW_KAFKA__TRANSACTION_TIMEOUT_MS", "1.5", ["'1.5'", "whole number"]),
    ],
)
def test_bad_env_value_names_the_variable(var: str, value: str, expected: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        Config.load(env={var: value})
    message = str(info.value)
    assert var in message
    for fragment in expected:
        assert fragment in message


def test_bad_file_value_names_the_setting_and_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[processing]\ncheckpoint_interval_ms = "soon"\n')
    with pytest.raises(ConfigError, match=r"checkpoint_interval_ms in .*bad.toml='soon'"):
        Config.load(file=path, env={})


def test_unknown_keys_suggest_close_matches(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="did you mean FW_PROCESSING__CHECKPOINT_INTERVAL_MS"):
        Config.load(env={"FW_PROCESSING__CHECKPOINT_INTERVALMS": "5"})
    with pytest.raises(ConfigError, match="did you mean FW_PROCESSING__X"):
        Config.load(env={"FW_PROCESING__X": "5"})
    path = tmp_path / "typo.toml"
    path.write_text("[processing]\ncheckpoint_intervall_ms = 5\n")
    with pytest.raises(ConfigError, match="did you mean processing.checkpoint_interval_ms"):
        Config.load(file=path, env={})
    path.write_text("[procesing]\n")
    with pytest.raises(ConfigError, match="did you mean processing"):
        Config.load(file=path, env={})
    with pytest.raises(ConfigError, match="did you mean processing.guarantee"):
        Config().replace(processing={"guarantees": "fail"})


def test_transaction_timeout_check_names_both_settings_and_the_fix() -> None:
    env = {
        "FW_KAFKA__TRANSACTION_TIMEOUT_MS": "2500",
        "FW_PROCESSING__MAX_TOLERATED_DOWNTIME_MS": "2000",
    }
    with pytest.raises(ConfigError) as info:
        Config.load(env=env)
    message = str(info.value)
    assert "kafka.transaction_timeout_ms=2500" in message
    assert "processing.checkpoint_interval_ms=1000" in message
    assert "at least 3000" in message
    assert "processing.checkpoint_interval_ms to at most 500" in message
    # at-least-once has no transactions: the same numbers are fine
    assert Config.load(env={**env, "FW_GUARANTEE": "at_least_once"}).kafka.transaction_timeout_ms


@pytest.mark.parametrize(
    ("processing", "expected"),
    [
        ({"checkpoint_interval_ms": 0}, "no checkpoints means no guarantee"),
        ({"checkpoint_interval_ms": -5}, "processing.checkpoint_interval_ms=-5 must be positive"),
        ({"consume_batch_size": 0}, "processing.consume_batch_size=0 must be positive"),
        ({"consume_timeout_ms": -1}, "processing.consume_timeout_ms=-1 must be zero or more"),
    ],
)
def test_validate_rejects_bad_numbers(processing: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        Config.load(env={}, processing=processing)
    config = Config(processing=dataclasses.replace(ProcessingConfig(), **processing))
    with pytest.raises(ConfigError, match=expected):
        config.validate()


def test_framework_owned_librdkafka_keys_are_rejected() -> None:
    with pytest.raises(ConfigError, match="use kafka.transaction_timeout_ms"):
        Config.load(env={"FW_KAFKA_PRODUCER__TRANSACTION_TIMEOUT_MS": "1000"})
    with pytest.raises(ConfigError, match="both set kafka.bootstrap_servers"):
        Config.load(env={"FW_BOOTSTRAP_SERVERS": "a:1", "FW_KAFKA__BOOTSTRAP_SERVERS": "b:1"})


def test_secrets_are_redacted_but_reach_the_client(tmp_path: Path) -> None:
    secrets = {
        "sasl.password": "pw-1",
        "sasl.jaas.config": "jaas-2",
        "ssl.key.password": "key-3",
        "ssl.key.pem": "pem-4",
        "sasl.oauthbearer.client.secret": "oauth-5",
    }
    config = Config.load(
        env={"FW_KAFKA_SECURITY__SASL_PASSWORD": "pw-1", "FW_BROKER_DIR": str(tmp_path)},
        kafka={"security": {**secrets, "sasl.username": "alice"}},
    )
    shown = [repr(config), str(config), repr(config.kafka), str(config.redacted())]
    for text in shown:
        for value in secrets.values():
            assert value not in text
        assert "alice" in text  # a user name is not a secret
    assert config.redacted()["kafka"]["security"]["sasl.password"] == "***"
    settings = config.kafka.client_settings()
    assert settings["bootstrap.servers"] == "127.0.0.1:28092"
    assert {k: settings[k] for k in secrets} == secrets
    assert is_secret("sasl.oauthbearer.token.endpoint.url") and not is_secret("sasl.username")


def test_config_is_frozen() -> None:
    config = Config.load(env={"FW_KAFKA_SECURITY__SASL_USERNAME": "u"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.processing = ProcessingConfig()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.processing.checkpoint_interval_ms = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.kafka.security["sasl.username"] = "mallory"  # type: ignore[index]
    with pytest.raises(TypeError):
        KafkaConfig(security={"a": "b"}).security["a"] = "c"  # type: ignore[index]


def test_replace_returns_a_validated_copy() -> None:
    config = Config.load(env={"FW_KAFKA_SECURITY__SECURITY_PROTOCOL": "SSL"})
    changed = config.replace(
        processing={"guarantee": "at_least_once"}, kafka={"security": {"sasl.username": "u"}}
    )
    assert config.processing.guarantee is Guarantee.EXACTLY_ONCE  # original untouched
    assert changed.processing.guarantee is Guarantee.AT_LEAST_ONCE
    assert dict(changed.kafka.security) == {"security.protocol": "SSL", "sasl.username": "u"}
    assert changed.replace(kafka=KafkaConfig()).kafka == KafkaConfig()
    with pytest.raises(ConfigError, match="no checkpoints"):
        config.replace(processing={"checkpoint_interval_ms": 0})


def test_config_pickles_and_hashes() -> None:
    config = Config.load(env={"FW_KAFKA_CONSUMER__FETCH_MIN_BYTES": "1"})
    copy = pickle.loads(pickle.dumps(config))
    assert copy == config and hash(copy) == hash(config)
    assert isinstance(copy.kafka.consumer, type(config.kafka.consumer))  # still read-only


def test_observe_section_from_the_environment_and_toml(tmp_path: Path) -> None:
    assert Config.load(env={}).observe.port is None  # 9400, or a free port when taken
    env = Config.load(env={"FW_OBSERVE__ENABLED": "false", "FW_OBSERVE__PORT": "0",
                           "FW_OBSERVE__INTERVAL_MS": "250"}).observe
    assert (env.enabled, env.port, env.interval_ms) == (False, 0, 250)
    file = tmp_path / "observe.toml"
    file.write_text("[observe]\nenabled = true\nport = 9500\nadvertised_host = \"worker-3\"\n")
    from_file = Config.load(file, env={}).observe
    assert (from_file.enabled, from_file.port, from_file.advertised_host) == (True, 9500, "worker-3")
    with pytest.raises(ConfigError, match=r"FW_OBSERVE__ENABLED='maybe' is not valid; expected true or false"):
        Config.load(env={"FW_OBSERVE__ENABLED": "maybe"})
    with pytest.raises(ConfigError, match=r"observe.port=70000 is not a TCP port"):
        Config.load(env={"FW_OBSERVE__PORT": "70000"})
    with pytest.raises(ConfigError, match=r"observe.interval_ms=0 must be positive"):
        Config.load(env={"FW_OBSERVE__INTERVAL_MS": "0"})
