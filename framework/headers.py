"""The names of the headers the framework writes, and how their values read.

- ``fw.origin``: on a repartition record, the input record it was made from, as
  ``topic[partition]@offset``: set by ``key_by`` from the record in hand (its own coordinates
  when read from a source topic, the origin it carries when read from a repartition topic).
- ``fw.source.*``, ``fw.origin.*``, ``fw.step``, ``fw.error.*``, ``fw.value.encoding``: on a
  dead letter (docs/operations.md, "Dead letters"); ``fw.step.input`` too when the step failed
  before it had any effect: what it was given, ``[key, value, timestamp]`` in the framework's
  value encoding (``framework.serde.values``), so the record can be re-driven to it;
- ``fw.redrive.*``: on a re-drive record (``framework.engine.redrive``), and on a dead letter
  of a re-driven record (``fw.redrive.of``: the dead letter it re-drove);
- ``fw.skipped``, ``fw.skip.reason``: on the dead letter of a record the operator's skip list
  named (``framework.engine.skips``): the entry, ``topic[partition]@offset``, and its reason.
"""

from __future__ import annotations

import json
import re
from typing import Any

ORIGIN = "fw.origin"
VALUE_ENCODING = "fw.value.encoding"
STEP_INPUT = "fw.step.input"
REDRIVE_PREFIX = "fw.redrive."
REDRIVE_SERVICE = "fw.redrive.service"
REDRIVE_STEP = "fw.redrive.step"
REDRIVE_OF = "fw.redrive.of"
REDRIVE_INPUT = "fw.redrive.input"
REDRIVE_KEY = "fw.redrive.key"
REDRIVE_VALUE = "fw.redrive.value"
REDRIVE_ENCODING = "fw.redrive.encoding"
SKIPPED = "fw.skipped"
SKIP_REASON = "fw.skip.reason"

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
