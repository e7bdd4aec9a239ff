"""A secured cluster for real: the local broker with SASL/SCRAM-SHA-512 over TLS, the KRaft
standard authorizer and ACLs (``fw broker start --security sasl_ssl``).

A service whose principal has the grants ``fw acls --grant`` creates runs exactly once, and a
backfill on Spark over the same cluster writes what it wrote; a
wrong password, a missing Write on its output topic and a missing transactional-id grant each
stop it at once with one line naming the principal, the resource and the fix. The passwords
appear nowhere: not in the service's log, not in fw's output, not in the error line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from framework.broker.local import LocalBroker
from framework.kafka.acl import Grant, grant, upsert_scram_user
from framework.runtime.topics import service_grants
from tests.integration.harness import ServiceProcess, present, service_env, wait_until
from tests.ports import worker_port_pair

ROOT = Path(__file__).resolve().parents[2]
TARGET = "tests.integration.pipelines:even_odd"
N = 300


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A broker of its own (SASL_SSL), beside the suite's plaintext one."""
    # A directory named in code: this broker is started even when FW_BOOTSTRAP_SERVERS names a cluster.
    broker = LocalBroker(tmp_path_factory.mktemp("secured-broker"), worker_port_pair(), security="sasl_ssl")
    broker.start()
    try:
        yield broker
    finally:
        broker.wipe()


def _user(broker: LocalBroker, name: str) -> tuple[str, str]:
    password = f"pw-{name}-must-never-be-printed"
    upsert_scram_user(broker.client_settings(), name, password)
    return name, password


def _security_env(broker: LocalBroker, user: str, password: str) -> dict[str, str]:
    return {"FW_BOOTSTRAP_SERVERS": broker.bootstrap,
            "FW_KAFKA_SECURITY__SECURITY_PROTOCOL": "SASL_SSL",
            "FW_KAFKA_SECURITY__SASL_MECHANISM": "SCRAM-SHA-512",
            "FW_KAFKA_SECURITY__SASL_USERNAME": user,
            "FW_KAFKA_SECURITY__SASL_PASSWORD": password,
            "FW_KAFKA_SECURITY__SSL_CA_LOCATION": str(broker.instance_dir / "tls" / "ca.pem")}


def _admin_env(broker: LocalBroker) -> dict[str, str]:
    """The super user's settings, as ``client.env`` gives them."""
    lines = broker.client_env.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def _fw(env: dict[str, str], *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "framework.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "FW_OBSERVE__PORT": "0", **env},
                          timeout=timeout_s, check=False)


def _pipeline(unique: str):  # the test pipeline, built under the test's suffix
    with mock.patch.dict(os.environ, {"FW_TEST_SUFFIX": unique}):
        from tests.integration.pipelines import even_odd

        return even_odd()


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and done.stderr.rstrip().endswith(errors[0]), done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    return errors[0]


def _read_committed(settings: dict[str, str], topic: str) -> list[tuple[bytes | None, bytes | None]]:
    c = Consumer({**settings, "group.id": "audit", "enable.auto.commit": False, "isolation.level": "read_committed",
                  "enable.partition.eof": True})
    parts = c.list_topics(topic, timeout=10).topics[topic].partitions
    c.assign([TopicPartition(topic, p, 0) for p in parts])
    out: list[tuple[bytes | None, bytes | None]] = []
    done: set[int | None] = set()
    while len(done) < len(parts):
        for m in c.consume(500, 1.0):
            if m.error():
                done.add(m.partition())
            else:
                out.append((m.key(), m.value()))
    c.close()
    return out


