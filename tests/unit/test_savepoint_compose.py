"""A savepoint written from rows in people's terms (``framework.savepoint.write`` without Spark):
each row's key written by the step's key serde and placed by the framework's partitioner, its
value conformed to the step's accumulator and encoded, the signature stamped in every
partition; the other stores, the records in flight and the offsets copied from the base. A row
the step could not have written is one line naming the store, the key and what was expected,
and nothing is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from framework import Pipeline, Topic, TumblingWindows, WatermarkStrategy
from framework.engine.entries import StoreLayout
from framework.engine.partitioner import partition_for
from framework.errors import ConfigError
from framework.savepoint import write
from framework.savepoint.files import PART, in_flight_rows, store_pairs, store_rows, write_dataset
from framework.savepoint.manifest import Manifest, RepartitionInfo, StoreInfo, describe_pipeline
from framework.serde import JsonSerde, StringSerde
from framework.serde.keys import KeySerde
from framework.serde.values import ValueCodec
from framework.state.base import STEP_META_KEY
from framework.state.keys import keyed, state_prefix

CODEC = ValueCodec()
ACC, TABLE = state_prefix("acc"), state_prefix("table")


def _pipeline(name: str = "shop") -> Pipeline:
    """Orders keyed by customer (text): ``sums`` of their amounts and ``means``; re-keyed by item
    (JSON keys): ``latest`` as a table, and ``per-minute`` windows; ``prices`` a table read from
    its own topic."""
    p = Pipeline(name, partitions=2)
    orders = p.source(Topic("orders", key_serde=StringSerde(), value_serde=JsonSerde(), partitions=2))
    orders.sum(lambda o: o["amount"], name="sums")
    orders.mean(lambda o: o["amount"], name="means")
    by_item = orders.key_by(lambda o: o["item"], name="by-item")
    by_item.as_table(name="latest")
    by_item.window(TumblingWindows(60_000)).count(name="per-minute")
    p.table(Topic("prices", value_serde=JsonSerde()), name="prices")
    return p


def _signatures(store: str, pipeline: Pipeline | None = None) -> list[tuple[int, bytes, bytes]]:
    step = (pipeline or _pipeline()).steps[store]
    return [(p, STEP_META_KEY, CODEC.encode(step.state_signature())) for p in (0, 1)]


def _entry(prefix: bytes, key: bytes, value: Any) -> tuple[int, bytes, bytes]:
    return partition_for(key, 2), keyed(prefix, key), CODEC.encode(value)


def _sorted(pairs: list[tuple[int, bytes, bytes]]) -> list[tuple[int, bytes, bytes]]:
    return sorted(pairs, key=lambda pair: (pair[0], pair[1]))


def _base(tmp_path: Path) -> Path:
    """A savepoint of ``shop``: sums of alice (110) and bob (7), a window of per-minute, and a
    record in flight in by-item's repartition topic."""
    pipeline, base = _pipeline(), tmp_path / "base"
    sums = _signatures("sums") + [_entry(ACC, b"alice", 110), _entry(ACC, b"bob", 7)]
    minute = _signatures("per-minute") + [(0, keyed(state_prefix("win"), b'"pen"') + bytes(8), CODEC.encode(3))]
    for store, pairs in (("sums", sums), ("per-minute", minute)):
        write_dataset(store_rows(StoreLayout(pipeline, store), _sorted(pairs)), base / "stores" / store)
    write_dataset(in_flight_rows([(1, 4, 1_000, b'"pen"', CODEC.encode({"item": "pen"}), [])]),
                  base / "in-flight" / "shop-by-item-repartition")
    Manifest("shop", "shop.pipeline:pipeline", "2026-11-23T12:00:00.000+00:00", 2, describe_pipeline(pipeline),
             {"sums": StoreInfo({0: 2, 1: 2}, "stores/sums", "shop-sums-changelog", {"kind": "aggregate", "layout": 1}),
              "per-minute": StoreInfo({0: 2, 1: 1}, "stores/per-minute", "shop-per-minute-changelog", None)},
             {"orders": {0: 12, 1: 7}}, {"shop-by-item-repartition": RepartitionInfo(
                 {0: 0, 1: 4}, {0: 0, 1: 5}, 1, "in-flight/shop-by-item-repartition")}).save(base)
    return base


