"""Reaching the cluster: one metadata request, and what to tell the user when it fails.

``probe`` asks once; ``wait_for_cluster`` (a service starting) asks again with backoff for a
configurable time (``kafka.connect_timeout_ms``), logging one line while it waits. Failures
become one line naming the bootstrap address, the security protocol and what to check:

- the brokers do not answer (refused, no route, wrong listener): ``EnvironmentProblem``, after
  the wait;
- the SASL credentials are refused, or the TLS handshake fails: ``AccessProblem`` at once,
  since asking again cannot help.

librdkafka's own log lines of a probe are dropped: its error events say the same, once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata

from framework.errors import AccessProblem, EnvironmentProblem
from framework.kafka.logs import QUIET_LOG as _QUIET

log = logging.getLogger("framework.kafka")

_AUTH_CODES = (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED)
_SSL_CODES = (KafkaError._SSL,)


def principal(settings: Mapping[str, Any]) -> str:
    """The principal the cluster sees for ``settings`` (``User:<sasl.username>`` under SASL)."""
    protocol = str(settings.get("security.protocol", "plaintext")).upper()
    if protocol.startswith("SASL") and settings.get("sasl.username"):
        return f"User:{settings['sasl.username']}"
    if protocol == "SSL" and settings.get("ssl.certificate.location"):
        return "the certificate's subject"
    return "User:ANONYMOUS"


def _where(settings: Mapping[str, Any]) -> str:
    protocol = str(settings.get("security.protocol", "plaintext")).upper()
    return f"{settings.get('bootstrap.servers', '?')} (security.protocol {protocol})"


def access_problem(settings: Mapping[str, Any], err: KafkaError) -> AccessProblem:
    """The one line for a refused login or a failed TLS handshake."""
    where, reason = _where(settings), err.str()
    if err.code() in _SSL_CODES or "SSL" in reason and err.code() not in _AUTH_CODES:
        return AccessProblem(
            f"the TLS handshake with {where} failed: {reason}. Check that ssl.ca.location "
            "(FW_KAFKA_SECURITY__SSL_CA_LOCATION) names the CA that signed the broker's certificate and "
            "that the address matches the certificate")
    mechanism = settings.get("sasl.mechanism", "GSSAPI")
    return AccessProblem(
        f"{where} refused the login of {principal(settings)} (SASL {mechanism}): {reason}. Check the user "
        "name and password (FW_KAFKA_SECURITY__SASL_USERNAME, FW_KAFKA_SECURITY__SASL_PASSWORD) and that the "
        f"user has a {mechanism} credential on the cluster")


def _unreachable(settings: Mapping[str, Any], reason: str, waited_s: float) -> EnvironmentProblem:
    protocol = str(settings.get("security.protocol", "plaintext")).upper()
    waited = f" for {waited_s:.0f}s" if waited_s >= 1 else ""
    return EnvironmentProblem(
        f"cannot reach the Kafka cluster at {_where(settings)}{waited}: {reason}. Check that the brokers run "
        "(the local one: fw broker start), the address (FW_BOOTSTRAP_SERVERS) and that their listener speaks "
        f"{protocol} (FW_KAFKA_SECURITY__SECURITY_PROTOCOL)")


class ClusterProbe:
    """One quiet admin client that asks the cluster for metadata, as often as needed."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.errors: list[KafkaError] = []
        # dict[str, Any]: a logger and a callback, which confluent-kafka's stubs do not allow for
        config: dict[str, Any] = {**settings, "logger": _QUIET, "error_cb": self.errors.append,
                                  "socket.connection.setup.timeout.ms": 3000}
        self.admin = AdminClient(config)

    def ask(self, settings: Mapping[str, Any], timeout_s: float) -> ClusterMetadata | str:
        """Metadata, or why not (a string); raises ``AccessProblem`` for refused credentials."""
        try:
            md = self.admin.list_topics(timeout=timeout_s)
            if md.brokers:
                return md
            reason = "no broker in the metadata answer"
        except KafkaException as exc:
            reason = exc.args[0].str() if exc.args and isinstance(exc.args[0], KafkaError) else str(exc)
        self.admin.poll(0)  # serve the error events
        for err in self.errors:
            if err.code() in _AUTH_CODES or err.code() in _SSL_CODES:
                raise access_problem(settings, err)
        transport = [e for e in self.errors if e.code() == KafkaError._TRANSPORT]
        self.errors.clear()
        return transport[-1].str() if transport else reason

    def why_not(self, settings: Mapping[str, Any], timeout_s: float) -> str | None:
        """None when the cluster answers within ``timeout_s``, else why not."""
        answer = self.ask(settings, timeout_s)
        return answer if isinstance(answer, str) else None


def client_failure(exc: BaseException) -> str | None:
    """What a raw client exception (one the framework did not wrap) says, else None."""
    if not isinstance(exc, KafkaException):
        return None
    err = exc.args[0] if exc.args else None
    return f"the Kafka client failed: {err.str() if isinstance(err, KafkaError) else exc}"


def probe(settings: Mapping[str, Any], timeout_s: float = 6.0) -> ClusterMetadata:
    """Ask for metadata once; one-line errors when it fails."""
    answer = ClusterProbe(settings).ask(settings, timeout_s)
    if isinstance(answer, str):
        raise _unreachable(settings, answer, 0)
    return answer


def wait_for_cluster(settings: Mapping[str, Any], timeout_s: float) -> ClusterMetadata:
    """Ask for metadata until it comes, with backoff, for at most ``timeout_s``; one line is
    logged when the first attempt fails."""
    started = time.monotonic()
    deadline = started + timeout_s
    attempt, backoff = ClusterProbe(settings), 0.5
    while True:
        answer = attempt.ask(settings, min(2.0, max(deadline - time.monotonic(), 0.5)))
        if not isinstance(answer, str):
            if backoff > 0.5:
                log.info("reached the Kafka cluster at %s", _where(settings))
            return answer
        if time.monotonic() + backoff >= deadline:
            raise _unreachable(settings, answer, time.monotonic() - started)
        if backoff == 0.5:
            log.warning("cannot reach the Kafka cluster at %s yet (%s); trying again for up to %.0fs "
                        "(FW_KAFKA__CONNECT_TIMEOUT_MS)", _where(settings), answer, timeout_s)
        time.sleep(backoff)  # nothing to wait on but the clock: the brokers may be starting
        backoff = min(backoff * 2, 5.0)
