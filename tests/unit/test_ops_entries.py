"""Store entries decoded for ``fw state`` and changelog tails: the layouts of
docs/state-format.md, section 3, read back with the pipeline's serdes."""

from __future__ import annotations

import struct

import pytest

from framework import Pipeline, Topic, TumblingWindows, WatermarkStrategy
from framework.engine.entries import Entry, StoreLayout
from framework.errors import ConfigError
from framework.ops.targets import plain
from framework.ops.topics import internal_kind
from framework.serde import StringSerde
from framework.serde.values import ValueCodec
from framework.state.keys import keyed, state_prefix


def _pipeline() -> Pipeline:
    p = Pipeline("shop")
    orders = p.source(Topic("orders", key_serde=StringSerde()),
                      watermarks=WatermarkStrategy.bounded_out_of_orderness(0, timestamp="ts"))
    orders.count(name="per-customer")
    orders.key_by(lambda o: o["item"], name="by-item").window(TumblingWindows(60_000)).count(name="per-minute")
    return p


def test_a_rolling_aggregate_entry_by_its_string_key() -> None:
    layout = StoreLayout(_pipeline(), "per-customer")
    key = layout.encode_key("7")  # a string serde takes the text, never JSON
    assert key == b"7"
    [entry] = layout.decode(keyed(state_prefix("acc"), key), ValueCodec().encode(3))
    assert entry == Entry("state", "acc", "7", 3)


def test_a_window_entry_has_its_start_and_end_and_json_keys_parse() -> None:
    layout = StoreLayout(_pipeline(), "per-minute")
    key = layout.encode_key('["a",1]')  # the key_by's JSON key serde: a tuple key
    assert key == b'["a",1]' and layout.encode_key("apple") == b'"apple"'
    stored = keyed(state_prefix("win"), key) + struct.pack(">Q", 120_000 + 2**63)
    [entry] = layout.decode(stored, ValueCodec().encode(5))
    assert (entry.key, entry.window, entry.value) == (("a", 1), (120_000, 180_000), 5)
    assert entry.as_dict() == {"state": "win", "key": ("a", 1), "window_start": 120_000, "window_end": 180_000,
                               "value": 5}


def test_meta_and_tombstones_and_unknown_stores() -> None:
    layout = StoreLayout(_pipeline(), "per-customer")
    [meta] = layout.decode(b"\x00step", ValueCodec().encode({"kind": "aggregate", "layout": 1}))
    assert meta.kind == "meta" and meta.value == {"kind": "aggregate", "layout": 1}
    [gone] = layout.decode(keyed(state_prefix("acc"), b"x"), None)
    assert gone.value is None
    with pytest.raises(ConfigError, match="its stores: per-customer, per-minute, _time"):
        StoreLayout(_pipeline(), "per-hour")
    with pytest.raises(ValueError):
        list(layout.decode(keyed(state_prefix("acc"), b"x"), b"\x09 not the state format"))


def test_printable_values_and_internal_topic_names() -> None:
    assert plain({"k": (1, b"text", b"\xff\x00")}) == {"k": [1, "text", {"base64": "/wA="}]}
    assert [internal_kind(t) for t in ("shop-per-minute-changelog", "shop-by-item-repartition",
                                       "shop-dead-letter", "__consumer_offsets", "orders")] == [
        "changelog", "repartition", "dead-letter", "broker", ""]
