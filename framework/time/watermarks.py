"""Timestamps and watermark strategies (Flink's ``WatermarkStrategy``), per input partition.

A strategy pairs a *timestamp assigner* (the Kafka record timestamp by default, a field
of the value, or a function of it; milliseconds since the epoch) with a *generator*:

- ``bounded_out_of_orderness(B)``: watermark = max timestamp seen − B − 1. It advances with
  every record, so it is a pure function of the partition's record order: a replay of the
  same offsets makes the same late-data decisions.
- ``monotonous()``: the same with B = 0 (timestamps never decrease within a partition).
- ``punctuated(fn)``: ``fn(value, timestamp)`` returns a watermark (or None) per record.
- ``from_upstream()``: the topic is written by another service of this framework whose sink
  has ``Topic(..., watermarks=True)``; watermarks arrive in band, as from a repartition topic.

``idle_timeout_ms`` (optional): a partition without records for that long leaves the
task's minimum until data arrives again (Flink's ``withIdleness``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from framework.errors import PipelineError, TimestampError

NO_WATERMARK = -(2**63)  # before any record: nothing is late, no event-time timer fires
MAX_WATERMARK = 2**63 - 1

TimestampSpec = str | Callable[[Any], int] | None
_FIX = ("assign one with Pipeline.source(topic, watermarks=WatermarkStrategy.bounded_out_of_orderness("
        "bound_ms, timestamp='<field>' or timestamp=lambda value: <ms since the epoch>)), or make the "
        "producer set the Kafka record timestamp")


@dataclass(frozen=True)
class WatermarkStrategy:
    """How a source's records get event timestamps and its partitions watermarks."""

    bound_ms: int = 0
    timestamp: TimestampSpec = None
    punctuation: Callable[[Any, int], int | None] | None = None
    idle_timeout_ms: int | None = None
    upstream: bool = False

    def __post_init__(self) -> None:
        if self.bound_ms < 0:
            raise PipelineError(f"the out-of-orderness bound must be >= 0 ms, got {self.bound_ms}")
        if self.idle_timeout_ms is not None and self.idle_timeout_ms <= 0:
            raise PipelineError(f"idle_timeout_ms must be > 0, got {self.idle_timeout_ms}")

    @staticmethod
    def bounded_out_of_orderness(bound_ms: int, *, timestamp: TimestampSpec = None,
                                 idle_timeout_ms: int | None = None) -> WatermarkStrategy:
        """Records may arrive up to ``bound_ms`` after later ones without being late."""
        return WatermarkStrategy(bound_ms, timestamp, None, idle_timeout_ms)

    @staticmethod
    def monotonous(*, timestamp: TimestampSpec = None, idle_timeout_ms: int | None = None) -> WatermarkStrategy:
        """Timestamps never decrease within a partition."""
        return WatermarkStrategy(0, timestamp, None, idle_timeout_ms)

    @staticmethod
    def punctuated(fn: Callable[[Any, int], int | None], *, timestamp: TimestampSpec = None,
                   idle_timeout_ms: int | None = None) -> WatermarkStrategy:
        """``fn(value, timestamp)`` returns the partition's new watermark, or None for no change."""
        return WatermarkStrategy(0, timestamp, fn, idle_timeout_ms)

    @staticmethod
    def from_upstream(*, timestamp: TimestampSpec = None, idle_timeout_ms: int | None = None) -> WatermarkStrategy:
        """Watermarks written in band by the framework service that produces the topic."""
        return WatermarkStrategy(0, timestamp, None, idle_timeout_ms, upstream=True)

    def assigner(self, step: str) -> Callable[[Any, int], int] | None:
        """``(value, kafka timestamp) -> event timestamp``; None keeps the Kafka timestamp. A
        record with no value (a tombstone: a table's delete) has nothing to take a timestamp
        from and keeps its Kafka timestamp."""
        spec = self.timestamp
        if spec is None:
            return None
        if isinstance(spec, str):
            field = spec

            def from_field(value: Any, kafka_ts: int) -> int:
                if value is None:
                    return kafka_ts
                try:
                    ts = value[field]
                except (KeyError, TypeError, IndexError) as exc:
                    raise TimestampError(f"the value has no timestamp field {field!r}", None, step,
                                         fix=_FIX) from exc
                if type(ts) is int and 0 <= ts <= MAX_WATERMARK:  # ``checked``'s common case, without the call
                    return ts
                return checked(ts, step)

            return from_field
        fn = spec

        def from_fn(value: Any, kafka_ts: int) -> int:
            if value is None:
                return kafka_ts
            try:
                ts = fn(value)
            except Exception as exc:  # the assigner is user code
                raise TimestampError(f"the timestamp assigner raised {type(exc).__name__}: {exc}", None,
                                     step, fix=_FIX) from exc
            return checked(ts, step)

        return from_fn

    def generator(self) -> WatermarkGenerator:
        if self.punctuation is not None:
            return PunctuatedWatermarks(self.punctuation)
        return BoundedOutOfOrderness(self.bound_ms)


def checked(ts: Any, step: str) -> int:
    """``ts`` as an int timestamp, or a TimestampError that says how to assign one. A Kafka
    timestamp is a signed 64-bit number of milliseconds: a larger one (or an infinite or NaN
    float) is no time at all, and would fail in the producer, not as this record's error."""
    if type(ts) is int and 0 <= ts <= MAX_WATERMARK:
        return ts
    if isinstance(ts, float) and 0 <= ts <= MAX_WATERMARK:  # False for NaN and infinity
        return int(ts)
    raise TimestampError(f"no usable event timestamp (got {ts!r}; need milliseconds since the epoch)",
                         None, step, fix=_FIX)


class WatermarkGenerator:
    """Per input partition: sees every record (``on_event``) and says the current watermark."""

    __slots__ = ("watermark",)

    def __init__(self) -> None:
        self.watermark = NO_WATERMARK

    def on_event(self, value: Any, ts: int) -> int:
        """Account for one record; return the (never decreasing) watermark."""
        raise NotImplementedError

    def snapshot(self) -> Any:
        return self.watermark

    def restore(self, state: Any) -> None:
        self.watermark = int(state)


class BoundedOutOfOrderness(WatermarkGenerator):
    __slots__ = ("lag",)

    def __init__(self, bound_ms: int) -> None:
        super().__init__()
        self.lag = bound_ms + 1  # watermark = max timestamp - lag

    def on_event(self, value: Any, ts: int) -> int:
        w = ts - self.lag
        if w > self.watermark:  # noqa: PLR1730 - no max() call per record on the record's path
            self.watermark = w
        return self.watermark


class PunctuatedWatermarks(WatermarkGenerator):
    __slots__ = ("_fn",)

    def __init__(self, fn: Callable[[Any, int], int | None]) -> None:
        super().__init__()
        self._fn = fn

    def on_event(self, value: Any, ts: int) -> int:
        w = self._fn(value, ts)
        if w is not None and w > self.watermark:
            self.watermark = int(w)
        return self.watermark
