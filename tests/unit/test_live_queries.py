"""The decisions of live queries (framework/runtime/queries.py) without a broker: where a
query goes, how scans merge and filter, which stores and keys a request may name, and reading a
live RocksDB partition from another thread while its task closes it."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from framework import Pipeline, Topic, WatermarkStrategy
from framework.engine.entries import KeyFilter
from framework.errors import ConfigError, StateError
from framework.runtime.queries import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    LiveQueries,
    merge_rows,
    route,
    scan_limit,
)
from framework.state.rocksdb import RocksDBBackend


@pytest.mark.parametrize(("held", "owner", "forwarded", "expected"), [
    ("running", "a", False, "local"),
    ("running", "b", False, "local"),  # the group's view lags: the member that runs it answers
    ("restoring", "a", False, "restoring"),
    (None, "b", False, "forward"),
    ("standby", "b", False, "forward"),  # the owner first; the copy only when it does not answer
    ("standby", "b", True, "standby"),  # forwarded once: never passed on
    (None, "b", True, "none"),
    ("standby", None, False, "standby"),  # a rebalance under way: the copy answers
    (None, None, False, "none"),
])
def test_a_query_goes_to_the_member_running_the_partition(held: str | None, owner: str | None, forwarded: bool,
                                                          expected: str) -> None:
    assert route(held, owner, "a", forwarded) == expected


def test_scans_merge_in_key_order_and_say_when_entries_were_left_out() -> None:
    one = [{"partition": 0, "state": "acc", "key": "b", "value": 1}, {"partition": 0, "state": "acc", "key": "d"}]
    two = [{"partition": 1, "state": "acc", "key": "a"}, {"partition": 1, "state": "acc", "key": "c"}]
    rows, truncated = merge_rows([(one, False), (two, False)], 3)
    assert [r["key"] for r in rows] == ["a", "b", "c"] and truncated is True
    rows, truncated = merge_rows([(one, False), (two, False)], 4)
    assert len(rows) == 4 and truncated is False
    assert merge_rows([(one, True)], 10)[1] is True  # a part that was cut short


def test_numbers_sort_as_numbers_and_ranges_compare_like_with_like() -> None:
    rows, _ = merge_rows([([{"key": 10}, {"key": 9}, {"key": "x"}], False)], 10)
    assert [r["key"] for r in rows] == [9, 10, "x"]
    assert [k for k in (5, 9, 10, 11) if KeyFilter(low=9, high=11)(k)] == [9, 10]
    assert [k for k in ("k1", "k10", "k2") if KeyFilter(prefix="k1")(k)] == ["k1", "k10"]
    assert [k for k in ("a", "b", "c") if KeyFilter(low="b")(k)] == ["b", "c"]


def test_a_scan_limit_is_a_whole_number_within_the_cap() -> None:
    assert scan_limit(None) == DEFAULT_LIMIT and scan_limit("7") == 7
    with pytest.raises(ConfigError) as exc:
        scan_limit(str(MAX_LIMIT + 1))
    assert str(exc.value) == f"limit='{MAX_LIMIT + 1}': give a whole number from 1 to {MAX_LIMIT}"


def test_a_live_partition_is_read_in_chunks_and_a_closed_one_says_so(tmp_path: Path) -> None:
    backend = RocksDBBackend(tmp_path)
    part = backend.open("svc", "counts", 0)
    part.write_batch({bytes([1, 97]) + i.to_bytes(2, "big"): b"v" for i in range(25)}, 1)
    assert backend.opened("svc", "counts", 0) is part and backend.opened("svc", "counts", 1) is None
    assert len(part.read_chunk(b"\x01", None, 10)) == 10
    assert len(part.read_chunk(b"\x01", None, 100)) == 25
    part.close()
    assert backend.opened("svc", "counts", 0) is None
    with pytest.raises(StateError):
        part.read_chunk(b"\x01", None, 10)


def test_a_partition_closed_while_another_thread_reads_it_closes_for_good(tmp_path: Path) -> None:
    """A reader thread reads chunk after chunk; the owner closes the partition meanwhile. The
    reader's next chunk says the partition is closed, and the close released RocksDB's LOCK:
    the partition opens again in this process, with its data."""
    backend = RocksDBBackend(tmp_path)
    part = backend.open("svc", "counts", 0)
    part.write_batch({bytes([1, 97]) + i.to_bytes(4, "big"): b"v" * 100 for i in range(5_000)}, 1)
    first = threading.Event()
    outcome: list[str] = []

    def reader() -> None:
        try:
            while True:
                assert len(part.read_chunk(b"\x01", None, 1_000)) == 1_000
                first.set()
        except StateError as exc:
            outcome.append(str(exc))

    thread = threading.Thread(target=reader)
    thread.start()
    first.wait()
    part.close()
    thread.join()
    assert outcome == [f"state store partition at {tmp_path / 'svc' / 'counts' / '0'} is closed"]
    again = backend.open("svc", "counts", 0)
    assert again is not part and again.changelog_offset() == 1


def _shop() -> LiveQueries:
    """The queries of a member of an event-time service (so with a ``_time`` store) that has
    not joined its group yet: what it answers then depends on the request alone."""
    on_ts = WatermarkStrategy.bounded_out_of_orderness(0, timestamp="ts")
    p = Pipeline("shop")
    customers = p.table(Topic("customers"), watermarks=on_ts, name="customers")
    products = p.global_table(Topic("products"), watermarks=on_ts, name="products")
    orders = p.source(Topic("orders"), watermarks=on_ts)
    orders.join(customers, lambda o, c: o, name="enrich").join(products, lambda o, pr: o, key=lambda o: o["sku"],
                                                                name="priced").to(Topic("out"))
    return LiveQueries(SimpleNamespace(pipeline=p, restorer=None, instance_id="a"))


def test_the_store_listing_holds_the_pipelines_stores_and_no_internal_one() -> None:
    assert _shop().answer("/stores", {}, False) == (200, {"stores": ["customers", "enrich", "priced", "products"]})


@pytest.mark.parametrize("path", ["/stores/_time", "/stores/_time/0"])
def test_the_internal_clock_store_is_not_queried_and_says_where_its_watermarks_are(path: str) -> None:
    assert _shop().answer(path, {}, False) == (404, {"error": (
        "store '_time' is internal (each task's clock) and not queried here: the watermarks are on /status, and "
        "fw state reads it with --source local or changelog; the stores: customers, enrich, priced, products")})


def test_an_unknown_store_is_404_naming_the_stores_and_the_closest() -> None:
    assert _shop().answer("/stores/custmers/ann", {}, False) == (404, {"error": (
        "'shop' has no store 'custmers'; its stores: customers, enrich, priced, products; did you mean 'customers'?")})


def _no_escape(what: str, text: str, escape: str) -> str:
    return f"{what} {text!r} is not URL-encoded: {escape!r} is no percent-escape. Fix: encode it (a '%' is %25)"


@pytest.mark.parametrize(("path", "error"), [
    ("/stores/customers/%ZZ", _no_escape("key", "%ZZ", "%ZZ")),
    ("/stores/customers/ann%2", _no_escape("key", "ann%2", "%2")),
    ("/stores/customers/%FF", "key '%FF' is not URL-encoded UTF-8. Fix: encode the text's UTF-8 bytes"),
    ("/stores/cust%zomers/ann", _no_escape("store", "cust%zomers", "%zo")),
])
def test_a_path_that_is_not_url_encoded_is_400_in_one_line(path: str, error: str) -> None:
    assert _shop().answer(path, {}, False) == (400, {"error": error})


def test_a_well_encoded_key_goes_on_to_the_member() -> None:
    """``%25`` and UTF-8 escapes decode; the member, not started yet, says so."""
    code, body = _shop().answer("/stores/customers/100%25%20%C3%A9", {}, False)
    assert code == 503 and body["error"].startswith("the member is starting")
