"""Store entries as people read them: the bytes of docs/state-format.md (section 3) decoded
with the serdes of the pipeline definition.

A store key ``<state id><key length><record key>[<suffix>]`` becomes an ``Entry``: the state
name (``acc``, ``win``, a process function's ``value_state`` name...), the record key
decoded with the step's key serde, the window (start and end, ms) for time windows, or the
map key of a ``map_state``. A session store's value (the key's sessions) becomes one entry
per session. Timers and the store's meta entries are recognised too (``kind``), so a
changelog can be shown whole; ``fw state`` shows only the state entries.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from framework.engine.globals import PROGRESS_KEY
from framework.errors import ConfigError, StateError
from framework.pipeline import steps as S
from framework.pipeline.definition import TIME_STORE, Pipeline
from framework.serde import StringSerde
from framework.serde.values import ValueCodec
from framework.state.base import META_END, META_PREFIX
from framework.state.keys import prefix_end
from framework.windows.definitions import SessionWindows, SlidingWindows, TumblingWindows

_LEN = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_BIAS = 2**63  # time-window starts and timer timestamps are stored as value + 2^63, unsigned
_TIMERS = "__timers."


@dataclass(frozen=True)
class Entry:
    """One decoded store entry. ``kind``: ``state``, ``timer`` (``timer`` = its timestamp),
    or ``meta``. ``window``: ``(start, end)`` in ms for time windows and sessions."""

    kind: str
    state: str
    key: Any
    value: Any
    window: tuple[int, int] | None = None
    map_key: Any = None
    timer: int | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state, "key": self.key}
        if self.window is not None:
            out["window_start"], out["window_end"] = self.window
        if self.map_key is not None:
            out["map_key"] = self.map_key
        if self.timer is not None:
            out["timer"] = self.timer
        out["value"] = self.value
        return out


def store_step(pipeline: Pipeline, store: str) -> S.Step | None:
    """The step owning ``store`` (None for the time store); a ``ConfigError`` naming the
    pipeline's stores when it has no such store."""
    if store == TIME_STORE and store in pipeline.store_names():
        return None
    step = pipeline.steps.get(store)
    if step is None or not (step.stateful or isinstance(step, S.GlobalTable)):
        raise ConfigError(f"{pipeline.name!r} has no store {store!r}; its stores: "
                          f"{', '.join(pipeline.store_names()) or 'none (no stateful step)'}")
    return step


class StoreLayout:
    """Decodes and encodes the entries of one store of ``pipeline``."""

    def __init__(self, pipeline: Pipeline, store: str) -> None:
        self.pipeline, self.store = pipeline, store
        self.step = store_step(pipeline, store)
        self.key_serde = getattr(self.step, "key_serde", None) or StringSerde()
        self.codec = ValueCodec(pipeline.types)
        windows = getattr(self.step, "windows", None)
        self.window_size = windows.size_ms if isinstance(windows, (TumblingWindows, SlidingWindows)) else None
        self.sessions = isinstance(windows, SessionWindows)

    def encode_key(self, text: str) -> bytes:
        """The record key ``text`` stands for, as the step's key serde writes it: a string
        serde takes the text itself; any other tries it as JSON (``7``, ``"7"``, ``["a",1]``)
        first and as the text second."""
        candidates: list[Any] = [text]
        if not isinstance(self.key_serde, StringSerde):
            try:
                candidates.insert(0, json.loads(text))
            except ValueError:
                pass
        for candidate in candidates:
            try:
                return self.key_serde.serialize(candidate)
            except (TypeError, ValueError):
                continue
        raise ConfigError(f"key {text!r} cannot be written by the key serde of store {self.store!r} "
                          f"({self.key_serde!r}): give it as that serde's type")

    def decode_key(self, raw: bytes) -> Any:
        try:
            return self.key_serde.deserialize(raw)
        except Exception:  # noqa: BLE001 - any serde error: show the bytes instead
            return raw

    def decode(self, key: bytes, value: bytes | None) -> Iterator[Entry]:
        """The entries of one stored (or changelog) ``key``/``value``; a null value (a
        changelog tombstone) decodes to ``None``. Raises ``ValueError`` on bytes that are
        not in the state format."""
        decoded = None if value is None else self.codec.decode(value)
        if key.startswith(META_PREFIX):
            yield Entry("meta", key[1:].decode(errors="replace"), None, decoded)
            return
        if not key or len(key) < 1 + key[0]:
            raise ValueError(f"store key {key.hex()} is shorter than its state id")
        state = key[1:1 + key[0]].decode()
        rest = key[1 + key[0]:]
        if state.startswith(_TIMERS):
            ts = _U64.unpack_from(rest)[0] - _BIAS
            yield Entry("timer", state, self.decode_key(rest[8:-1]), decoded, timer=ts)
            return
        if not rest:  # the time store's clock: a state id alone
            yield Entry("state", state, None, decoded)
            return
        n = _LEN.unpack_from(rest)[0]
        record_key, suffix = self.decode_key(rest[4:4 + n]), rest[4 + n:]
        yield from self._state_entries(state, record_key, suffix, decoded)

    def entries(self, partition: int, key: bytes, value: bytes) -> list[Entry]:
        """``decode`` of a stored pair, a ``StateError`` naming the store, the partition and
        the key's bytes when they are not in the state format."""
        try:
            return list(self.decode(key, value))
        except (ValueError, IndexError) as exc:
            raise StateError(f"store {self.store!r} partition {partition}, key {key.hex()}: not in the state "
                             f"format ({exc})") from None

    def parse_key(self, text: str) -> Any:
        """``text`` as a value of the store's key type, as ``encode_key`` reads it: the text
        itself for a string serde, else JSON when it parses (``7``, ``["a",1]``)."""
        if isinstance(self.key_serde, StringSerde):
            return text
        try:
            return json.loads(text)
        except ValueError:
            return text

    def _state_entries(self, state: str, key: Any, suffix: bytes, value: Any) -> Iterator[Entry]:
        if state == "inflight" and len(suffix) == 8:  # an async step's record in flight: its sequence number
            yield Entry("state", state, key, value, map_key=int.from_bytes(suffix, "big"))
        elif suffix and self.window_size is not None and len(suffix) == 8:
            start = _U64.unpack(suffix)[0] - _BIAS
            yield Entry("state", state, key, value, window=(start, start + self.window_size))
        elif suffix:
            yield Entry("state", state, key, value, map_key=_text_or_bytes(suffix))
        elif self.sessions and state == "sessions" and isinstance(value, list):
            for start, end, acc in value:
                yield Entry("state", state, key, acc, window=(start, end))
        else:
            yield Entry("state", state, key, value)


