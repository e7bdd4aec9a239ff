"""A fenced producer at a checkpoint (framework.runtime.checkpoint): a transaction coordinator
that moved, as a broker restarting moves it, fences the member's producer as a newer producer
would; the member goes on from its last checkpoint with a new producer (a broken interval),
and only fences that keep coming (another process with its transactional id) end it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from framework.errors import FencedError, KafkaClientError
from framework.runtime import checkpoint as C

OLD_EPOCH = ("Failed to commit offsets to transaction on broker 127.0.0.1:20250/3: s-repartition((null))[0]"
             "(Broker: Producer attempted an operation with an old epoch)")


class FencedOutput:
    """A producer whose ``send_offsets`` the coordinator refuses as librdkafka reports it."""

    def __init__(self, code: int = KafkaError._FENCED, text: str = OLD_EPOCH) -> None:
        self.code, self.text = code, text

    def flush(self, timeout_s: float) -> None:
        pass

    def send_offsets(self, positions: Mapping[Any, int], group_metadata: Any, timeout_s: float) -> None:
        raise KafkaException(KafkaError(self.code, self.text, fatal=True))

    def commit(self, timeout_s: float) -> None:
        pass

    def take_changelog_ends(self) -> dict[Any, int]:
        return {}


class Group:
    def group_metadata(self) -> object:
        return object()


def _checkpointer(output: FencedOutput) -> C.Checkpointer:
    return C.Checkpointer(None, output, Group(), exactly_once=True, interval_s=1.0,  # type: ignore[arg-type]
                          timeout_s=5.0, transactional_id="s-0")


@pytest.mark.parametrize("code", [KafkaError._FENCED, KafkaError.PRODUCER_FENCED])  # librdkafka reports INVALID_PRODUCER_EPOCH as _FENCED
def test_a_fence_breaks_the_interval_twice_and_ends_the_member_the_third_time(code: int) -> None:
    cp = _checkpointer(FencedOutput(code))
    for _ in range(2):
        with pytest.raises(C._Broken, match="the producer was fenced .*old epoch.*a transaction coordinator that moved"):
            cp.commit({("in", 0): 5})
    with pytest.raises(FencedError) as third:
        cp.commit({("in", 0): 5})
    assert "transactional id 's-0' was fenced" in str(third.value)
    assert "3 times within 300 s" in str(third.value) and "--instance-id" in str(third.value)


def test_fences_older_than_the_window_do_not_count(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(C.time, "monotonic", lambda: now[0])
    cp = _checkpointer(FencedOutput())
    for _ in range(5):  # one every 200 s: never three within 300 s
        with pytest.raises(C._Broken):
            cp.commit({("in", 0): 5})
        now[0] += 200.0


def test_what_no_new_producer_heals_still_ends_the_member_at_once() -> None:
    cp = _checkpointer(FencedOutput(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "denied"))
    with pytest.raises(C.FatalKafkaError, match="the cluster refused the checkpoint: denied"):
        cp.commit({("in", 0): 5})


def test_a_record_refused_by_a_fenced_producer_is_counted_as_a_fence_of_the_checkpoint() -> None:
    """librdkafka refuses a produce with only ``_FATAL`` once another producer with the
    transactional id fenced this one (two processes started at once with one --instance-id);
    the output raises ``ProducerFailed`` with the producer's own error, and the checkpointer
    takes it as a fenced checkpoint call: a broken interval twice, the one line the third time."""
    cp = _checkpointer(FencedOutput())
    broken: list[str] = []
    cp.on_broken = lambda why, said=False: broken.append(why)
    fence = C.ProducerFailed(KafkaError(KafkaError._FENCED, "Producer fenced by newer instance", fatal=True))
    for _ in range(2):
        cp.producer_failed(fence)
        cp.broken = None  # the recovery ran
    assert len(broken) == 2 and all("fenced" in why and "newer instance" in why for why in broken), broken
    with pytest.raises(FencedError, match="3 times within 300 s"):
        cp.producer_failed(fence)
    other = C.ProducerFailed(KafkaError(KafkaError._INCONSISTENT, "idempotence broken", fatal=True))
    cp = _checkpointer(FencedOutput())
    cp.on_broken = lambda why, said=False: broken.append(why)
    cp.producer_failed(other)  # a new producer settles what is not a fence
    assert broken[-1].startswith("the producer failed: ") and "idempotence broken" in broken[-1], broken


def _hiding(inner: BaseException) -> SystemError:
    """What confluent-kafka raises for a call made while a callback's exception is still set."""
    try:
        try:
            raise inner
        except BaseException as exc:
            raise SystemError("<built-in method send_offsets_to_transaction of cimpl.Producer object at 0x7f> "
                              "returned a result with an exception set") from exc
    except SystemError as outer:
        return outer


class HidingOutput(FencedOutput):
    """A producer whose ``send_offsets`` raises the SystemError hiding ``inner``."""

    def __init__(self, inner: BaseException) -> None:
        super().__init__()
        self.inner = inner

    def send_offsets(self, positions: Mapping[Any, int], group_metadata: Any, timeout_s: float) -> None:
        raise _hiding(self.inner)


