"""Byte layout of state keys inside a store partition.

One store holds every state of a step. A key is ``<state id><len(key)><key>[<suffix>]``:
the state id is one length-prefixed name, the record key is length-prefixed (4 bytes) so
no key is a prefix of another, and the optional suffix (a map key, a window start) sorts
bytewise after it. A prefix scan over ``<state id><len(key)><key>`` returns exactly one
key's entries.
"""

from __future__ import annotations

import struct

LEN = struct.Struct(">I")  # a key's length before it in a state key


def state_prefix(state_name: str) -> bytes:
    raw = state_name.encode()
    if len(raw) > 255:
        raise ValueError(f"state name too long (max 255 bytes): {state_name!r}")
    return bytes([len(raw)]) + raw


def keyed(prefix: bytes, key: bytes) -> bytes:
    return prefix + LEN.pack(len(key)) + key


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: no bound)."""
    p = bytearray(prefix)
    while p:
        if p[-1] < 0xFF:
            p[-1] += 1
            return bytes(p)
        p.pop()
    return None


def split_keyed(prefix: bytes, full: bytes) -> tuple[bytes, bytes]:
    """``(record key, suffix)`` of a key built by ``keyed(prefix, key) + suffix``."""
    n = LEN.unpack_from(full, len(prefix))[0]
    start = len(prefix) + 4
    return full[start : start + n], full[start + n :]
