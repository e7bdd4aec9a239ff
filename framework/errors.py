"""Exceptions raised by the framework.

One root, ``FrameworkError``; every error the framework raises on purpose derives from it::

    FrameworkError
    ├── UsageError             the command, its arguments or settings are wrong (``fw`` exits 2)
    │   ├── ConfigError        a setting is wrong or missing; names the setting and the fix
    │   └── PipelineError      the pipeline definition is invalid (unknown step, bad wiring)
    ├── RuntimeProblem         well asked, but what it works on is not as needed (a topic missing
    │                          or there already, a group with members, offsets outside the log)
    ├── EnvironmentProblem     the machine lacks something (java, mvn, a reachable broker)
    ├── BrokerError            the local broker could not be started, reached or stopped
    ├── RecordError            about one record; prints ``topic[partition]@offset`` and step
    │   ├── DeserializationError
    │   ├── SerializationError
    │   │   └── RecordTooLargeError  larger than the producer may send (message.max.bytes)
    │   ├── ProcessingError    user code raised while processing the record
    │   └── TimestampError     no usable event timestamp, or one the output topic refuses
    ├── KafkaClientError       a client call failed; carries the librdkafka error
    │   └── FatalKafkaError    the producer/consumer cannot continue
    │       ├── AccessProblem  the cluster refused the login or an operation (ACLs)
    │       ├── FencedError    another process took over the member's instance or transactional id
    │       ├── OutageTooLong  the cluster stayed unreachable past processing.broker_outage_timeout_ms
    │       └── SlowRecord     one record held its transaction past kafka.transaction_timeout_ms
    └── StateError             a state store could not be opened, restored or written
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class FrameworkError(Exception):
    """Root of every error the framework raises on purpose."""


class UsageError(FrameworkError):
    """The command, its arguments, its settings or the pipeline it names are wrong: fixed by
    asking differently (``fw`` exits 2; every other error exits 1)."""


class RuntimeProblem(FrameworkError):
    """The command is well formed, but what it works on is not in the state it needs."""


class ConfigError(UsageError):
    """A configuration value is invalid; the message names the setting and how to fix it."""


class EnvironmentProblem(FrameworkError):
    """A required tool or resource is missing on this machine."""


class BrokerError(FrameworkError):
    """The local broker could not be started, reached or stopped."""


class PipelineError(UsageError):
    """The pipeline definition is invalid."""


class StateError(FrameworkError):
    """A state store could not be opened, restored or written."""


class StoreLocked(StateError):
    """A state store's directory is held by another process (or another handle)."""


class KafkaClientError(FrameworkError):
    """A Kafka client call failed."""


class FatalKafkaError(KafkaClientError):
    """The client is in a state it cannot leave (fenced, fatal error): the process must stop."""


class FencedError(FatalKafkaError):
    """Another process joined with this member's instance id, or started a producer with its
    transactional id: this one must stop (names the id and the fix)."""


class OutageTooLong(FatalKafkaError):
    """The cluster could not be reached for longer than ``processing.broker_outage_timeout_ms``."""


class SlowRecord(FatalKafkaError):
    """One record stayed in a step while its transaction outlived ``kafka.transaction_timeout_ms``:
    the broker aborts the transaction, so the member stops (names the step, the record and the
    fix)."""


class AccessProblem(FatalKafkaError):
    """The cluster refused the client's login or one of its operations: names the principal,
    the resource and the grant or setting that fixes it. Asking again cannot help."""


@dataclass(frozen=True, slots=True)
class RecordCoordinates:
    """Where a record came from: enough to find it again with any Kafka tool."""

    topic: str
    partition: int
    offset: int
    key: bytes | None = None
    timestamp: int | None = None
    origin: str | None = None  # ``topic[partition]@offset`` of the input record it was made from

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"

    def described(self) -> str:
        """The record for people: its origin first when it crossed a repartition topic
        (``orders[0]@42 (through shop-by-user-repartition[1]@7)``), else ``topic[partition]@offset``."""
        return described(str(self), self.origin)


def described(here: str, origin: str | None) -> str:
    """A record named for people (``RecordCoordinates.described``) from its coordinates and
    its origin's, as text: what error lines and dead letters' ``fw.error.message`` start with."""
    return here if origin is None or origin == here else f"{origin} (through {here})"


class RecordError(FrameworkError):
    """An error about one record: knows its coordinates and the step that met it."""

    def __init__(
        self,
        message: str,
        coordinates: RecordCoordinates | None = None,
        step: str | None = None,
        fix: str | None = None,
    ) -> None:
        self.message = message
        self.coordinates = coordinates
        self.step = step
        self.fix = fix
        self.step_input: tuple[Any, Any, int] | None = None
        """What ``step`` was given, ``(key, value, timestamp)``, when the step failed before it
        had any effect (its dead letter keeps it, so the record can be re-driven there)."""
        super().__init__(self._render())

    def locate(self, coordinates: RecordCoordinates | None) -> RecordError:
        """Attach the record's coordinates when the raiser did not know them."""
        self.coordinates = coordinates
        self.args = (self._render(),)
        return self

    def in_step(self, step: str) -> RecordError:
        """Attach the step when the raiser did not know it (the producer, for one)."""
        if self.step is None:
            self.step = step
            self.args = (self._render(),)
        return self

    def or_else(self, fix: str) -> RecordError:
        """Add another way to fix it, after the one the raiser gave (once: an error raised
        again on its way out is not told twice)."""
        if self.fix is not None and fix in self.fix:
            return self
        self.fix = f"{self.fix}; or {fix}" if self.fix else fix
        self.args = (self._render(),)
        return self

    def __str__(self) -> str:
        return self._render()

    def _render(self) -> str:
        where = self.coordinates.described() if self.coordinates else "<no source record>"
        text = f"{where}"
        if self.step:
            text += f" in step {self.step!r}"
        text += f": {self.message}"
        if self.fix:
            text += f" Fix: {self.fix}"
        return text


class DeserializationError(RecordError):
    """The record's key or value bytes could not be decoded."""


class SerializationError(RecordError):
    """An output value could not be encoded."""


class RecordTooLargeError(SerializationError):
    """An output record is larger than the producer may send (``message.max.bytes``)."""


class ProcessingError(RecordError):
    """User code raised while processing the record."""


class TimestampError(RecordError):
    """An event-time step met a record without a usable timestamp, or an output's timestamp
    lies further ahead of (or behind) now than its topic accepts."""
