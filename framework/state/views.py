"""Typed keyed state, scoped to the key of the record being processed.

Views are created once per task and read the current key from the ``KeyScope`` the
operator sets before calling user code, so state access costs a dict lookup, not an
object allocation. Values are stored as Python objects in the write cache; mutate a value
in place and call ``set``/``put`` again to make the change durable (as with Flink's heap
state, a read returns the cached object itself).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from framework.state.cache import CachedPartition
from framework.state.keys import keyed, prefix_end, split_keyed, state_prefix

T = TypeVar("T")
_MISSING = object()
# Defaults of these types are immutable: returned as is. Any other default (a list, a dict, a
# set, an object) is copied for every key that has no value, or mutating the value read for
# one key would change the default, and so the value, of every other key.
_IMMUTABLE = (type(None), bool, int, float, complex, str, bytes, frozenset, range)


class KeyScope:
    """The serialized key of the record (or timer) being processed."""

    __slots__ = ("key",)

    def __init__(self) -> None:
        self.key: bytes = b""


class ValueState(Generic[T]):
    """One value per key."""

    __slots__ = ("_copy_default", "_default", "_prefix", "_scope", "_store")

    def __init__(self, store: CachedPartition, scope: KeyScope, name: str, default: Any = None) -> None:
        self._store, self._scope, self._prefix, self._default = store, scope, state_prefix(name), default
        self._copy_default = not isinstance(default, _IMMUTABLE)

    def get(self) -> T:
        value = self._store.get(keyed(self._prefix, self._scope.key), _MISSING)
        if value is _MISSING:
            return copy.deepcopy(self._default) if self._copy_default else self._default
        return value

    def set(self, value: T) -> None:
        self._store.put(keyed(self._prefix, self._scope.key), value)

    def clear(self) -> None:
        self._store.delete(keyed(self._prefix, self._scope.key))


class ListState(Generic[T]):
    """A list per key, stored as one value (appends rewrite it at the next checkpoint)."""

    __slots__ = ("_value",)

    def __init__(self, store: CachedPartition, scope: KeyScope, name: str) -> None:
        self._value: ValueState[list[T]] = ValueState(store, scope, name)

    def get(self) -> list[T]:
        return list(self._value.get() or ())

    def add(self, item: T) -> None:
        items = self._value.get()
        self._value.set([item] if items is None else [*items, item])

    def update(self, items: list[T]) -> None:
        self._value.set(list(items)) if items else self._value.clear()

    def clear(self) -> None:
        self._value.clear()


class MapState(Generic[T]):
    """A sorted map per key: user keys are bytes or str (str is UTF-8 encoded)."""

    __slots__ = ("_prefix", "_scope", "_store")

    def __init__(self, store: CachedPartition, scope: KeyScope, name: str) -> None:
        self._store, self._scope, self._prefix = store, scope, state_prefix(name)

    def _k(self, map_key: bytes | str) -> bytes:
        mk = map_key.encode() if isinstance(map_key, str) else map_key
        return keyed(self._prefix, self._scope.key) + mk

    def get(self, map_key: bytes | str, default: T | None = None) -> T | None:
        return self._store.get(self._k(map_key), default)

    def put(self, map_key: bytes | str, value: T) -> None:
        self._store.put(self._k(map_key), value)

    def remove(self, map_key: bytes | str) -> None:
        self._store.delete(self._k(map_key))

    def contains(self, map_key: bytes | str) -> bool:
        return self._store.get(self._k(map_key), _MISSING) is not _MISSING

    def items(self, start: bytes | str = b"", end: bytes | str | None = None) -> Iterator[tuple[bytes, T]]:
        """``(map key bytes, value)`` ascending, optionally within ``[start, end)``."""
        base = keyed(self._prefix, self._scope.key)
        lo = base + (start.encode() if isinstance(start, str) else start)
        hi = prefix_end(base) if end is None else base + (end.encode() if isinstance(end, str) else end)
        for full, value in self._store.iter_range(lo, hi):
            yield split_keyed(self._prefix, full)[1], value

    def keys(self) -> Iterator[bytes]:
        return (k for k, _ in self.items())

    def clear(self) -> None:
        for k, _ in list(self.items()):
            self._store.delete(keyed(self._prefix, self._scope.key) + k)
