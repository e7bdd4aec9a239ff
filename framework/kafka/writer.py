"""Exactly-once writes of a batch task that its engine may run more than once (a Spark task
retried, or recomputed after a lost executor).

Each task has its own ``transactional.id``: a new attempt's ``init_transactions`` fences the
old one and aborts its open transaction. What a committed transaction wrote cannot be
aborted, so every commit also records, in the same transaction, how far the task got: the
offset of a *marker* partition in a consumer group of the run (``send_offsets_to_transaction``,
as a consumer-process-produce loop commits its input). An attempt starts by reading that
marker (``resume``) and does not write again what an earlier attempt committed: the task's
input and its outputs are deterministic, so the position says exactly which outputs those
were.

The records go through the live service's producer (``KafkaOutput``): a record the producer
or the topic would refuse (too large, a timestamp too far from now) is that record's error
and becomes its dead letter, as in the live service.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from framework.errors import FatalKafkaError, KafkaClientError
from framework.kafka.clients import KafkaOutput
from framework.kafka.logs import CLIENT_LOG

log = logging.getLogger("framework.kafka.writer")

# A batch task's outputs become visible when it commits, whenever they were sent, so its
# producer waits longer than the live one's 5 ms to fill a batch: the broker took half the CPU
# per million records, and a local[2] replay of W1 on two cores ran 11-16% faster (local[1]
# within the noise; benchmarks/NOTES.md). The service's own kafka.producer linger.ms wins.
BATCH_LINGER_MS = 200

# A new producer learns the brokers from its bootstrap server and, with librdkafka's sparse
# connections, connects to the transaction coordinator only when a timer selects it: a task's
# init_transactions took 0.05 s, and 0.5 s one time in four. Connecting to the brokers it
# learns at once, it takes 3 ms (benchmarks/NOTES.md). A task's producer writes to every
# partition of its output topics, so it connects to their leaders anyway.
BATCH_PRODUCER = {"linger.ms": BATCH_LINGER_MS, "enable.sparse.connections": False}


class ResumableWriter:
    """One task's transactional producer with a progress marker (see the module docstring).
    ``settings``: the cluster's (bootstrap servers, security); ``producer``: the service's
    producer settings (``kafka.producer``); ``limits``: the timestamps each topic accepts,
    ``(before, after)`` ms (``KafkaOutput.limit_timestamps``)."""

    def __init__(self, settings: Mapping[str, Any], transactional_id: str, marker_group: str,
                 marker: tuple[str, int], *, producer: Mapping[str, Any] | None = None,
                 limits: Mapping[str, tuple[int | None, int | None]] | None = None, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self.marker = TopicPartition(*marker)
        self.output = KafkaOutput({**settings, **BATCH_PRODUCER, **(producer or {}),
                                   "transaction.timeout.ms": 600_000}, transactional_id)
        if limits:
            self.output.limit_timestamps(limits)
        self.produce = self.output.produce  # the Output protocol's call, as the runner makes it
        self._group = Consumer({**settings, "group.id": marker_group, "enable.auto.commit": False,
                                "enable.sparse.connections": False, "logger": CLIENT_LOG})

    def resume(self) -> int:
        """Fence every earlier attempt, and return the position it committed (0: none)."""
        self.output.init_transactions(self.timeout_s)
        try:
            [found] = self._retry(lambda: self._group.committed([self.marker], timeout=self.timeout_s))
        except KafkaException as exc:
            raise FatalKafkaError(f"cannot start the transactional writer: {exc}") from exc
        self.output.begin()
        return max(found.offset, 0)

    def commit(self, position: int) -> None:
        """Commit what was produced, with ``position`` as the marker, and begin the next transaction."""
        marker = {(self.marker.topic, self.marker.partition): position}
        try:
            self._retry(lambda: self.output.send_offsets(marker, self._group.consumer_group_metadata(),
                                                         self.timeout_s))
            self._retry(lambda: self.output.commit(self.timeout_s))
        except KafkaException as exc:
            raise KafkaClientError(f"the backfill transaction failed: {exc}") from exc
        self.output.begin()

    def close(self) -> None:
        try:
            self.output.abort(self.timeout_s)  # the empty transaction begun after the last commit
        except KafkaException:
            pass
        self._group.close()

    @staticmethod
    def _retry(call: Any) -> Any:
        for attempt in range(5):
            try:
                return call()
            except KafkaException as exc:
                err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                if err is None or not err.retriable() or attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")
