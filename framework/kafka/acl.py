"""What a service may do on a cluster with an authorizer: its ACLs, and SCRAM users.

A ``Grant`` is one permission; ``framework.runtime.topics.service_grants`` lists those a
service's member needs (this I/O layer knows topics, groups and ids, not pipelines).
``missing_grants`` asks the cluster which of them it refuses, ``grant`` creates them (what
``fw acls`` does).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from framework.errors import AccessProblem, KafkaClientError
from framework.kafka.admin import admin_client
from framework.kafka.connect import principal


@dataclass(frozen=True, slots=True, order=True)
class Grant:
    """One allowed operation on one resource (a literal name, or every name with a prefix)."""

    resource: str  # "topic", "group", "transactional-id"
    name: str
    operation: str  # "read", "write", "create"
    prefixed: bool = False

    def describe(self) -> str:
        pattern = f"names starting with {self.name!r}" if self.prefixed else repr(self.name)
        return f"{self.operation.upper()} on {self.resource} {pattern}"

    def kafka_acls_args(self) -> str:
        """The same grant as arguments of Kafka's own ``kafka-acls`` tool."""
        option = {"topic": "--topic", "group": "--group", "transactional-id": "--transactional-id"}[self.resource]
        pattern = " --resource-pattern-type prefixed" if self.prefixed else ""
        return f"--operation {self.operation.capitalize()} {option} {self.name}{pattern}"

    def binding(self, principal: str) -> AclBinding:
        restype = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP,
                   "transactional-id": ResourceType.TRANSACTIONAL_ID}[self.resource]
        return AclBinding(restype, self.name,
                          ResourcePatternType.PREFIXED if self.prefixed else ResourcePatternType.LITERAL,
                          principal, "*", AclOperation[self.operation.upper()], AclPermissionType.ALLOW)


def missing_grants(settings: Mapping[str, Any], grants: Iterable[Grant], timeout_s: float = 15.0) -> list[Grant]:
    """Those of ``grants`` (a service's: ``framework.runtime.topics.service_grants``) the
    cluster does not give the client of ``settings``, from the operations it reports as
    authorized (empty on a cluster without an authorizer). Creating topics is left out (only
    a missing topic needs it), and so are transactional ids: Kafka has no request that tells
    whether one may be used."""
    wanted = [g for g in grants if g.operation != "create"]
    topics = sorted({g.name for g in wanted if g.resource == "topic"})
    admin = admin_client(settings)
    allowed: dict[tuple[str, str], set[str] | None] = {}
    futures = admin.describe_topics(TopicCollection(topics), request_timeout=timeout_s,
                                    include_authorized_operations=True)
    for name, fut in futures.items():
        allowed[("topic", name)] = _authorized(fut, KafkaError.TOPIC_AUTHORIZATION_FAILED)
    groups = [g.name for g in wanted if g.resource == "group"]
    for name, fut in admin.describe_consumer_groups(groups, request_timeout=timeout_s,
                                                    include_authorized_operations=True).items():
        allowed[("group", name)] = _authorized(fut, KafkaError.GROUP_AUTHORIZATION_FAILED)
    missing = []
    for g in wanted:
        ops = allowed.get((g.resource, g.name))
        if ops is not None and g.operation not in ops and "all" not in ops:
            missing.append(g)
    return missing


def _authorized(fut: Any, denied_code: int) -> set[str] | None:
    """The operations a describe answer authorizes; None when the cluster does not say."""
    try:
        ops = fut.result().authorized_operations
    except KafkaException as exc:
        if exc.args and isinstance(exc.args[0], KafkaError) and exc.args[0].code() == denied_code:
            return set()
        return None  # e.g. the topic does not exist yet: creating it is another question
    return None if ops is None else {op.name.lower() for op in ops}


def denied(settings: Mapping[str, Any], service: str, missing: list[Grant]) -> AccessProblem:
    """The one line for grants the service lacks: who, what, and the command that fixes it."""
    who = principal(settings)
    what = "; ".join(g.describe() for g in missing)
    first = missing[0]
    return AccessProblem(
        f"{who} may not do what service {service!r} needs on {settings.get('bootstrap.servers', '?')}: missing "
        f"{what}. Fix: grant it, e.g. kafka-acls --add --allow-principal {who} {first.kafka_acls_args()}; "
        f"fw acls SERVICE --principal {who} lists (and with --grant creates) every grant the service needs")


def grant(settings: Mapping[str, Any], principal: str, grants: Iterable[Grant], timeout_s: float = 30.0) -> None:
    """Create the ACLs of ``grants`` for ``principal`` (``User:name``); existing ones stay."""
    admin = admin_client(settings)
    futures = admin.create_acls([g.binding(principal) for g in grants], request_timeout=timeout_s)
    for binding, fut in futures.items():
        try:
            fut.result()
        except KafkaException as exc:
            raise KafkaClientError(f"could not create the ACL {binding}: {exc.args[0].str()}") from None


def upsert_scram_user(settings: Mapping[str, Any], user: str, password: str, timeout_s: float = 30.0) -> None:
    """Create (or change the password of) SCRAM-SHA-512 user ``user``."""
    admin = admin_client(settings)
    upsertion = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password.encode())
    for fut in admin.alter_user_scram_credentials([upsertion], request_timeout=timeout_s).values():
        try:
            fut.result()
        except KafkaException as exc:
            raise KafkaClientError(f"could not set the SCRAM credential of {user!r}: {exc.args[0].str()}") from None