def state_ids(read_first: Any) -> Iterator[bytes]:
    """The state ids present in a store partition, in key order, by seeking past each one:
    ``read_first(start)`` returns the first key ``>= start`` or None."""
    start: bytes | None = META_END  # past the meta keys (0x00...)
    while start is not None:
        key = read_first(start)
        if key is None:
            return
        sid = key[:1 + key[0]]
        yield sid
        start = prefix_end(sid)


class Readable(Protocol):
    """A store partition as far as reading it goes (RocksDB, read-only RocksDB, memory)."""

    def iter_range(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]: ...


def key_pairs(part: Readable, raw_key: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The stored pairs of record key ``raw_key`` (the key serde's bytes) in every state of
    the partition, timers left out: one prefix scan per state id."""
    for sid in state_ids(lambda start: next((k for k, _ in part.iter_range(start, None)), None)):
        if not is_timer_state(sid):
            prefix = keyed_prefix(sid, raw_key)
            yield from part.iter_range(prefix, prefix_end(prefix))


def state_pairs(part: Readable) -> Iterator[tuple[bytes, bytes]]:
    """Every stored pair of the partition's states, in key order; meta entries, timers and
    a global table's progress left out."""
    for k, v in part.iter_range(META_END, None):
        if not is_timer_state(k[:1 + k[0]]) and k != PROGRESS_KEY:
            yield k, v


@dataclass(frozen=True)
class KeyFilter:
    """Which record keys a scan keeps: those whose text starts with ``prefix``, and those
    from ``low`` (included) to ``high`` (excluded), each bound a value of the key type
    (``StoreLayout.parse_key``). A key compares with a bound of its own kind (numbers with
    numbers, strings with strings); otherwise their texts compare."""

    prefix: str | None = None
    low: Any = None
    high: Any = None

    def __call__(self, key: Any) -> bool:
        if self.prefix is not None and not key_text(key).startswith(self.prefix):
            return False
        if self.low is not None and _before(key, self.low):
            return False
        return self.high is None or _before(key, self.high)


def key_text(key: Any) -> str:
    return key if isinstance(key, str) else str(key)


def key_order(key: Any) -> tuple[int, Any]:
    """A sort key over keys of mixed kinds: numbers, then strings, then anything by its text."""
    if isinstance(key, (int, float)) and not isinstance(key, bool):
        return 0, key
    if isinstance(key, str):
        return 1, key
    return 2, key_text(key)


def _before(key: Any, bound: Any) -> bool:
    k, b = key_order(key), key_order(bound)
    return k < b if k[0] == b[0] else key_text(key) < key_text(bound)


def record_key(key: bytes) -> bytes | None:
    """The record key's bytes inside store key ``key`` (docs/state-format.md, section 3): a
    state key's after its length, a timer key's between its timestamp and its namespace byte;
    None for the entries of no key (meta entries, and a state id alone: the time store's clock).
    This is what places an entry in a task: the task the partitioner gives these bytes."""
    if key.startswith(META_PREFIX):
        return None
    sid = key[:1 + key[0]]
    rest = key[len(sid):]
    if is_timer_state(sid):
        return rest[8:-1]
    if not rest:
        return None
    n = _LEN.unpack_from(rest)[0]
    return rest[4:4 + n]


def keyed_prefix(state_id: bytes, record_key: bytes) -> bytes:
    return state_id + _LEN.pack(len(record_key)) + record_key


def is_timer_state(state_id: bytes) -> bool:
    return state_id[1:].startswith(_TIMERS.encode())


def _text_or_bytes(raw: bytes) -> Any:
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        return raw
    return text if text.isprintable() else raw

