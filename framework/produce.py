"""Producing records from a script: encoded with a ``Topic``'s serdes, every one acknowledged.

For the code around a service (a script that feeds it, a demo), not for services, which write
only through their pipelines::

    from framework.produce import produce

    produce(Topic("orders-purchases", key_serde=StringSerde(), value_serde=purchase_serde),
            [("o-1", {"user": "ann", "amount": 1250})])

The cluster and its security settings are the configuration's (``Config.load()``:
``FW_BOOTSTRAP_SERVERS``, a configuration file, else the local broker's address). The client
logs through the framework's logger, so librdkafka's own lines never reach the terminal: an
unreachable cluster, a refused login or a failed delivery is one ``FrameworkError`` whose
message says what went wrong and what to check.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from framework.config import Config
from framework.kafka.connect import probe
from framework.kafka.io import produce_values
from framework.pipeline import Topic

__all__ = ["produce"]

# (key, value) or (key, value, timestamp in ms since the epoch); None stays None (no key, a tombstone)
Record = tuple[Any, Any] | tuple[Any, Any, int]


def produce(topic: Topic, records: Iterable[Record], *, config: Config | None = None,
            timeout_s: float = 60.0) -> int:
    """Encode ``records`` with ``topic``'s serdes, produce them (idempotent, ``acks=all``,
    partitioned by key as the Java client does) and wait until every one is acknowledged, for
    at most ``timeout_s``. Returns how many. ``config`` defaults to ``Config.load()``.

    Raises ``EnvironmentProblem`` (or ``AccessProblem``) before producing anything when the
    cluster cannot be reached (or refuses the login), ``SerializationError`` for a record its
    serde refuses, and ``KafkaClientError`` when a delivery fails or times out."""
    config = config or Config.load()
    probe(config.kafka.client_settings())  # one line now, instead of a delivery timeout later
    return produce_values(config.kafka.bootstrap_servers, topic.name, _encoded(topic, records),
                          extra=dict(config.kafka.security), timeout_s=timeout_s)


def _encoded(topic: Topic, records: Iterable[Record]) -> Iterator[tuple[bytes | None, bytes | None, int]]:
    key_ser = topic.key_serde.bind(topic.name, True).serialize
    value_ser = topic.value_serde.bind(topic.name, False).serialize
    for key, value, *timestamp in records:
        yield (None if key is None else key_ser(key), None if value is None else value_ser(value),
               timestamp[0] if timestamp else 0)  # 0: the producer stamps it