def test_a_granted_service_runs_exactly_once_over_sasl_ssl(secured: LocalBroker, unique: str, tmp_path: Path) -> None:
    user, password = _user(secured, f"svc-{unique}")
    admin_env = {**_admin_env(secured), "FW_TEST_SUFFIX": unique}
    granted = _fw(admin_env, "acls", TARGET, "--principal", f"User:{user}", "--grant", "--json")
    assert granted.returncode == 0, granted.stderr
    grants = json.loads(granted.stdout)
    assert {"resource": "transactional-id", "name": f"eo-{unique}-", "pattern": "prefixed", "operation": "write",
            "kafka_acls": f"--operation Write --transactional-id eo-{unique}- --resource-pattern-type prefixed"} \
        in grants

    svc = ServiceProcess(TARGET, tmp_path, "0", {**service_env(secured.bootstrap, unique),
                                                 **_security_env(secured, user, password)}).start()
    admin = secured.client_settings()
    producer = Producer({**admin, "enable.idempotence": True})
    for i in range(N):
        producer.produce(f"numbers-{unique}", json.dumps(i).encode(), f"k{i % 7}".encode())
    assert producer.flush(30) == 0

    def final_sums() -> dict[bytes | None, int]:
        sums: dict[bytes | None, int] = {}
        for k, v in _read_committed(admin, f"sums-{unique}"):
            sums[k] = json.loads(present(v))  # per key, in order: the last is the final sum
        return sums

    expected = {b"even": sum(range(0, N, 2)), b"odd": sum(range(1, N, 2))}
    # the sums come after a repartition topic: they are final after every input is seen
    wait_until(lambda: len(_read_committed(admin, f"seen-{unique}")) >= N and final_sums() == expected, 120,
               f"{N} records on seen-{unique} and their sums on sums-{unique}", svc.log_text)
    assert svc.stop() == 0
    seen = sorted(json.loads(present(v)) for _, v in _read_committed(admin, f"seen-{unique}"))
    assert seen == list(range(N))  # each exactly once
    sums = final_sums()
    assert sums == expected
    assert password not in svc.log_text()
    assert password not in granted.stdout + granted.stderr

    # A backfill on Spark over the same cluster: Spark's Kafka source (the Java client) and the
    # tasks' producers (librdkafka) both reach it with the settings of kafka.security.
    replayed = _fw(admin_env, "replay", TARGET, "--allow-nondeterministic", "--reader", "spark", "--master",
                   "local[1]", "--output", "topic", "--output-suffix", "-rp", timeout_s=600)
    assert replayed.returncode == 0, replayed.stdout[-3000:] + replayed.stderr[-3000:]
    assert sorted(json.loads(present(v)) for _, v in _read_committed(admin, f"seen-{unique}-rp")) == list(range(N))
    replayed_sums = {k: json.loads(present(v)) for k, v in _read_committed(admin, f"sums-{unique}-rp")}
    assert replayed_sums == sums
    assert secured.client_settings()["sasl.password"] not in replayed.stdout + replayed.stderr


def test_a_wrong_password_stops_the_service_with_one_line(secured: LocalBroker, unique: str, tmp_path: Path) -> None:
    user, password = _user(secured, f"svc-{unique}")
    wrong = f"{password}-but-wrong"
    done = _fw({**service_env(secured.bootstrap, unique), **_security_env(secured, user, wrong),
                "FW_STATE_DIR": str(tmp_path)}, "run", TARGET)
    line = _one_error_line(done)
    assert done.returncode == 1
    assert f"refused the login of User:{user} (SASL SCRAM-SHA-512)" in line
    assert "FW_KAFKA_SECURITY__SASL_PASSWORD" in line
    assert wrong not in done.stderr + done.stdout and password not in done.stderr + done.stdout


@pytest.mark.parametrize("left_out", ["write-on-output", "transactional-id"])
def test_a_missing_grant_stops_the_service_with_one_line_naming_it(
        secured: LocalBroker, unique: str, tmp_path: Path, left_out: str) -> None:
    user, password = _user(secured, f"svc-{unique}")
    grants = service_grants(_pipeline(unique))
    if left_out == "write-on-output":
        missing = Grant("topic", f"sums-{unique}", "write")
        # it may see the topic (Describe), as is common, but not write it
        grants = [g for g in grants if g != missing] + [Grant("topic", f"sums-{unique}", "describe")]
        expected: tuple[str, ...] = ("missing WRITE on topic", f"sums-{unique}",
                    f"kafka-acls --add --allow-principal User:{user} --operation Write --topic sums-{unique}")
    else:
        grants = [g for g in grants if g.resource != "transactional-id"]
        expected = (f"User:{user} may not use transactional id 'eo-{unique}-0'",
                    f"--allow-principal User:{user} --operation Write --transactional-id eo-{unique}-0")
    grant(secured.client_settings(), f"User:{user}", grants)
    svc = ServiceProcess(TARGET, tmp_path, "0", {**service_env(secured.bootstrap, unique),
                                                 **_security_env(secured, user, password)}).start()
    assert svc.wait_exit(120) == 1  # it stops: no retry loop
    log = svc.log_text()
    errors = [line for line in log.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in log, log
    for part in expected:
        assert part in errors[0], log
    assert password not in log


def test_sasl_plaintext_broker_and_its_client_settings(tmp_path: Path) -> None:
    broker = LocalBroker(tmp_path / "broker", worker_port_pair(), security="sasl_plaintext")
    status = broker.start()
    try:
        assert status.security == "sasl_plaintext"
        env = _admin_env(broker)
        assert env["FW_KAFKA_SECURITY__SECURITY_PROTOCOL"] == "SASL_PLAINTEXT"
        assert oct(broker.client_env.stat().st_mode & 0o777) == "0o600"
        listed = _fw(env, "topics", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        refused = _fw({**env, "FW_KAFKA_SECURITY__SASL_PASSWORD": "not-it"}, "topics", "list")
        line = _one_error_line(refused)
        assert refused.returncode == 1 and "refused the login of User:admin" in line
        assert env["FW_KAFKA_SECURITY__SASL_PASSWORD"] not in listed.stdout + listed.stderr + refused.stderr
    finally:
        broker.wipe()
