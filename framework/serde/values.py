"""The framework's value encoding: state values, changelog values and repartition values.

Versioned, specified in docs/state-format.md, and safe to decode: decoding builds only
built-in values and the types a pipeline registered, so nothing read from a topic can
import or call any other code (pickle could). The bytes are one version byte, then one
MessagePack object::

    0x01 <MessagePack>

MessagePack itself carries None, bool, int (64-bit), float (binary64), str, bytes, list
(array) and dict (map, with any encodable hashable keys). The other types use extension
types (``ExtType(code, payload)``):

    code  payload       meaning
    1     empty         TUPLE marker: an array whose first element is it is a tuple of the rest
    2     empty         SET marker, the same way (elements sorted when they are comparable)
    3     empty         FROZENSET marker, the same way
    4     ISO 8601      datetime (``isoformat()``; an aware one keeps its UTC offset)
    5     ISO 8601      date
    6     text          Decimal (``str(d)``)
    7     decimal text  int beyond the 64-bit range
    8     empty         CUSTOM marker: ``[CUSTOM, type name, encoded value]``, a registered type
    -1    (MessagePack's own timestamp: never written; read as an aware UTC datetime)

A pipeline registers its own types with ``Pipeline(..., types=[...])``: dataclasses,
NamedTuples and Enums by default, anything else as a ``CustomType`` with ``encode`` and
``decode``. A value of any other type cannot be encoded (``TypeError`` naming the type).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import msgpack

from framework.errors import PipelineError

__all__ = ["DEFAULT_CODEC", "VERSION", "CustomType", "ValueCodec", "ValueSerde"]

VERSION = 1
_VERSION_BYTE = bytes((VERSION,))

TUPLE, SET, FROZENSET, DATETIME, DATE, DECIMAL, BIGINT, CUSTOM = range(1, 9)


class _Marker:
    """What an empty-payload marker extension decodes to, until its array is rebuilt."""

    __slots__ = ("code",)

    def __init__(self, code: int) -> None:
        self.code = code

    def __repr__(self) -> str:
        return f"<marker {self.code}>"


_MARKERS = {code: _Marker(code) for code in (TUPLE, SET, FROZENSET, CUSTOM)}
_TUPLE_EXT, _SET_EXT, _FROZENSET_EXT, _CUSTOM_EXT = (msgpack.ExtType(c, b"") for c in (TUPLE, SET, FROZENSET,
                                                                                      CUSTOM))
_T_MARK, _S_MARK, _F_MARK, _C_MARK = (_MARKERS[c] for c in (TUPLE, SET, FROZENSET, CUSTOM))


@dataclasses.dataclass(frozen=True)
class CustomType:
    """A user type the encoding may store: ``encode(obj)`` returns an encodable value
    (built-in types, or other registered types) and ``decode(that value)`` rebuilds it.

    ``name`` is what the bytes carry: keep it stable across releases of the service (the
    default is ``module.QualifiedName``). Dataclasses, NamedTuples and Enums need no
    functions: ``CustomType(Point)``, or just ``Point`` in ``Pipeline(types=[...])``.
    """

    cls: type
    name: str | None = None
    encode: Callable[[Any], Any] | None = None
    decode: Callable[[Any], Any] | None = None

    def resolved(self) -> tuple[str, Callable[[Any], Any], Callable[[Any], Any]]:
        cls = self.cls
        name = self.name or f"{cls.__module__}.{cls.__qualname__}"
        if self.encode is not None and self.decode is not None:
            return name, self.encode, self.decode
        if self.encode is not None or self.decode is not None:
            raise PipelineError(f"CustomType({cls.__qualname__}) needs both encode= and decode=, or neither")
        if dataclasses.is_dataclass(cls):
            names = [f.name for f in dataclasses.fields(cls)]
            return name, lambda obj: {n: getattr(obj, n) for n in names}, lambda d: cls(**d)
        if issubclass(cls, tuple) and hasattr(cls, "_fields"):
            return name, lambda obj: obj._asdict(), lambda d: cls(**d)
        if issubclass(cls, enum.Enum):
            return name, lambda obj: obj.value, cls
        raise PipelineError(
            f"{cls.__qualname__} is not a dataclass, NamedTuple or Enum: register it as "
            f"CustomType({cls.__qualname__}, encode=<obj -> built-in value>, decode=<value -> obj>)"
        )


def _custom_encoder(name: str, encode: Callable[[Any], Any]) -> Callable[[Any], list[Any]]:
    def custom(obj: Any) -> list[Any]:
        return [_CUSTOM_EXT, name, encode(obj)]

    return custom


def _sorted(items: Iterable[Any]) -> list[Any]:
    """Set elements in a stable order when they have one (the same set, the same bytes)."""
    items = list(items)
    try:
        items.sort()
    except TypeError:
        pass
    return items


class ValueCodec:
    """Encodes and decodes values in the format above; one per pipeline (its types).

    Not thread-safe (one packer per codec); each task thread, TestDriver and Spark worker
    process uses its own.
    """

    __slots__ = ("_decoders", "_encoders", "_pack", "types")

    def __init__(self, types: Iterable[type | CustomType] = ()) -> None:
        self.types = tuple(t if isinstance(t, CustomType) else CustomType(t) for t in types)
        self._encoders: dict[type, Callable[[Any], list[Any]]] = {}
        self._decoders: dict[str, Callable[[Any], Any]] = {}
        for t in self.types:
            name, enc, dec = t.resolved()
            if name in self._decoders:
                raise PipelineError(f"two registered types are named {name!r}: give one CustomType(name=...)")
            self._encoders[t.cls] = _custom_encoder(name, enc)
            self._decoders[name] = dec
        self._pack = msgpack.Packer(default=self._default, strict_types=True, use_bin_type=True).pack

    def encode(self, obj: Any) -> bytes:
        """``obj`` as bytes; ``TypeError`` naming the type of a value it cannot encode."""
        return _VERSION_BYTE + self._pack(obj)

    def decode(self, data: bytes) -> Any:
        """The value of ``data``; ``ValueError`` when the bytes are not in this format."""
        if not data or data[0] != VERSION:
            first = f"0x{data[0]:02x}" if data else "nothing"
            raise ValueError(f"not in the framework's value encoding: the first byte is {first}, not the "
                             f"version byte 0x{VERSION:02x} (written by something else, e.g. pickle)")
        try:
            return msgpack.unpackb(data[1:], ext_hook=self._ext, list_hook=self._list, strict_map_key=False,
                                   raw=False, timestamp=3)
        except ValueError:
            raise
        except Exception as exc:  # noqa: BLE001 - msgpack's own errors (ExtraData, StackError, ...)
            raise ValueError(f"malformed value bytes: {type(exc).__name__}: {exc}") from None

    # -- hooks ---------------------------------------------------------------------------

    def _default(self, obj: Any) -> Any:
        t = type(obj)
        if t is tuple:
            return [_TUPLE_EXT, *obj]
        custom = self._encoders.get(t)
        if custom is not None:
            return custom(obj)
        if t is set:
            return [_SET_EXT, *_sorted(obj)]
        if t is frozenset:
            return [_FROZENSET_EXT, *_sorted(obj)]
        if t is datetime:
            return msgpack.ExtType(DATETIME, obj.isoformat().encode())
        if t is date:
            return msgpack.ExtType(DATE, obj.isoformat().encode())
        if t is Decimal:
            return msgpack.ExtType(DECIMAL, str(obj).encode())
        if t is int:
            return msgpack.ExtType(BIGINT, str(obj).encode())
        raise TypeError(f"cannot encode a value of type {t.__module__}.{t.__qualname__}")

    def _ext(self, code: int, payload: bytes) -> Any:
        marker = _MARKERS.get(code)
        if marker is not None and not payload:
            return marker
        text = payload.decode()
        if code == DATETIME:
            return datetime.fromisoformat(text)
        if code == DATE:
            return date.fromisoformat(text)
        if code == DECIMAL:
            return Decimal(text)
        if code == BIGINT:
            return int(text)
        raise ValueError(f"unknown extension type {code}")

    def _list(self, items: list[Any]) -> Any:
        if not items:
            return items
        first = items[0]
        if type(first) is not _Marker:
            return items
        if first is _T_MARK:
            return tuple(items[1:])
        if first is _S_MARK:
            return set(items[1:])
        if first is _F_MARK:
            return frozenset(items[1:])
        if len(items) != 3 or type(items[1]) is not str:
            raise ValueError("malformed registered-type value: expected [CUSTOM, name, value]")
        decode = self._decoders.get(items[1])
        if decode is None:
            known = sorted(self._decoders) or "none"
            raise ValueError(f"unknown registered type {items[1]!r} (this pipeline registers: {known}); "
                             "add it to Pipeline(types=[...])")
        return decode(items[2])


DEFAULT_CODEC = ValueCodec()
"""Built-in types only (inspection, tools)."""


class ValueSerde:
    """The value encoding as a serde (a ``key_by``'s repartition values by default)."""

    __slots__ = ("codec",)

    def __init__(self, codec: ValueCodec | None = None) -> None:
        self.codec = codec or ValueCodec()

    def serialize(self, obj: Any) -> bytes:
        return self.codec.encode(obj)

    def deserialize(self, data: bytes) -> Any:
        return self.codec.decode(data)

    def bind(self, topic: str, is_key: bool) -> ValueSerde:
        return self

    def __repr__(self) -> str:
        return "ValueSerde()"