def test_a_migrated_store_is_encoded_placed_by_the_partitioner_and_the_rest_copied_from_the_base(
        tmp_path: Path) -> None:
    base, new = _base(tmp_path), tmp_path / "new"
    rows = [{"partition": 0, "kind": "meta", "state": "step", "key": None, "value": '{"kind": "aggregate"}'},
            {"partition": 0, "kind": "state", "state": "acc", "key": "alice", "value": "1100"},
            {"key": "carol", "value": 70.5}]  # a fixed key (bob's), a number column
    manifest = write(new, _pipeline(), {"sums": rows}, base=base)

    assert list(store_pairs(new / "stores" / "sums")) == _sorted(
        _signatures("sums") + [_entry(ACC, b"alice", 1100), _entry(ACC, b"carol", 70.5)])
    decoded = [(r["kind"], r["decoded_key"], r["decoded_value"]) for r in
               pq.read_table(new / "stores" / "sums" / PART).to_pylist() if r["kind"] == "state"]
    assert sorted(decoded) == [("state", '{"key": "alice"}', "1100"), ("state", '{"key": "carol"}', "70.5")]
    for copied in ("stores/per-minute/" + PART, "in-flight/shop-by-item-repartition/" + PART):
        assert (new / copied).read_bytes() == (base / copied).read_bytes()

    read = Manifest.load(new)
    assert read == manifest and read.service == "shop" and read.partitions == 2
    assert read.offsets == {"orders": {0: 12, 1: 7}}
    assert read.stores["sums"].total == 4 and read.stores["sums"].signature == {"kind": "aggregate", "layout": 1}
    assert read.stores["per-minute"] == Manifest.load(base).stores["per-minute"]
    assert read.repartition == Manifest.load(base).repartition
    assert read.pipeline == describe_pipeline(_pipeline())
    assert read.notes == [f"written by framework.savepoint.write: stores sums from rows; the rest from {base}"]


def test_a_tuple_accumulator_and_table_versions_are_written_as_the_steps_keep_them(tmp_path: Path) -> None:
    write(tmp_path / "sp", _pipeline(), {
        "means": [{"key": "alice", "value": "[330, 3]"}],
        "latest": [{"key": "pen", "value": '[[1000, {"item": "pen", "amount": 2}], [2000, null]]'},
                   {"key": '["box", 2]', "value": [[5, 1]]}],
    }, partitions=2, offsets={})
    assert list(store_pairs(tmp_path / "sp" / "stores" / "means")) == _sorted(
        _signatures("means") + [_entry(ACC, b"alice", (330, 3))])  # a tuple, as init() (0, 0) is
    keys = KeySerde()
    assert list(store_pairs(tmp_path / "sp" / "stores" / "latest")) == _sorted(_signatures("latest") + [
        _entry(TABLE, keys.serialize("pen"), [[1000, {"item": "pen", "amount": 2}], [2000, None]]),
        _entry(TABLE, keys.serialize(("box", 2)), [[5, 1]])])
    manifest = Manifest.load(tmp_path / "sp")
    assert (manifest.offsets, manifest.repartition, sorted(manifest.stores)) == ({}, {}, ["latest", "means"])


def _refused(tmp_path: Path, stores: dict[str, Any], **options: Any) -> str:
    with pytest.raises(ConfigError) as refused:
        write(tmp_path / "new", _pipeline(), stores, **{"base": _base(tmp_path), **options})
    assert not (tmp_path / "new").exists()  # nothing written
    return str(refused.value)


@pytest.mark.parametrize(("rows", "line"), [
    ([{"key": "alice", "value": "1100"}, {"key": "bob", "value": '"ten"'}],
     ("store 'sums', key 'bob': value \"ten\" is text; step 'sums' keeps a number (its accumulator starts as 0). "
      "Fix: give the value as a number")),
    ([{"key": "bob", "value": "ten"}],
     "store 'sums', key 'bob': value 'ten' is not JSON text. Fix: give it as JSON (a string in quotes: '\"ten\"')"),
    ([{"key": "bob", "value": 1}, {"key": "bob", "value": 2}],
     ("store 'sums', key 'bob': given twice (one entry per key). Fix: keep one row per key, e.g. aggregate the rows "
      "by key first")),
    ([{"key": None, "value": 1}],
     "store 'sums': a row without a key; step 'sums' keeps state per key. Fix: give every row its record key"),
    ([{"kind": "timer", "state": "__timers.event", "key": "bob", "value": "1"}],
     ("store 'sums', key 'bob': a timer entry of state '__timers.event'; step 'sums' keeps state 'acc' only. Fix: "
      "filter the rows to kind = 'state' (and state = 'acc')")),
])
def test_a_value_or_key_the_step_could_not_have_written_is_one_line_and_nothing_is_written(
        tmp_path: Path, rows: list[dict[str, Any]], line: str) -> None:
    assert _refused(tmp_path, {"sums": rows}) == line