def test_a_fence_hidden_in_a_system_error_counts_as_a_fence() -> None:
    """Two processes started at once with one --instance-id fenced each other for minutes when
    the fence reached the checkpoint as ``... returned a result with an exception set``: a
    new producer each time, and never the third fence that ends the member."""
    fence = KafkaException(KafkaError(KafkaError._FATAL, "Producer fenced by newer instance: epoch 7", fatal=True))
    assert C.classify(_hiding(fence)) == "fatal" and C.epoch_fenced(_hiding(fence))
    cp = _checkpointer(HidingOutput(fence))
    for _ in range(2):
        with pytest.raises(C._Broken, match="the producer was fenced .*newer instance"):
            cp.commit({("in", 0): 5})
    with pytest.raises(FencedError, match="fenced by newer instance.*3 times within 300 s"):
        cp.commit({("in", 0): 5})


def test_the_frameworks_own_error_hidden_in_a_system_error_is_raised_as_itself() -> None:
    cp = _checkpointer(HidingOutput(FencedError("the member's rejoin was fenced: another process has its id")))
    with pytest.raises(FencedError, match="another process has its id"):
        cp.commit({("in", 0): 5})
    plain = SystemError("returned a result with an exception set")  # hiding nothing: a new producer settles it
    assert C.classify(plain) == "reset"


class StalledOutput(FencedOutput):
    """A producer whose records the partitions' leaders do not acknowledge (two nodes of three
    away): its flush gives up with the framework's own client error."""

    def flush(self, timeout_s: float) -> None:
        raise KafkaClientError(f"1896 records not delivered within {timeout_s:.1f}s: their partitions' leaders did "
                               "not acknowledge them")


def test_records_not_acknowledged_in_time_break_the_interval_and_do_not_end_the_member() -> None:
    """A framework error raised by a checkpoint call itself (not hidden in a SystemError) is
    judged as any client error: the interval breaks and the recovery waits for the cluster."""
    cp = _checkpointer(StalledOutput())
    with pytest.raises(C._Broken, match="not delivered within 5.0s"):
        cp.commit({("in", 0): 5})


class SlowCommitOutput(FencedOutput):
    """A producer whose flush takes most of the checkpoint's bound and whose commit then times
    out as librdkafka's does while the transaction coordinator is away (retriable)."""

    def __init__(self, clock: list[float]) -> None:
        super().__init__()
        self.clock, self.given = clock, list[float]()

    def flush(self, timeout_s: float) -> None:
        self.clock[0] += 3.5

    def send_offsets(self, positions: Mapping[Any, int], group_metadata: Any, timeout_s: float) -> None:
        pass

    def commit(self, timeout_s: float) -> None:
        self.given.append(timeout_s)
        self.clock[0] += timeout_s
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Transaction commit timed out", retriable=True))


def test_a_checkpoints_calls_and_their_retries_share_one_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """With two nodes of three away, a member's loop stood still for a minute: each call of a
    checkpoint had its own bound, and a retry of one waited that whole bound again. The calls
    of one checkpoint share its bound (each given at least a second), then the interval breaks."""
    clock = [100.0]
    monkeypatch.setattr(C.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(C.time, "sleep", lambda s: None)
    out = SlowCommitOutput(clock)
    with pytest.raises(C._Broken, match="timed out"):
        _checkpointer(out).commit({("in", 0): 5})
    assert out.given == [1.5]  # 5 s bound, 3.5 s of it flushing: one attempt of what was left
    assert clock[0] - 100.0 == 5.0


@pytest.mark.parametrize("holds", [False, None], ids=["another-process-holds-it", "cannot-tell"])
def test_the_third_fence_ends_the_member_unless_the_group_says_it_holds_its_instance_id(holds: bool | None) -> None:
    asked: list[int] = []

    def holds_instance() -> bool | None:
        asked.append(1)
        return holds

    cp = _checkpointer(FencedOutput())
    cp.holds_instance = holds_instance
    for _ in range(2):
        with pytest.raises(C._Broken):
            cp.commit({("in", 0): 5})
    assert asked == []  # asked at the third fence only
    with pytest.raises(FencedError, match="3 times within 300 s"):
        cp.commit({("in", 0): 5})
    assert asked == [1]


def test_a_member_the_group_registered_under_its_instance_id_goes_on_after_the_third_fence(
        caplog: pytest.LogCaptureFixture) -> None:
    """Two processes started at once with one --instance-id fence each other's producer in
    turn: the one the group registered last keeps its membership, and goes on; its count
    starts again from this fence."""
    cp = _checkpointer(FencedOutput())
    cp.holds_instance = lambda: True
    for _ in range(5):
        with pytest.raises(C._Broken, match="the producer was fenced"):
            cp.commit({("in", 0): 5})
    warned = [r.getMessage() for r in caplog.records if "instance id is this process" in r.getMessage()]
    assert len(warned) == 2, warned  # the third and the fifth: 1, 2, 3 (again 1), 2, 3
    cp.holds_instance = lambda: False
    with pytest.raises(C._Broken):
        cp.commit({("in", 0): 5})
    with pytest.raises(FencedError):
        cp.commit({("in", 0): 5})
