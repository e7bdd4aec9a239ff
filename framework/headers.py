"""The names of the headers the framework writes, and how their values read.

- ``fw.origin``: on a repartition record, the input record it was made from, as
  ``topic[partition]@offset``: set by ``key_by`` from the record in hand (its own coordinates
  when read from a source topic, the origin it carries when read from a repartition topic).
- ``fw.source.*``, ``fw.origin.*``, ``fw.step``, ``fw.error.*``, ``fw.value.encoding``: on a
  dead letter (docs/operations.md, "Dead letters").
"""

from __future__ import annotations

import json
import re
from typing import Any

ORIGIN = "fw.origin"
VALUE_ENCODING = "fw.value.encoding"

_COORDINATES = re.compile(r"(.+)\[(\d+)\]@(-?\d+)")


def coordinates(text: str) -> tuple[str, int, int] | None:
    """``topic[partition]@offset`` as ``(topic, partition, offset)``; None when it is not one."""
    m = _COORDINATES.fullmatch(text)
    return None if m is None else (m.group(1), int(m.group(2)), int(m.group(3)))


def dead_letter_value(value: bytes | None, encoding: str | None) -> Any:
    """A dead letter's value as its ``fw.value.encoding`` says: ``json`` parsed, ``repr`` as
    text, the bytes as they are otherwise (``original``: as produced to the source topic;
    ``internal``: a repartition record's that no longer decodes)."""
    if value is None:
        return None
    if encoding == "json":
        return json.loads(value)
    if encoding == "repr":
        return value.decode("utf-8", "replace")
    return value
