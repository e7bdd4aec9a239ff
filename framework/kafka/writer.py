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
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from framework.errors import FatalKafkaError, KafkaClientError
from framework.kafka.logs import CLIENT_LOG

log = logging.getLogger("framework.kafka.writer")
Headers = Sequence[tuple[str, bytes]] | None


class ResumableWriter:
    """One task's transactional producer with a progress marker (see the module docstring)."""

    def __init__(self, settings: Mapping[str, Any], transactional_id: str, marker_group: str,
                 marker: tuple[str, int], *, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self.marker = TopicPartition(*marker)
        self.written = 0
        self._p = Producer({
            **settings, "transactional.id": transactional_id, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "compression.type": "lz4", "partitioner": "murmur2_random",
            "transaction.timeout.ms": 600_000, "queue.buffering.max.messages": 500_000, "logger": CLIENT_LOG,
        })
        self._group = Consumer({**settings, "group.id": marker_group, "enable.auto.commit": False, "logger": CLIENT_LOG})

    def resume(self) -> int:
        """Fence every earlier attempt, and return the position it committed (0: none)."""
        try:
            self._p.init_transactions(self.timeout_s)
            [found] = self._retry(lambda: self._group.committed([self.marker], timeout=self.timeout_s))
        except KafkaException as exc:
            raise FatalKafkaError(f"cannot start the transactional writer: {exc}") from exc
        self._p.begin_transaction()
        return max(found.offset, 0)

    def produce(self, topic: str, key: bytes | None, value: bytes | None, timestamp: int, headers: Headers = None,
                partition: int | None = None) -> None:
        # Positional (topic, value, key, partition, on_delivery, callback, timestamp, headers):
        # a kwargs dict per record costs more than the call. No delivery report: a failed
        # delivery fails the transaction's commit.
        part = -1 if partition is None else partition  # -1: the partitioner chooses, by key
        hdrs = list(headers) if headers else None
        while True:
            try:
                self._p.produce(topic, value, key, part, None, None, timestamp or 0, hdrs)
                break
            except BufferError:
                self._p.poll(0.05)  # local queue full: let deliveries drain
        self.written += 1

    def commit(self, position: int) -> None:
        """Commit what was produced, with ``position`` as the marker, and begin the next transaction."""
        offsets = [TopicPartition(self.marker.topic, self.marker.partition, position)]
        try:
            self._retry(lambda: self._p.send_offsets_to_transaction(offsets, self._group.consumer_group_metadata(),
                                                                    self.timeout_s))
            self._retry(lambda: self._p.commit_transaction(self.timeout_s))
        except KafkaException as exc:
            raise KafkaClientError(f"the backfill transaction failed: {exc}") from exc
        self._p.begin_transaction()

    def close(self) -> None:
        try:
            self._p.abort_transaction(self.timeout_s)  # the empty transaction begun after the last commit
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