@pytest.mark.parametrize(("store", "rows", "line"), [
    ("means", [{"key": "alice", "value": "[330, 3, 1]"}],
     ("store 'means', key 'alice': value [330, 3, 1] is a list; step 'means' keeps a list of 2 (its accumulator "
      "starts as [0, 0]). Fix: give the value as a list of 2")),
    ("latest", [{"key": "pen", "value": "[[2000, 1], [1000, 2]]"}],
     ("store 'latest', key 'pen': version timestamps [2000, 1000] are not increasing; a table keeps one version per "
      "timestamp, oldest first. Fix: sort them and keep one per timestamp")),
    ("latest", [{"key": "pen", "value": '{"item": "pen"}'}],
     ("store 'latest', key 'pen': value {\"item\": \"pen\"} is not a table's versions; expected a non-empty list of "
      "[timestamp, value] pairs (timestamps in ms). Fix: give the versions as read gives them")),
    ("per-minute", [],
     ("store 'per-minute' is kept by a window step: writing it from rows is offered for rolling aggregates "
      "(aggregate, reduce, count, sum, min, max, mean) and tables with a changelog (as_table). Fix: take it from "
      "base= unchanged, or leave it out (it starts empty)")),
    ("prices", [],
     ("store 'prices' is a table read from its own topic 'prices': a restore rebuilds it from that topic, so entries "
      "written for it would never be read. Fix: produce the records to 'prices' instead (framework.produce)")),
    ("totals", [], "'shop' has no store 'totals'; its stores: sums, means, latest, per-minute, prices"),
])
def test_a_store_written_from_rows_is_checked_against_its_step(tmp_path: Path, store: str,
                                                                rows: list[dict[str, Any]], line: str) -> None:
    assert _refused(tmp_path, {store: rows}) == line


def test_the_base_must_be_of_the_service_and_a_bootstrap_needs_its_positions(tmp_path: Path) -> None:
    base = _base(tmp_path)
    with pytest.raises(ConfigError) as other:
        write(tmp_path / "new", _pipeline("shop-2"), {"sums": []}, base=base)
    assert str(other.value) == (f"base savepoint {base} is of service 'shop', not of 'shop-2'. Fix: name a "
                                "savepoint of 'shop-2'")
    with pytest.raises(ConfigError) as rescaled:
        write(tmp_path / "new", _pipeline(), {"sums": []}, base=base, partitions=4)
    assert str(rescaled.value) == (f"base savepoint {base} has 2 partitions, not 4: writing onto another partition "
                                   "count (rescaling) is not offered here. Fix: leave partitions= out")
    with pytest.raises(ConfigError) as bare:
        write(tmp_path / "new", _pipeline(), {"sums": []}, offsets={})
    assert str(bare.value) == (
        "a savepoint written without base= needs partitions= (the service's partition count) and offsets= (topic "
        "-> partition -> offset to continue from; {}: every source from its start). Fix: give both, or base= a "
        "savepoint of the service")
    with pytest.raises(ConfigError) as taken:
        write(base, _pipeline(), {"sums": []}, base=base)
    assert str(taken.value) == (f"{base} exists and is not empty: a savepoint goes to a directory of its own. "
                                "Fix: name a new directory")
    assert not (tmp_path / "new").exists()


def test_given_offsets_replace_the_bases(tmp_path: Path) -> None:
    manifest = write(tmp_path / "new", _pipeline(), {"sums": [{"key": "bob", "value": 8}]}, base=_base(tmp_path),
                     offsets={"orders": {"0": 20, "1": 9}})  # type: ignore[dict-item]  # JSON's string partitions: int() taken
    assert manifest.offsets == {"orders": {0: 20, 1: 9}}
    assert json.loads((tmp_path / "new" / "manifest.json").read_text())["offsets"] == {"orders": {"0": 20, "1": 9}}



def test_the_task_clocks_are_not_written_from_rows(tmp_path: Path) -> None:
    p = Pipeline("clocked", partitions=2)
    p.source(Topic("in", key_serde=StringSerde(), value_serde=JsonSerde(), partitions=2),
             watermarks=WatermarkStrategy.bounded_out_of_orderness(0, timestamp="ts")).count(name="counts")
    with pytest.raises(ConfigError) as refused:
        write(tmp_path / "sp", p, {"_time": [{"key": None, "value": "{}"}]}, partitions=2, offsets={})
    assert str(refused.value) == (
        "store '_time' is the tasks' clocks: writing it from rows is offered for rolling aggregates (aggregate, "
        "reduce, count, sum, min, max, mean) and tables with a changelog (as_table). Fix: take it from base= "
        "unchanged, or leave it out (it starts empty)")
