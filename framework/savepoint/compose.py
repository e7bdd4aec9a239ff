"""A new savepoint composed from rows in people's terms: a store migrated to another value shape,
a bad key fixed, or state bootstrapped from a table kept elsewhere (docs/savepoints.md, "State
with Spark"). ``framework.savepoint.spark`` feeds it Spark DataFrames; any iterable of mappings
will do, which is how the unit tests drive it without Spark.

1. Each given store's rows are encoded (``RowEncoder``): the key with the step's key serde, the
   value conformed to what the step keeps and encoded with the pipeline's value codec, the
   entry placed in the partition the framework's partitioner gives its key (the live service's
   placement: a key_by's repartition topic and ``framework.produce`` use it). Any row the step
   could not have written is one line naming the store, the key and what was expected, and
   nothing is written.
2. The directory is written as ``create`` writes one: the given stores from their rows (with
   each partition's ``00 "step"`` signature), every other store and the records in flight
   copied from ``base`` (checked first, as a restore checks them: ``framework.savepoint.verify``),
   the offsets ``base``'s unless given, and a manifest describing the target pipeline and
   listing each file's SHA-256 and rows, so ``fw savepoint restore`` checks it as any other
   savepoint.

Supported: rolling aggregates (``aggregate``, ``reduce``, ``count``, ``sum``, ``min``, ``max``,
``mean``: state ``acc``) and tables with a changelog (``as_table``: state ``table``, a key's
versions). A table read from its own topic (``pipeline.table``) is not: a restore rebuilds it
from that topic, so entries written for it would never be read.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from framework.engine.entries import StoreLayout
from framework.engine.partitioner import partition_for
from framework.errors import ConfigError
from framework.pipeline import steps as S
from framework.pipeline.definition import Pipeline
from framework.savepoint.files import Pair, store_rows, write_dataset
from framework.savepoint.manifest import STORES, Manifest, StoreInfo, describe_pipeline
from framework.savepoint.verify import checksums, verify
from framework.state.base import STEP_META_KEY
from framework.state.keys import keyed, state_prefix

SUPPORTED = ("rolling aggregates (aggregate, reduce, count, sum, min, max, mean) and tables with a changelog "
             "(as_table)")
Row = Mapping[str, Any]


class RowEncoder:
    """Encodes rows ``{key, value[, kind, state, partition]}`` of one store into its entries.

    ``key``: the record key as text, read as ``fw state get`` reads it (``StoreLayout.encode_key``:
    a string serde's text itself, any other serde's JSON first), or a value of the key's type.
    ``value``: JSON text (what ``read`` gives), or a value itself (a number column). ``kind``
    ``meta`` rows are skipped (the signature is the target step's); a given ``partition`` is
    ignored (the partitioner's is the placement)."""

    def __init__(self, pipeline: Pipeline, store: str, partitions: int) -> None:
        self.layout = StoreLayout(pipeline, store)  # an unknown store: one line naming the pipeline's
        self.store, self.partitions, self.step = store, partitions, self.layout.step
        self._template: Any = _NO_TEMPLATE
        if isinstance(self.step, S.Aggregate):
            self.state, self._template = "acc", _template(self.step)
        elif isinstance(self.step, S.Table) and pipeline.table_source(store) is None:
            self.state = "table"
        elif isinstance(self.step, S.Table):
            topic = pipeline.table_source(store).topic.name  # type: ignore[union-attr]
            raise ConfigError(f"store {store!r} is a table read from its own topic {topic!r}: a restore rebuilds it "
                              f"from that topic, so entries written for it would never be read. Fix: produce the "
                              f"records to {topic!r} instead (framework.produce)")
        else:
            what = f"kept by a {self.step.kind} step" if self.step is not None else "the tasks' clocks"
            raise ConfigError(f"store {store!r} is {what}: writing it from rows is offered for "
                              f"{SUPPORTED}. Fix: take it from base= unchanged, or leave it out (it starts empty)")
        self._prefix = state_prefix(self.state)
        self._seen: dict[bytes, str] = {}

    def signatures(self) -> list[Pair]:
        """The ``00 "step"`` entry of every partition, as a task stamps a new store."""
        value = self.layout.codec.encode(self.step.state_signature())  # type: ignore[union-attr]
        return [(p, STEP_META_KEY, value) for p in range(self.partitions)]

    def encode(self, row: Row) -> Pair | None:
        """The entry of ``row`` (None for a meta row), or a ``ConfigError`` naming what is wrong."""
        kind, state = row.get("kind"), row.get("state")
        if kind == "meta":
            return None
        if kind not in (None, "state") or state not in (None, self.state):
            raise ConfigError(f"store {self.store!r}, key {row.get('key')!r}: a {kind or 'state'} entry of state "
                              f"{state!r}; step {self.store!r} keeps state {self.state!r} only. Fix: filter the rows "
                              f"to kind = 'state' (and state = '{self.state}')")
        text = self._key_text(row.get("key"))
        raw = self._key_bytes(text)
        if raw in self._seen:
            raise ConfigError(f"store {self.store!r}, key {text!r}: given twice (one entry per key). Fix: keep one "
                              "row per key, e.g. aggregate the rows by key first")
        self._seen[raw] = text
        value = self._value(text, row.get("value"))
        try:
            encoded = self.layout.codec.encode(value)
        except TypeError as exc:
            raise ConfigError(f"store {self.store!r}, key {text!r}: the value cannot be kept ({exc}). Fix: register "
                              "the type with Pipeline(types=[...]), or give built-in values") from None
        return partition_for(raw, self.partitions), keyed(self._prefix, raw), encoded

    def _key_text(self, key: Any) -> str:
        if key is None:
            raise ConfigError(f"store {self.store!r}: a row without a key; step {self.store!r} keeps state per key. "
                              "Fix: give every row its record key")
        return key if isinstance(key, str) else json.dumps(key)

    def _key_bytes(self, text: str) -> bytes:
        try:
            return self.layout.encode_key(text)
        except ConfigError:
            raise ConfigError(f"store {self.store!r}, key {text!r}: the step's key serde "
                              f"({self.layout.key_serde!r}) cannot write it. Fix: give the key as that serde's "
                              "type") from None

    def _value(self, key: str, given: Any) -> Any:
        if isinstance(given, str):
            try:
                given = json.loads(given)
            except ValueError:
                raise ConfigError(f"store {self.store!r}, key {key!r}: value {given!r} is not JSON text. Fix: give "
                                  f"it as JSON (a string in quotes: {json.dumps(given)!r})") from None
        if self.state == "table":
            return self._versions(key, given)
        try:
            return _conform(given, self._template)
        except _Mismatch as exc:
            raise ConfigError(f"store {self.store!r}, key {key!r}: value {_shown(given)} is {exc.found}; step "
                              f"{self.store!r} keeps {exc.expected} (its accumulator starts as "
                              f"{_shown(self._template)}). Fix: give the value as {exc.expected}") from None

    def _versions(self, key: str, given: Any) -> list[list[Any]]:
        """A table key's versions: ``[[timestamp, value], ...]`` by increasing timestamp."""
        ok = isinstance(given, list) and given and all(
            isinstance(v, list) and len(v) == 2 and _is_int(v[0]) for v in given)
        if not ok:
            raise ConfigError(f"store {self.store!r}, key {key!r}: value {_shown(given)} is not a table's versions; "
                              "expected a non-empty list of [timestamp, value] pairs (timestamps in ms). Fix: give "
                              "the versions as read gives them")
        stamps = [v[0] for v in given]
        if stamps != sorted(set(stamps)):
            raise ConfigError(f"store {self.store!r}, key {key!r}: version timestamps {stamps} are not increasing; "
                              "a table keeps one version per timestamp, oldest first. Fix: sort them and keep one "
                              "per timestamp")
        return [list(v) for v in given]


_NO_TEMPLATE = object()  # an accumulator whose type init() does not tell (reduce, min, max)


def _template(step: S.Aggregate) -> Any:
    """What ``init()`` gives: the shape of the accumulator, where it tells one."""
    try:
        made = step.init()
    except Exception:  # noqa: BLE001 - the user's init: then the shape is not checkable
        return _NO_TEMPLATE
    return made if _checkable(made) else _NO_TEMPLATE


def _checkable(value: Any) -> bool:
    return isinstance(value, (bool, int, float, str, list, tuple, dict, Decimal, date)) or hasattr(
        value, "__dataclass_fields__")


class _Mismatch(Exception):
    def __init__(self, found: str, expected: str) -> None:
        super().__init__(found)
        self.found, self.expected = found, expected


def _conform(value: Any, template: Any) -> Any:
    """``value`` (from JSON) as the type of ``template`` (the step's initial accumulator): a
    number for a number, a tuple of as many conformed elements for a tuple, a dict for a
    dict or a registered dataclass, a list, text, a Decimal or a date from its text.
    ``_Mismatch`` when it cannot be one."""
    if template is _NO_TEMPLATE:
        return value
    if isinstance(template, bool):
        return _require(value, isinstance(value, bool), "true or false")
    if isinstance(template, (int, float)):
        return _require(value, _is_number(value), "a number")
    if isinstance(template, str):
        return _require(value, isinstance(value, str), "text")
    if isinstance(template, tuple):
        if not isinstance(value, (list, tuple)) or len(value) != len(template):
            raise _Mismatch(_found(value), f"a list of {len(template)}")
        return tuple(_conform(v, t if _checkable(t) else _NO_TEMPLATE) for v, t in zip(value, template))
    if isinstance(template, list):
        return _require(value, isinstance(value, list), "a list")
    if isinstance(template, dict):
        return _require(value, isinstance(value, dict), "an object")
    if hasattr(template, "__dataclass_fields__"):
        return _dataclass(value, type(template))
    return _from_text(value, template)


def _dataclass(value: Any, cls: type) -> Any:
    if isinstance(value, cls):
        return value
    fields = sorted(cls.__dataclass_fields__)  # type: ignore[attr-defined]
    expected = f"an object with the fields of {cls.__qualname__} ({', '.join(fields)})"
    if not isinstance(value, dict) or sorted(value) != fields:
        raise _Mismatch(_found(value), expected)
    try:
        return cls(**value)
    except (TypeError, ValueError):
        raise _Mismatch(_found(value), expected) from None


def _from_text(value: Any, template: Any) -> Any:
    """A Decimal from a number or its text, a datetime or date from ISO 8601 text."""
    kind = type(template)
    try:
        if kind is Decimal and (_is_number(value) or isinstance(value, str)):
            return Decimal(str(value))
        if kind in (datetime, date) and isinstance(value, str):
            return kind.fromisoformat(value)
    except ValueError:
        pass
    raise _Mismatch(_found(value), f"a {kind.__name__}")


def _require(value: Any, ok: bool, expected: str) -> Any:
    if not ok:
        raise _Mismatch(_found(value), expected)
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_KINDS = {bool: "true or false", int: "a number", float: "a number", str: "text", list: "a list",
          tuple: "a list", dict: "an object", type(None): "null"}


def _found(value: Any) -> str:
    return _KINDS.get(type(value), f"a {type(value).__name__}")


def _shown(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def encode_rows(encoder: RowEncoder, rows: Iterable[Row]) -> list[Pair]:
    """Every entry of the store: the signatures, then the rows' entries, in partition order."""
    pairs = encoder.signatures() + [p for p in map(encoder.encode, rows) if p is not None]
    return sorted(pairs, key=lambda pair: (pair[0], pair[1]))


def compose_savepoint(path: Path, pipeline: Pipeline, stores: Mapping[str, Iterable[Row]], *,
                      base: Path | None = None, offsets: Mapping[str, Mapping[int, int]] | None = None,
                      partitions: int | None = None) -> Manifest:
    """Write a savepoint of ``pipeline`` at ``path`` (a new or empty directory): ``stores``
    from their rows, everything else from ``base``. Without ``base``, ``partitions`` and
    ``offsets`` (the group's offsets to continue from; ``{}``: each source from its start) are
    needed. Every row is encoded and checked before anything is written."""
    _check_target(path)
    based = Manifest.load(base) if base is not None else None
    count, positions = _positions(pipeline, based, base, offsets, partitions)
    if based is not None and base is not None:  # what is copied from it is checked as a restore would
        verify(base, based, set(based.stores) - set(stores), based.repartition)
    encoded = {name: encode_rows(RowEncoder(pipeline, name, count), rows) for name, rows in stores.items()}
    path.mkdir(parents=True, exist_ok=True)
    try:
        infos = {name: _write_store(path, pipeline, name, pairs, count) for name, pairs in encoded.items()}
        manifest = Manifest(pipeline.name, pipeline.target or (based.target if based else ""),
                            datetime.now(UTC).isoformat(timespec="milliseconds"), count,
                            describe_pipeline(pipeline), {}, positions, {})
        if based is not None and base is not None:
            manifest = _copy_base(path, based, base, manifest, set(infos))
        manifest.stores.update(infos)
        manifest.notes.append(_note(stores, base))
        manifest.files = checksums(path, manifest)
        manifest.save(path)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    return manifest


def _check_target(path: Path) -> None:
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise ConfigError(f"{path} exists and is not empty: a savepoint goes to a directory of its own. Fix: name "
                          "a new directory")


def _positions(pipeline: Pipeline, based: Manifest | None, base: Path | None,
               offsets: Mapping[str, Mapping[int, int]] | None,
               partitions: int | None) -> tuple[int, dict[str, dict[int, int]]]:
    """The partition count and the offsets of the new savepoint."""
    if based is None:
        if partitions is None or offsets is None:
            raise ConfigError("a savepoint written without base= needs partitions= (the service's partition count) "
                              "and offsets= (topic -> partition -> offset to continue from; {}: every source from "
                              "its start). Fix: give both, or base= a savepoint of the service")
        count = partitions
    else:
        if based.service != pipeline.name:
            raise ConfigError(f"base savepoint {base} is of service {based.service!r}, not of {pipeline.name!r}. "
                              f"Fix: name a savepoint of {pipeline.name!r}")
        if partitions is not None and partitions != based.partitions:
            raise ConfigError(f"base savepoint {base} has {based.partitions} partitions, not {partitions}: writing "
                              "onto another partition count (rescaling) is not offered here. Fix: leave "
                              "partitions= out")
        count = based.partitions
    chosen = offsets if offsets is not None else based.offsets if based is not None else {}
    return count, {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in chosen.items()}


def _write_store(path: Path, pipeline: Pipeline, store: str, pairs: list[Pair], partitions: int) -> StoreInfo:
    relative = f"{STORES}/{store}"
    write_dataset(store_rows(StoreLayout(pipeline, store), pairs), path / relative)
    counts = dict.fromkeys(range(partitions), 0)
    for p, _key, _value in pairs:
        counts[p] += 1
    signature = json.loads(json.dumps(pipeline.steps[store].state_signature()))
    changelog = pipeline.changelog_topic(store)
    return StoreInfo(counts, relative, changelog, signature)


def _copy_base(path: Path, based: Manifest, base: Path, manifest: Manifest, replaced: set[str]) -> Manifest:
    """``manifest`` with the base's other stores and its records in flight, their files copied."""
    for name, info in based.stores.items():
        if name not in replaced:
            shutil.copytree(base / info.path, path / info.path)
            manifest.stores[name] = replace(info)
    for topic, flight in based.repartition.items():
        shutil.copytree(base / flight.path, path / flight.path)
        manifest.repartition[topic] = replace(flight)
    return manifest


def _note(stores: Mapping[str, Any], base: Path | None) -> str:
    written = ", ".join(sorted(stores)) or "none"
    return f"written by framework.savepoint.write: stores {written} from rows" + (
        f"; the rest from {base}" if base is not None else "")


def rows_of(records: Iterable[Any]) -> Iterator[Row]:
    """Mappings of ``records``: mappings as they are, Spark ``Row``s as their dicts."""
    for record in records:
        yield record if isinstance(record, Mapping) else record.asDict(recursive=True)
