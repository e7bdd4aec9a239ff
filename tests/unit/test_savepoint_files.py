"""A savepoint's files read back as they were written: the manifest's JSON, and the Parquet
datasets of a store (the entry bytes exactly, and the entry in people's terms) and of records
in flight; a directory that is not a savepoint, or of another format, is one line saying so."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from framework import Pipeline, Topic, TumblingWindows, WatermarkStrategy
from framework.engine.entries import StoreLayout
from framework.errors import RuntimeProblem
from framework.savepoint.files import (
    PART,
    InFlight,
    in_flight_records,
    in_flight_rows,
    store_pairs,
    store_rows,
    write_dataset,
)
from framework.savepoint.manifest import (
    MANIFEST,
    Manifest,
    RepartitionInfo,
    StoreInfo,
    describe_pipeline,
    list_savepoints,
)
from framework.serde import StringSerde
from framework.serde.values import ValueCodec
from framework.state.base import STEP_META_KEY
from framework.state.keys import keyed, state_prefix


def _pipeline(size_ms: int = 60_000) -> Pipeline:
    p = Pipeline("shop", partitions=2)
    orders = p.source(Topic("orders", key_serde=StringSerde(), partitions=2),
                      watermarks=WatermarkStrategy.bounded_out_of_orderness(0, timestamp="ts"))
    orders.count(name="per-customer")
    orders.key_by(lambda o: o["item"], name="by-item").window(TumblingWindows(size_ms)).count(name="per-minute")
    return p


def _manifest(pipeline: Pipeline) -> Manifest:
    return Manifest(
        service="shop", target="shop.pipeline:pipeline", created="2026-11-23T12:00:00.000+00:00", partitions=2,
        pipeline=describe_pipeline(pipeline),
        stores={"per-customer": StoreInfo({0: 3, 1: 1}, "stores/per-customer", "shop-per-customer-changelog",
                                          {"kind": "aggregate", "layout": 1}),
                "_time": StoreInfo({0: 1, 1: 1}, "stores/_time", "shop-_time-changelog")},
        offsets={"orders": {0: 12, 1: 7}, "shop-by-item-repartition": {0: 4}},
        repartition={"shop-by-item-repartition": RepartitionInfo({0: 4, 1: 0}, {0: 6, 1: 0}, 2,
                                                                  "in-flight/shop-by-item-repartition")})


def test_the_manifest_reads_back_as_written_with_partition_numbers_as_numbers(tmp_path: Path) -> None:
    written = _manifest(_pipeline())
    written.save(tmp_path)
    text = json.loads((tmp_path / MANIFEST).read_text())
    assert text["offsets"] == {"orders": {"0": 12, "1": 7}, "shop-by-item-repartition": {"0": 4}}
    assert text["format"] == 1 and text["state_format"] == 1
    read = Manifest.load(tmp_path)
    assert read == written
    assert read.stores["per-customer"].total == 4


def test_the_pipeline_hash_follows_its_definition() -> None:
    first, same, changed = (describe_pipeline(p) for p in (_pipeline(), _pipeline(), _pipeline(30_000)))
    assert first == same and first["hash"].startswith("sha256:")
    assert changed["hash"] != first["hash"]
    [window] = [s for s in first["steps"] if s["name"] == "per-minute"]
    assert window["signature"]["windows"]["size_ms"] == 60_000 and window["key_serde"] == "KeySerde"
    assert first["stores"] == ["per-customer", "per-minute", "_time"]


def test_not_a_savepoint_and_another_format_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(RuntimeProblem) as missing:
        Manifest.load(tmp_path)
    assert str(missing.value) == (f"{tmp_path} is not a savepoint: {tmp_path / MANIFEST} cannot be read (No such file "
                                  "or directory). Fix: name a directory fw savepoint create wrote (fw savepoint list "
                                  "shows them)")
    (tmp_path / MANIFEST).write_text(json.dumps({"format": 2}))
    with pytest.raises(RuntimeProblem) as other:
        Manifest.load(tmp_path)
    assert str(other.value) == (f"{tmp_path / MANIFEST} is of savepoint format 2; this version reads format 1. "
                                "Fix: restore it with the release that made it")


def test_a_store_dataset_keeps_the_bytes_and_decodes_each_entry(tmp_path: Path) -> None:
    pipeline, codec = _pipeline(), ValueCodec()
    window = keyed(state_prefix("win"), b'"apple"') + struct.pack(">Q", 120_000 + 2**63)
    timer = state_prefix("__timers.event") + struct.pack(">Q", 179_999 + 2**63) + b'"apple"' + b"\x00"
    pairs = [(0, STEP_META_KEY, codec.encode({"kind": "window", "layout": 1})),
             (0, window, codec.encode(5)), (1, timer, codec.encode(1)),
             (1, keyed(state_prefix("win"), b'"pear"'), b"\x09 not the state format")]
    write_dataset(store_rows(StoreLayout(pipeline, "per-minute"), pairs), tmp_path / "per-minute")
    assert list(store_pairs(tmp_path / "per-minute")) == pairs
    rows = pq.read_table(tmp_path / "per-minute" / PART).to_pylist()
    shown = [(r["kind"], r["state"], r["decoded_key"] and json.loads(r["decoded_key"]),
              r["decoded_value"] and json.loads(r["decoded_value"])) for r in rows]
    assert shown == [
        ("meta", "step", {"key": None}, {"kind": "window", "layout": 1}),
        ("state", "win", {"key": "apple", "window_start": 120_000, "window_end": 180_000}, 5),
        ("timer", "__timers.event", {"key": "apple", "timer": 179_999}, 1),
        ("state", "win", {"key": "pear"}, None),  # a value not in the state format: its bytes only
    ]


def test_records_in_flight_keep_their_order_timestamps_and_headers(tmp_path: Path) -> None:
    records: list[InFlight] = [(1, 5, 1_000, b"k", b"\x01\x05", [("fw.origin", b"orders[1]@3")]),
               (0, 9, 2_000, None, None, [("fw.watermark", b"0/2:1999")]),
               (0, 8, 1_500, b"j", b"\x01\x06", [])]
    write_dataset(in_flight_rows(records), tmp_path / "in-flight")
    assert list(in_flight_records(tmp_path / "in-flight")) == sorted(records, key=lambda r: (r[0], r[1]))


def test_savepoints_are_listed_by_service_oldest_first(tmp_path: Path) -> None:
    for stamp in ("20261123T120000.000Z", "20261122T120000.000Z"):
        (tmp_path / "shop" / stamp).mkdir(parents=True)
        _manifest(_pipeline()).save(tmp_path / "shop" / stamp)
    (tmp_path / "shop" / "not-one").mkdir()
    (tmp_path / "other" / "x").mkdir(parents=True)
    listed = list_savepoints(tmp_path, "shop")
    assert [s.path.name for s in listed] == ["20261122T120000.000Z", "20261123T120000.000Z"]
    assert all(s.size == len((s.path / MANIFEST).read_bytes()) for s in listed)
    assert list_savepoints(tmp_path / "none") == []


# -- a restore refused from the savepoint and the pipeline alone, before the cluster is asked ----

NOWHERE = {"bootstrap.servers": "127.0.0.1:1"}  # never reached: these refusals come first


def _saved(tmp_path: Path, signature: dict[str, object]) -> Path:
    manifest = _manifest(_pipeline())
    manifest.stores["per-minute"] = StoreInfo({0: 1, 1: 0}, "stores/per-minute", "shop-per-minute-changelog",
                                              signature)
    manifest.save(tmp_path)
    return tmp_path


def test_a_restore_onto_a_step_of_another_kind_is_one_line(tmp_path: Path) -> None:
    from framework.savepoint.restore import plan_restore

    path = _saved(tmp_path, {"kind": "window", "layout": 1, "windows": {
        "type": "TumblingWindows", "size_ms": 30_000, "offset_ms": 0, "clock": "event"}})
    with pytest.raises(RuntimeProblem) as refused:
        plan_restore(NOWHERE, _pipeline(), path, tmp_path / "state")
    assert str(refused.value) == (
        "store 'per-minute' was written by a window step (TumblingWindows size_ms=30000 offset_ms=0 clock=event), "
        "and step 'per-minute' is now a window step (TumblingWindows size_ms=60000 offset_ms=0 clock=event): the "
        "step cannot read that state. Fix: give the changed step a new name (it starts empty; "
        "--allow-dropped-state leaves the old state out), or restore onto the release that made the savepoint")


def test_a_savepoint_of_another_service_is_one_line(tmp_path: Path) -> None:
    from framework.savepoint.restore import plan_restore

    path = _saved(tmp_path, {"kind": "window", "layout": 1})
    other = Pipeline("shop-2")
    other.source(Topic("orders")).count(name="per-customer")
    with pytest.raises(RuntimeProblem) as refused:
        plan_restore(NOWHERE, other, path, tmp_path / "state")
    assert str(refused.value) == (f"savepoint {path} is of service 'shop', not of 'shop-2'. Fix: restore a "
                                  "savepoint of 'shop-2' (fw savepoint list shop-2)")
