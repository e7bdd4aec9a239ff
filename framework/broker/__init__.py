"""The local Apache Kafka broker (KRaft) for development and tests."""

from framework.broker.local import KAFKA_VERSION, BrokerStatus, LocalBroker, external_bootstrap

__all__ = ["KAFKA_VERSION", "BrokerStatus", "LocalBroker", "external_bootstrap"]
