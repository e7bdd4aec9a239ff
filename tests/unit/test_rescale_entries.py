"""A savepoint's entries moved onto another partition count: each keyed entry (state and timers)
to the task the partitioner gives its record key, entries of no key to every task, the task
clocks merged at their minimum, records in flight re-routed by key without their watermark
control records; and the rescale refused from the savepoint alone when its sources were not
processed to their ends."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from framework import Pipeline, Topic, TumblingWindows, WatermarkStrategy
from framework.engine.entries import record_key
from framework.engine.partitioner import partition_for
from framework.engine.task import CLOCK_KEY
from framework.errors import RuntimeProblem, StateError
from framework.savepoint.files import InFlight
from framework.savepoint.manifest import (
    Manifest,
    RepartitionInfo,
    SourceInfo,
    StoreInfo,
    describe_pipeline,
)
from framework.savepoint.rescale import Rescaling, check_drained
from framework.savepoint.restore import plan_restore
from framework.serde import StringSerde
from framework.serde.values import ValueCodec
from framework.state.base import STEP_META_KEY
from framework.state.keys import keyed, state_prefix
from framework.time.clock import rescaled
from framework.time.watermarks import NO_WATERMARK
from tests.present import present

CODEC = ValueCodec()
REPARTITION = "shop-by-item-repartition"


def _pipeline() -> Pipeline:
    p = Pipeline("shop", partitions=2)
    orders = p.source(Topic("orders", key_serde=StringSerde(), partitions=2),
                      watermarks=WatermarkStrategy.bounded_out_of_orderness(0, timestamp="ts"))
    orders.count(name="per-customer")
    orders.key_by(lambda o: o["item"], name="by-item").window(TumblingWindows(1_000)).count(name="per-second")
    return p


def _window(key: bytes, start: int) -> bytes:
    return keyed(state_prefix("win"), key) + struct.pack(">Q", start + 2**63)


def _timer(key: bytes, ts: int, namespace: int = 0) -> bytes:
    return state_prefix("__timers.event") + struct.pack(">Q", ts + 2**63) + key + bytes([namespace])


def test_the_record_key_is_found_in_state_window_map_and_timer_keys_and_none_is_in_meta_and_clock() -> None:
    assert record_key(keyed(state_prefix("acc"), b"alice")) == b"alice"
    assert record_key(_window(b'"apple"', 120_000)) == b'"apple"'
    assert record_key(keyed(state_prefix("sums"), b"bob") + b"4000") == b"bob"  # a map state's key after it
    assert record_key(_timer(b'"apple"', 120_999, 1)) == b'"apple"'
    assert record_key(STEP_META_KEY) is None
    assert record_key(CLOCK_KEY) is None


def test_each_keyed_entry_goes_where_its_key_goes_and_a_signature_to_every_task() -> None:
    keys = [f"k{i}".encode() for i in range(40)]
    signature = CODEC.encode({"kind": "window", "layout": 1})
    old = [(p, STEP_META_KEY, signature) for p in range(4)]
    old += [(partition_for(k, 4), _window(k, 1_000), CODEC.encode(i)) for i, k in enumerate(keys)]
    old += [(partition_for(k, 4), _timer(k, 1_999), CODEC.encode(1)) for k in keys]
    moved = list(Rescaling(6, CODEC).entries("per-second", old))
    assert sorted(moved) == sorted([(q, STEP_META_KEY, signature) for q in range(6)]
                                   + [(partition_for(k, 6), key, value) for _p, key, value in old[4:]
                                      for k in [record_key(key)] if k is not None])
    assert {q for q, _, _ in moved} == set(range(6))


def test_an_entry_of_no_key_with_different_values_on_the_old_tasks_is_refused() -> None:
    old = [(0, STEP_META_KEY, CODEC.encode({"kind": "aggregate"})), (1, STEP_META_KEY, CODEC.encode({"kind": "x"}))]
    with pytest.raises(StateError) as refused:
        list(Rescaling(3, CODEC).entries("per-customer", old))
    assert str(refused.value) == (f"store 'per-customer' holds entry {STEP_META_KEY.hex()}, which has no record "
                                  "key, with 2 different values on the old tasks: no one of them belongs on every new "
                                  "task. Fix: restore the savepoint at its own partition count")


def _input(wm: int, ups: dict[int, int] | None = None, off: bool = False, n: int = 0) -> dict[str, Any]:
    return {"wm": wm, "gen": None if ups is not None else wm, "ups": ups or {}, "idle": [], "n": n, "off": off}


def test_every_new_task_starts_at_the_minimum_of_the_old_clocks() -> None:
    old = [{"inputs": {"orders": _input(5_000), REPARTITION: _input(4_000, {0: 4_200, 1: 4_000}, n=2),
                       "upstream-out": _input(3_000, {0: 3_000, 1: 3_500}, n=2)},
            "steps": {"per-customer": 5_000, "per-second": 4_000}},
           {"inputs": {"orders": _input(4_500), REPARTITION: _input(4_100, {0: 4_100, 1: 4_300}, n=2),
                       "upstream-out": _input(3_200, {0: 3_200, 1: 3_200}, n=2)},
            "steps": {"per-customer": 4_500, "per-second": 4_100}},
           {"inputs": {"orders": _input(100, off=True)}, "steps": {"per-customer": 4_800}}]  # idle: holds nothing back
    clock = rescaled(old, 3, {REPARTITION})
    assert clock["steps"] == {"per-customer": 4_500, "per-second": 4_000}
    assert clock["inputs"]["orders"] == {"wm": 4_500, "gen": 4_500, "ups": {}, "idle": [], "n": 0, "off": False}
    # fed by the service's own tasks: the 3 new ones, each at the minimum until it says more
    assert clock["inputs"][REPARTITION] == {"wm": 4_000, "gen": None, "ups": {0: 4_000, 1: 4_000, 2: 4_000},
                                            "idle": [], "n": 3, "off": False}
    # fed by another service: its tasks stay, each at its minimum
    assert clock["inputs"]["upstream-out"]["ups"] == {0: 3_000, 1: 3_200}
    assert clock["inputs"]["upstream-out"]["n"] == 2


def test_the_time_store_becomes_one_clock_on_every_task() -> None:
    clocks = [{"inputs": {"orders": _input(w)}, "steps": {"per-customer": w}} for w in (900, NO_WATERMARK + 1, 700)]
    old = [(p, CLOCK_KEY, CODEC.encode(c)) for p, c in enumerate(clocks)]
    moved = list(Rescaling(2, CODEC, frozenset({REPARTITION})).entries("_time", old))
    assert [(q, k) for q, k, _ in moved] == [(0, CLOCK_KEY), (1, CLOCK_KEY)]
    assert CODEC.decode(moved[0][2])["steps"] == {"per-customer": NO_WATERMARK + 1}
    assert moved[0][2] == moved[1][2]


def test_records_in_flight_go_where_their_keys_go_in_order_and_control_records_are_left_out() -> None:
    control: list[tuple[str, bytes | None]] = [("fw.watermark", b"0/4:1999")]
    keys = [f'"item{i}"'.encode() for i in range(12)]
    old: list[InFlight] = [(partition_for(k, 4), i, 1_000 + i, k, CODEC.encode(i), [("fw.origin", b"orders[0]@1")])
                           for i, k in enumerate(keys)]
    old += [(p, 100 + p, 0, None, None, control) for p in range(4)]
    moved = list(Rescaling(6, CODEC).records(old))
    assert moved == [(partition_for(present(k), 6), o, ts, k, v, h) for _p, o, ts, k, v, h in old[:12]]


def _manifest(offsets: dict[int, int], unprocessed: dict[int, int] | None) -> Manifest:
    return Manifest(
        service="shop", target="shop.pipeline:pipeline", created="2026-11-23T12:00:00.000+00:00", partitions=2,
        pipeline=describe_pipeline(_pipeline()),
        stores={"per-customer": StoreInfo({0: 1, 1: 1}, "stores/per-customer", "shop-per-customer-changelog",
                                          {"kind": "aggregate", "layout": 1})},
        offsets={"orders": offsets}, repartition={REPARTITION: RepartitionInfo({0: 0, 1: 0}, {0: 0, 1: 0}, 0, "x")},
        sources={} if unprocessed is None else {"orders": SourceInfo("id", {0: 14, 1: 9}, unprocessed)})


def test_a_savepoint_taken_before_every_source_record_was_processed_is_refused(tmp_path: Path) -> None:
    check_drained(_manifest({0: 12, 1: 7}, {0: 0, 1: 0}), tmp_path, 4, "t:p")  # offsets past them: commit markers
    with pytest.raises(RuntimeProblem) as lag:
        check_drained(_manifest({0: 12, 1: 7}, {0: 3, 1: 0}), tmp_path, 4, "t:p")
    assert str(lag.value) == (
        f"savepoint {tmp_path} was taken before the service processed every record of its sources (orders[0] lag 3): "
        "produced for 2 partitions, they would not meet their keys' state on 4. Fix: stop the producers, run the "
        "service at its old partition count until its lag is 0, stop it, then rescale (fw rescale t:p --partitions "
        "4 takes the savepoint itself)")
    with pytest.raises(RuntimeProblem) as earlier:
        check_drained(_manifest({0: 12, 1: 7}, None), tmp_path, 4, "t:p")
    assert str(earlier.value) == (
        f"savepoint {tmp_path} does not record its sources' ends (an earlier release made it), so whether every "
        "record of them was processed cannot be told. Fix: take a new savepoint (fw rescale t:p --partitions 4 "
        "takes one)")


def test_the_restore_refuses_an_undrained_rescale_before_asking_the_cluster(tmp_path: Path) -> None:
    _manifest({0: 12, 1: 7}, {0: 0, 1: 2}).save(tmp_path)
    with pytest.raises(RuntimeProblem, match=r"\(orders\[1\] lag 2\)"):
        plan_restore({"bootstrap.servers": "127.0.0.1:1"}, _pipeline(), tmp_path, tmp_path / "state", partitions=3)
