"""The cluster's security settings, given for librdkafka (``kafka.security``), as the Java
client takes them: what Spark's Kafka source needs to read a secured cluster (``fw replay
--reader spark``, ``fw archive``). A setting without a Java counterpart here is refused with
the way around it, never dropped: a reader without it would fail later, less clearly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from framework.errors import ConfigError

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_TRANSLATED = ("security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
               "ssl.ca.location", "ssl.endpoint.identification.algorithm")


def java_security(security: Mapping[str, Any], reader: str) -> dict[str, str]:
    """``security`` (librdkafka's keys) as the Java client's settings. ``reader`` names what
    reads with them, for the error that refuses a setting."""
    unknown = sorted(k for k in security if k not in _TRANSLATED)
    if unknown:
        raise ConfigError(
            f"{reader} reads with Spark's Kafka source (the Java client), and the framework cannot give it "
            f"kafka.security {', '.join(unknown)}. Fix: replay with --reader librdkafka (the tasks read with the "
            "framework's own client and these settings as they are), or read from a listener that needs only "
            "SASL (PLAIN, SCRAM) and a CA file")
    out: dict[str, str] = {}
    protocol = str(security.get("security.protocol", "plaintext")).upper()
    out["security.protocol"] = protocol
    mechanism = str(security.get("sasl.mechanism") or security.get("sasl.mechanisms") or "")
    if protocol.startswith("SASL"):
        module = _LOGIN_MODULES.get(mechanism.upper())
        if module is None:
            given = f"PLAIN or SCRAM-SHA-256/512, not {mechanism}" if mechanism else \
                "only when kafka.security sasl.mechanism names it"
            raise ConfigError(f"{reader} reads with Spark's Kafka source, which the framework can give SASL "
                              f"mechanism {given}. Fix: replay with --reader librdkafka")
        out["sasl.mechanism"] = mechanism.upper()
        out["sasl.jaas.config"] = (f'{module} required username="{_quoted(security.get("sasl.username", ""))}" '
                                   f'password="{_quoted(security.get("sasl.password", ""))}";')
    if security.get("ssl.ca.location"):
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.location"] = str(security["ssl.ca.location"])
    if "ssl.endpoint.identification.algorithm" in security:
        algorithm = str(security["ssl.endpoint.identification.algorithm"])
        out["ssl.endpoint.identification.algorithm"] = "" if algorithm.lower() == "none" else algorithm
    return out


def _quoted(value: Any) -> str:
    # inside a JAAS option's double quotes, a backslash escapes the next character
    return str(value).replace("\\", "\\\\").replace('"', '\\"')
