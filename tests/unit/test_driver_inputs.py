"""What a test pipes into the TestDriver is checked first: a key or value its topic's serde
refuses, raw bytes that are not bytes, a timestamp that is neither milliseconds nor a
datetime are one ``UsageError`` naming the call, the topic, the argument, what was given
and what was expected; and nothing of it reaches the topic."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone

import pytest

from framework.errors import UsageError
from framework.pipeline import Pipeline, Topic
from framework.serde import IntSerde
from framework.testing import TestDriver


def _driver() -> TestDriver:
    p = Pipeline("orders-svc")
    p.source(Topic("orders")).map(lambda v: v).to(Topic("out"))
    p.source(Topic("counts", IntSerde(), IntSerde())).to(Topic("count-out", IntSerde(), IntSerde()))
    return TestDriver(p)


@pytest.mark.parametrize(("call", "said"), [
    (lambda d: d.pipe("orders", {"a": 1}, key=123),
     ("TestDriver.pipe('orders', key=123): the key is an int, which the key serde of 'orders', "
     "StringSerde(encoding='utf-8'), cannot serialize (TypeError: StringSerde serializes str, not int). "
     "Fix: pipe a key that serde takes, or give the topic the serde of your keys: Topic('orders', key_serde=...)")),
    (lambda d: d.pipe("orders", {1, 2}, key="o-1"),
     ("TestDriver.pipe('orders', value={1, 2}): the value is a set, which the value serde of 'orders', JsonSerde(), "
     "cannot serialize (TypeError: Object of type set is not JSON serializable). Fix: pipe a value that serde "
     "takes, or give the topic the serde of your values: Topic('orders', value_serde=...)")),
    (lambda d: d.pipe("counts", 2**63, key=1),
     ("TestDriver.pipe('counts', value=9223372036854775808): the value is an int, which the value serde of "
     "'counts', IntSerde(), cannot serialize (ValueError: 9223372036854775808 is outside the signed 64-bit "
     "range). Fix: pipe a value that serde takes, or give the topic the serde of your values: "
     "Topic('counts', value_serde=...)")),
    (lambda d: d.pipe_many("counts", [("two", 6, 1), (3, 7, 2)]),
     ("TestDriver.pipe_many('counts', key='two'): the key is a str, which the key serde of 'counts', IntSerde(), "
     "cannot serialize (TypeError: IntSerde serializes int, not str). Fix: pipe a key that serde takes, or give "
     "the topic the serde of your keys: Topic('counts', key_serde=...)")),
    (lambda d: d.pipe_raw("orders", b"{}", key="o-1"),
     ("TestDriver.pipe_raw('orders', key='o-1'): the key is a str, and pipe_raw takes bytes or None, the key as "
     "it is on the topic. Fix: pass bytes ('o-1'.encode()), or pipe() it, which serializes it with the "
     "topic's key serde")),
    (lambda d: d.pipe_raw("orders", {"a": 1}),
     ("TestDriver.pipe_raw('orders', value={'a': 1}): the value is a dict, and pipe_raw takes bytes or None, "
     "the value as it is on the topic. Fix: pass bytes, or pipe() it, which serializes it with the topic's "
     "value serde")),
    (lambda d: d.append("orders-svc-dead-letter", bytearray(b"x")),
     ("TestDriver.append('orders-svc-dead-letter', value=bytearray(b'x')): the value is a bytearray, and append "
     "takes bytes or None, the value as it is on the topic. Fix: pass bytes, or pipe() it, which serializes it "
     "with the topic's value serde")),
    (lambda d: d.pipe("orders", {"a": 1}, key="o-1", timestamp="2026-01-01"),
     ("TestDriver.pipe('orders', timestamp='2026-01-01'): the timestamp is a str, and the driver takes "
     "milliseconds since the epoch (an int) or a datetime (a naive one is UTC). Fix: pass "
     "timestamp=1767225600000 or timestamp=datetime(2026, 1, 1, tzinfo=UTC), say")),
    (lambda d: d.pipe_raw("orders", b"{}", timestamp=1.5e12),
     ("TestDriver.pipe_raw('orders', timestamp=1500000000000.0): the timestamp is a float, and the driver takes "
     "milliseconds since the epoch (an int) or a datetime (a naive one is UTC). Fix: pass "
     "timestamp=1767225600000 or timestamp=datetime(2026, 1, 1, tzinfo=UTC), say")),
])
def test_a_wrong_argument_is_one_line_naming_it(call: Callable[[TestDriver], None], said: str) -> None:
    d = _driver()
    with pytest.raises(UsageError) as raised:
        call(d)
    assert str(raised.value) == said
    assert d.metrics()["records"] == 0
    assert [t for t in ("orders", "counts", "orders-svc-dead-letter", "out", "count-out") if any(d.topics.log(t))] == []


def test_a_long_value_is_shown_cut() -> None:
    with pytest.raises(UsageError, match=r"^TestDriver\.pipe_raw\('orders', value='x{58}…\): the value is a str"):
        _driver().pipe_raw("orders", "x" * 500)  # type: ignore[arg-type]


def test_a_datetime_timestamp_is_its_epoch_milliseconds_and_a_naive_one_is_utc() -> None:
    d = _driver()
    d.pipe("orders", 1, key="aware", timestamp=datetime(2026, 1, 1, 1, 0, 0, 1500, tzinfo=timezone(timedelta(hours=1))))
    d.pipe("orders", 2, key="naive", timestamp=datetime(2026, 1, 1, 0, 0, 1))
    d.pipe_raw("orders", b"3", key=b"raw", timestamp=datetime(2026, 1, 1, tzinfo=UTC))
    d.pipe("orders", 4, key="ms", timestamp=1_767_225_600_002)
    assert [(r.key, r.timestamp) for r in d.output("out")] == [
        ("aware", 1_767_225_600_001), ("naive", 1_767_225_601_000), ("raw", 1_767_225_600_000),
        ("ms", 1_767_225_600_002)]
