"""The field-level reasons behind an incompatible schema change, by Avro's resolution rules,
for each compatibility level."""

from __future__ import annotations

from typing import Any

import pytest

from framework.serde.evolution import explain, reading_problems


def record(*fields: dict[str, Any], name: str = "Reading", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "sensor", "fields": list(fields), **extra}


ID = {"name": "id", "type": "string"}
N = {"name": "n", "type": "long"}
UNIT = {"name": "unit", "type": "string"}
UNIT_C = {**UNIT, "default": "C"}


def test_a_field_added_without_a_default_breaks_backward_naming_the_field() -> None:
    assert explain("BACKWARD", record(ID, UNIT), [(1, record(ID))]) == [
        "field `unit` added without a default: old records cannot be read (BACKWARD)"]
    assert explain("FORWARD", record(ID, UNIT), [(1, record(ID))]) == []  # old readers skip it
    assert explain("FULL", record(ID, UNIT), [(1, record(ID))]) == [
        "field `unit` added without a default: old records cannot be read (FULL)"]


def test_a_field_added_with_a_default_breaks_nothing() -> None:
    for level in ("BACKWARD", "FORWARD", "FULL", "FULL_TRANSITIVE"):
        assert explain(level, record(ID, UNIT_C), [(1, record(ID))]) == []


def test_a_field_removed_without_a_default_breaks_forward() -> None:
    assert explain("BACKWARD", record(ID), [(1, record(ID, UNIT))]) == []
    assert explain("FORWARD", record(ID), [(1, record(ID, UNIT))]) == [
        ("field `unit` removed without a default in the old schema: new records cannot be read with the old "
         "schema (FORWARD)")]
    assert explain("FORWARD", record(ID), [(1, record(ID, UNIT_C))]) == []


@pytest.mark.parametrize(("old", "new", "backward", "forward"), [
    ("int", "long", True, False),  # int promotes to long; a long does not fit an int
    ("long", "double", True, False),
    ("float", "double", True, False),
    ("string", "bytes", True, True),
    ("long", "int", False, True),
    ("long", "string", False, False),
])
def test_type_changes_follow_avro_promotions(old: str, new: str, backward: bool, forward: bool) -> None:
    before, after = record({"name": "v", "type": old}), record({"name": "v", "type": new})
    assert (explain("BACKWARD", after, [(1, before)]) == []) is backward
    assert (explain("FORWARD", after, [(1, before)]) == []) is forward
    if not backward:
        assert explain("BACKWARD", after, [(1, before)]) == [
            (f"field `v` type changed from {old} to {new}, which Avro cannot promote: old records cannot be "
             "read (BACKWARD)")]


def test_transitive_levels_check_every_version_and_name_the_one_that_breaks() -> None:
    versions = [(1, record(ID)), (2, record(ID, UNIT_C))]
    new = record(ID, UNIT)  # reads version 2's records (they have unit), not version 1's
    assert explain("BACKWARD", new, versions) == []
    assert explain("BACKWARD_TRANSITIVE", new, versions) == [
        "field `unit` added without a default: old records cannot be read (BACKWARD_TRANSITIVE, against version 1)"]
    assert explain("NONE", record(N), versions) == []


def test_nested_fields_arrays_enums_and_unions() -> None:
    inner = {"type": "record", "name": "Place", "fields": [{"name": "lat", "type": "double"}]}
    moved = {"type": "record", "name": "Place", "fields": [{"name": "lat", "type": "double"},
                                                             {"name": "alt", "type": "double"}]}
    assert [p.path for p in reading_problems(record({"name": "at", "type": moved}),
                                             record({"name": "at", "type": inner}))] == ["at.alt"]
    in_list = reading_problems(record({"name": "xs", "type": {"type": "array", "items": moved}}),
                               record({"name": "xs", "type": {"type": "array", "items": inner}}))
    assert [p.path for p in in_list] == ["xs[].alt"]
    colours = {"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN"]}
    fewer = {**colours, "symbols": ["RED"]}
    assert explain("BACKWARD", record({"name": "c", "type": fewer}), [(1, record({"name": "c", "type": colours}))]) \
        == ["field `c` lost symbol `GREEN` and has no default symbol: old records cannot be read (BACKWARD)"]
    assert explain("BACKWARD", record({"name": "c", "type": {**fewer, "default": "RED"}}),
                   [(1, record({"name": "c", "type": colours}))]) == []
    optional = record({"name": "u", "type": ["null", "string"], "default": None})
    required = record({"name": "u", "type": "string"})
    assert explain("BACKWARD", optional, [(1, required)]) == []
    assert explain("BACKWARD", required, [(1, optional)]) == [
        ("field `u` type changed from [null, string] to string, which Avro cannot promote: old records cannot "
         "be read (BACKWARD)")]


def test_a_renamed_record_needs_an_alias() -> None:
    renamed = record(ID, name="Measurement")
    assert explain("BACKWARD", renamed, [(1, record(ID))]) == [
        ("the schema renamed from sensor.Reading to sensor.Measurement without an alias: old records cannot "
         "be read (BACKWARD)")]
    assert explain("BACKWARD", record(ID, name="Measurement", aliases=["Reading"]), [(1, record(ID))]) == []


def test_a_field_renamed_with_an_alias_still_reads_old_records() -> None:
    assert explain("BACKWARD", record({"name": "key", "type": "string", "aliases": ["id"]}), [(1, record(ID))]) == []
    assert explain("BACKWARD", record({"name": "key", "type": "string"}), [(1, record(ID))]) == [
        "field `key` added without a default: old records cannot be read (BACKWARD)"]
