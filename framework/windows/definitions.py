"""Window definitions (immutable, user-facing) and the ``Window`` a result belongs to.

Time windows are aligned to the epoch plus ``offset_ms`` and cover ``[start, end)``; on event
time a window fires when the watermark reaches ``end − 1`` and its result carries the
timestamp ``end − 1`` (Flink's ``TimeWindow.maxTimestamp``). ``clock="processing"`` puts a
record in the windows of the wall-clock time it arrives at and fires on the wall clock.

Count windows fire every ``size`` records of a key (tumbling), or every ``slide`` records
over the last ``size`` (sliding, as Flink's ``countWindow(size, slide)``). ``GlobalWindows``
with a count trigger fires every ``n`` records of a key over everything the key has seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from framework.errors import PipelineError

ClockKind = Literal["event", "processing"]


@dataclass(frozen=True, slots=True)
class Window:
    """The window a result belongs to: ``[start, end)`` in milliseconds."""

    start: int
    end: int

    @property
    def max_timestamp(self) -> int:
        return self.end - 1


def _check_clock(clock: str) -> None:
    if clock not in ("event", "processing"):
        raise PipelineError(f"clock must be 'event' or 'processing', got {clock!r}")


@dataclass(frozen=True)
class TumblingWindows:
    """Fixed-size, non-overlapping windows: each record is in exactly one."""

    size_ms: int
    offset_ms: int = 0
    clock: ClockKind = "event"

    def __post_init__(self) -> None:
        if self.size_ms <= 0:
            raise PipelineError(f"TumblingWindows size_ms must be > 0, got {self.size_ms}")
        _check_clock(self.clock)

    @property
    def slide_ms(self) -> int:
        return self.size_ms


@dataclass(frozen=True)
class SlidingWindows:
    """Windows of ``size_ms`` starting every ``slide_ms``: each record is in size/slide of them."""

    size_ms: int
    slide_ms: int
    offset_ms: int = 0
    clock: ClockKind = "event"

    def __post_init__(self) -> None:
        if self.size_ms <= 0 or self.slide_ms <= 0:
            raise PipelineError(f"SlidingWindows needs size_ms > 0 and slide_ms > 0, got {self.size_ms}, "
                                f"{self.slide_ms}")
        _check_clock(self.clock)


@dataclass(frozen=True)
class SessionWindows:
    """Per key, records closer than ``gap_ms`` form a session; a record that bridges two
    sessions merges them. A session ``[first, last + gap)`` fires when the watermark passes it."""

    gap_ms: int
    clock: ClockKind = "event"

    def __post_init__(self) -> None:
        if self.gap_ms <= 0:
            raise PipelineError(f"SessionWindows gap_ms must be > 0, got {self.gap_ms}")
        _check_clock(self.clock)


@dataclass(frozen=True)
class CountWindows:
    """Per key: every ``size`` records (tumbling), or every ``slide`` records over the last
    ``size`` (sliding)."""

    size: int
    slide: int | None = None

    def __post_init__(self) -> None:
        if self.size <= 0 or (self.slide is not None and self.slide <= 0):
            raise PipelineError(f"CountWindows needs size > 0 and slide > 0, got {self.size}, {self.slide}")


@dataclass(frozen=True)
class CountTrigger:
    """Fire every ``count`` records."""

    count: int

    def __post_init__(self) -> None:
        if self.count <= 0:
            raise PipelineError(f"CountTrigger count must be > 0, got {self.count}")


@dataclass(frozen=True)
class GlobalWindows:
    """One window per key over all its records; fires as its trigger says (not purging)."""

    trigger: CountTrigger

    def __post_init__(self) -> None:
        if not isinstance(self.trigger, CountTrigger):
            raise PipelineError("GlobalWindows needs trigger=CountTrigger(n): it never ends on its own")


WindowSpec = TumblingWindows | SlidingWindows | SessionWindows | CountWindows | GlobalWindows


def is_event_time(spec: WindowSpec) -> bool:
    return isinstance(spec, (TumblingWindows, SlidingWindows, SessionWindows)) and spec.clock == "event"


def window_starts(ts: int, size: int, slide: int, offset: int) -> range:
    """Starts of the time windows containing ``ts``, latest first."""
    last = ts - (ts - offset) % slide
    return range(last, ts - size, -slide)
