"""The cluster's security settings, given for librdkafka, as Spark's Kafka source (the Java
client) takes them; what it cannot take is refused with the way around it."""

from __future__ import annotations

import pytest

from framework.errors import ConfigError
from framework.kafka.java import java_security


def test_sasl_over_tls_becomes_a_jaas_login_and_a_pem_truststore() -> None:
    got = java_security({"security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "svc",
                         "sasl.password": 'p"w\\1', "ssl.ca.location": "/etc/ca.pem"}, "x")
    assert got == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="svc" '
                            'password="p\\"w\\\\1";',
        "ssl.truststore.type": "PEM", "ssl.truststore.location": "/etc/ca.pem"}


def test_plain_sasl_and_no_host_name_check() -> None:
    got = java_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN", "sasl.username": "u",
                         "sasl.password": "p", "ssl.endpoint.identification.algorithm": "none"}, "x")
    assert got["sasl.jaas.config"].startswith("org.apache.kafka.common.security.plain.PlainLoginModule required ")
    assert got["ssl.endpoint.identification.algorithm"] == ""


def test_no_settings_is_plaintext() -> None:
    assert java_security({}, "x") == {"security.protocol": "PLAINTEXT"}


@pytest.mark.parametrize("security, named", [
    ({"security.protocol": "SSL", "ssl.key.location": "/k.pem", "ssl.certificate.location": "/c.pem"},
     "ssl.certificate.location, ssl.key.location"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "not OAUTHBEARER"),
    ({"security.protocol": "SASL_SSL"}, "sasl.mechanism"),
])
def test_what_the_java_client_cannot_be_given_is_refused_with_the_other_reader(security: dict, named: str) -> None:
    with pytest.raises(ConfigError, match="--reader librdkafka") as refused:
        java_security(security, "fw replay --reader spark")
    assert named in str(refused.value) and str(refused.value).startswith("fw replay --reader spark reads")
