"""A savepoint's files checked against its manifest, as a restore (and its dry run) does before it
changes anything: every file read whole, its SHA-256 and rows as listed, each store's entries
per partition and each topic's records in flight as counted. A truncated file, a file replaced
by another valid one, a file added or missing, and a damaged manifest are each one line naming
the file and the fix; a savepoint of an earlier release (no checksums) is still read whole and
counted."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from framework.engine.entries import StoreLayout
from framework.errors import RuntimeProblem
from framework.savepoint.files import PART, in_flight_rows, store_rows, write_dataset
from framework.savepoint.manifest import (
    MANIFEST,
    Manifest,
    RepartitionInfo,
    StoreInfo,
    describe_pipeline,
)
from framework.savepoint.restore import plan_restore
from framework.savepoint.verify import checksums, unchanged, verify
from framework.serde.values import ValueCodec
from framework.state.base import STEP_META_KEY
from framework.state.keys import keyed, state_prefix
from tests.unit.test_savepoint_files import NOWHERE, _pipeline

FLIGHT = "shop-by-item-repartition"
STORES = ["per-customer", "per-minute"]
FIX = "Fix: restore another savepoint of 'shop' (fw savepoint list shop), or copy this one again from where it was made"


def _entries(n: int, partition: int) -> list[tuple[int, bytes, bytes]]:
    codec = ValueCodec()
    return [(partition, keyed(state_prefix("acc"), json.dumps(f"c{partition}-{i}").encode()), codec.encode(i))
            for i in range(n)]


def _savepoint(path: Path, *, listed: bool = True) -> Manifest:
    """A savepoint of ``_pipeline()`` on disk: per-customer 2 + 1 entries, per-minute 1, and two
    records in flight besides a watermark control record; ``listed``: with the ``files`` of this
    release (else as an earlier release wrote it: no checksums, the control record counted)."""
    pipeline, codec = _pipeline(), ValueCodec()
    customers = [(0, STEP_META_KEY, codec.encode({"kind": "aggregate"})), *_entries(1, 0), *_entries(1, 1)]
    write_dataset(store_rows(StoreLayout(pipeline, "per-customer"), customers), path / "stores" / "per-customer")
    write_dataset(store_rows(StoreLayout(pipeline, "per-minute"), _entries(1, 1)), path / "stores" / "per-minute")
    write_dataset(in_flight_rows([(0, 4, 1_000, b"k", b"\x01\x05", []), (0, 5, 1_001, None, None,
                                   [("fw.watermark", b"0/2:999")]), (1, 0, 1_002, b"j", b"\x01\x06", [])]),
                  path / "in-flight" / FLIGHT)
    manifest = Manifest(
        service="shop", target="shop.pipeline:pipeline", created="2026-11-23T12:00:00.000+00:00", partitions=2,
        pipeline=describe_pipeline(pipeline),
        stores={"per-customer": StoreInfo({0: 2, 1: 1}, "stores/per-customer", "shop-per-customer-changelog"),
                "per-minute": StoreInfo({0: 0, 1: 1}, "stores/per-minute", "shop-per-minute-changelog")},
        offsets={"orders": {0: 12, 1: 7}},
        repartition={FLIGHT: RepartitionInfo({0: 4, 1: 0}, {0: 6, 1: 1}, 2, f"in-flight/{FLIGHT}", 1) if listed
                     else RepartitionInfo({0: 4, 1: 0}, {0: 6, 1: 1}, 3, f"in-flight/{FLIGHT}")})
    if listed:
        manifest.files = checksums(path, manifest)
    manifest.save(path)
    return Manifest.load(path)


def _truncate(file: Path) -> None:
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])


def test_a_savepoint_as_written_is_read_whole_and_its_records_in_flight_are_the_users(tmp_path: Path) -> None:
    manifest = _savepoint(tmp_path)
    assert sorted(manifest.files) == [f"in-flight/{FLIGHT}/{PART}", f"stores/per-customer/{PART}",
                                      f"stores/per-minute/{PART}"]
    assert manifest.files[f"stores/per-customer/{PART}"].rows == 3
    assert (manifest.repartition[FLIGHT].records, manifest.repartition[FLIGHT].rows) == (2, 3)
    verified = verify(tmp_path, manifest, STORES, [FLIGHT])
    assert verified.checksummed and verified.records == {FLIGHT: 2}  # the control record is not the user's
    assert verified.digests == {f: info.sha256 for f, info in manifest.files.items()}
    unchanged(tmp_path, verified.digests)


def test_a_truncated_file_is_refused_by_the_restore_and_its_dry_run_before_the_cluster_is_asked(
        tmp_path: Path) -> None:
    _savepoint(tmp_path)
    file = tmp_path / "stores" / "per-customer" / PART
    _truncate(file)
    with pytest.raises(RuntimeProblem) as refused:
        plan_restore(NOWHERE, _pipeline(), tmp_path, tmp_path / "state")  # all of --dry-run; NOWHERE is never asked
    said = str(refused.value)
    assert said.startswith(f"savepoint {tmp_path} is damaged: {file} is not readable Parquet (")
    assert said.endswith(f"); nothing was changed. {FIX}") and "\n" not in said


def test_a_file_replaced_by_another_valid_parquet_file_is_refused_by_its_checksum(tmp_path: Path) -> None:
    manifest = _savepoint(tmp_path / "sp")
    other = [(1, keyed(state_prefix("acc"), b'"someone else"'), ValueCodec().encode(9))]
    write_dataset(store_rows(StoreLayout(_pipeline(), "per-minute"), other), tmp_path / "other")
    replaced = tmp_path / "sp" / "stores" / "per-minute" / PART
    shutil.copyfile(tmp_path / "other" / PART, replaced)  # valid Parquet, as many rows per partition, another entry
    with pytest.raises(RuntimeProblem) as refused:
        verify(tmp_path / "sp", manifest, STORES, [FLIGHT])
    digest = hashlib.sha256(replaced.read_bytes()).hexdigest()
    assert str(refused.value) == (
        f"savepoint {tmp_path / 'sp'} is damaged: {replaced} is not the file the savepoint wrote (its SHA-256 is "
        f"{digest[:16]}..., its manifest lists {manifest.files[f'stores/per-minute/{PART}'].sha256[:16]}...); "
        f"nothing was changed. {FIX}")


def test_a_file_added_to_a_dataset_or_missing_from_it_is_refused(tmp_path: Path) -> None:
    manifest = _savepoint(tmp_path)
    added = tmp_path / "stores" / "per-minute" / "part-00001.parquet"
    shutil.copyfile(tmp_path / "stores" / "per-minute" / PART, added)
    with pytest.raises(RuntimeProblem) as extra:
        verify(tmp_path, manifest, STORES, [FLIGHT])
    assert str(extra.value) == (f"savepoint {tmp_path} is damaged: {added} is not one of its files (its manifest "
                                f"does not list it), and a restore would write its rows too; nothing was changed. {FIX}")
    added.unlink()
    (tmp_path / "in-flight" / FLIGHT / PART).unlink()
    with pytest.raises(RuntimeProblem) as missing:
        verify(tmp_path, manifest, STORES, [FLIGHT])
    assert str(missing.value) == (f"savepoint {tmp_path} is damaged: {tmp_path / 'in-flight' / FLIGHT / PART} is "
                                  f"missing; nothing was changed. {FIX}")


def test_a_savepoint_of_an_earlier_release_without_checksums_is_still_read_whole_and_counted(tmp_path: Path) -> None:
    manifest = _savepoint(tmp_path, listed=False)
    verified = verify(tmp_path, manifest, STORES, [FLIGHT])
    assert not verified.checksummed and verified.records == {FLIGHT: 2} and len(verified.digests) == 3

    file = tmp_path / "stores" / "per-customer" / PART
    good = file.read_bytes()
    _truncate(file)
    with pytest.raises(RuntimeProblem) as truncated:
        verify(tmp_path, manifest, STORES, [FLIGHT])
    assert str(truncated.value).startswith(f"savepoint {tmp_path} is damaged: {file} is not readable Parquet (")
    assert str(truncated.value).endswith(f"); nothing was changed. {FIX}")

    file.write_bytes(good)
    manifest.stores["per-customer"].entries = {0: 2, 1: 2}
    with pytest.raises(RuntimeProblem) as counted:
        verify(tmp_path, manifest, STORES, [FLIGHT])
    assert str(counted.value) == (
        f"savepoint {tmp_path} is damaged: the files of store 'per-customer' ({tmp_path / 'stores' / 'per-customer'}) "
        f"hold 1 entries of partition 1, and its manifest counts 2; nothing was changed. {FIX}")


def test_a_file_altered_after_the_check_is_refused_before_the_restore_changes_anything(tmp_path: Path) -> None:
    manifest = _savepoint(tmp_path)
    verified = verify(tmp_path, manifest, STORES, [FLIGHT])
    file = tmp_path / "stores" / "per-minute" / PART
    file.write_bytes(file.read_bytes() + b"\x00")
    with pytest.raises(RuntimeProblem) as refused:
        unchanged(tmp_path, verified.digests)
    assert str(refused.value) == (f"savepoint {tmp_path} changed after it was checked: {file} was altered; nothing "
                                  "was changed. Fix: leave the savepoint's files as they are while it is restored, "
                                  "and restore it again")


def test_a_damaged_manifest_names_its_file_and_says_to_use_another_savepoint(tmp_path: Path) -> None:
    _savepoint(tmp_path)
    text = (tmp_path / MANIFEST).read_text()
    (tmp_path / MANIFEST).write_text(text[: len(text) // 2])
    with pytest.raises(RuntimeProblem) as refused:
        Manifest.load(tmp_path)
    said = str(refused.value)
    assert said.startswith(f"savepoint manifest {tmp_path / MANIFEST} is damaged (JSONDecodeError: ")
    assert said.endswith("): the savepoint cannot be read or restored. Fix: restore another savepoint (fw savepoint "
                         "list shows them), or create a new one (fw savepoint create)")
    assert "\n" not in said
