"""Re-drive records: a dead letter fed back to the step it failed at (``fw dead-letters
redrive``, ``framework.ops.deadletters``), handled by the task like any record of its topic.

A re-drive record is written to the topic the failed record was read from (a source or a
repartition topic of the service), to the same partition, so the same task takes it. It has
no key and no value (a marker as cheap to test in the hot loop as a watermark control record)
and carries everything in headers:

- ``fw.redrive.service``: the service it is for. Another framework service reading the same
  source topic ignores it (it is not a record of that topic's data);
- ``fw.redrive.step``: where it resumes. The step that reads the topic (its source step, or
  the ``key_by`` whose repartition topic it is) gets the failed record again as it was read
  (``fw.redrive.key``, ``fw.redrive.value``: its bytes, absent for None): nothing ran before
  that step. Any later step gets ``fw.redrive.input``, what the step was given
  (``[key, value, timestamp]`` in the framework's value encoding, copied from the dead
  letter's ``fw.step.input``), pushed to it directly: the steps before it, which ran when the
  record failed, do not run again (a count before it does not count it twice);
- ``fw.redrive.of``: the dead letter it re-drives, ``topic[partition]@offset``;
- ``fw.redrive.key``, ``fw.redrive.value``, ``fw.redrive.encoding``: the dead letter's key,
  value and ``fw.value.encoding``: what a new dead letter shows if it fails again.

The record's other headers are the failed record's own (``fw.origin`` after a repartition
topic). Decoding a re-drive builds values only (the value encoding); nothing in it runs code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from framework.errors import DeserializationError, ProcessingError, RecordError
from framework.headers import (
    REDRIVE_ENCODING,
    REDRIVE_INPUT,
    REDRIVE_KEY,
    REDRIVE_OF,
    REDRIVE_PREFIX,
    REDRIVE_SERVICE,
    REDRIVE_STEP,
    REDRIVE_VALUE,
)
from framework.records import InputRecord, Record, record_headers

_BULKY = (REDRIVE_INPUT, REDRIVE_KEY, REDRIVE_VALUE, REDRIVE_ENCODING)
NOT_REDRIVE: Any = object()  # ``Redrives.handle``: the record is not a re-drive record


def redrive_headers(service: str, step: str, of: str, *, step_input: bytes | None, key: bytes | None,
                    value: bytes | None, encoding: str, record_headers: Sequence[tuple[str, bytes]] = ()
                    ) -> list[tuple[str, bytes]]:
    """The headers of the re-drive record of a dead letter (module docstring):
    ``record_headers`` are the failed record's own; ``step_input`` is None for a record that
    resumes at the step reading its topic."""
    out = [*record_headers, (REDRIVE_SERVICE, service.encode()), (REDRIVE_STEP, step.encode()),
           (REDRIVE_OF, of.encode()), (REDRIVE_ENCODING, encoding.encode())]
    if step_input is not None:
        out.append((REDRIVE_INPUT, step_input))
    if key is not None:
        out.append((REDRIVE_KEY, key))
    if value is not None:
        out.append((REDRIVE_VALUE, value))
    return out


class Redrives:
    """A task's handling of re-drive records. ``pushes``: each step's push per parent (as the
    task compiled them); ``reads``: the input topics whose records leave a step without
    crossing a topic; ``decode``: the value encoding's decoder; ``failed``: what the task does
    with a record that failed (``Task.record_failed``: its dead letter, with the value it shows
    and its encoding, or the error raised under ``on_error="fail"``)."""

    def __init__(self, service: str, pushes: Mapping[str, Mapping[str, Any]],
                 reads: Callable[[str], frozenset[str]], decode: Callable[[bytes], Any],
                 ctx: Any, failed: Callable[[InputRecord, RecordError, tuple[bytes | None, str] | None], None]) -> None:
        self.service = service.encode()
        self.pushes, self.reads, self.decode, self.ctx = pushes, reads, decode, ctx
        self.failed = failed

    def handle(self, msg: InputRecord, own_step: str, own: Callable[[InputRecord], Any]) -> Any:
        """A record with no key and no value read by the handler of ``own_step`` (``own``):
        ``NOT_REDRIVE`` when it is not a re-drive record (the handler goes on with it), True
        when it is another service's (skipped, as a control record is), else None (handled:
        resumed, or its failure dead-lettered)."""
        headers = record_headers(msg) or []
        mine = {name: value for name, value in headers if name.startswith(REDRIVE_PREFIX)}
        target = mine.get(REDRIVE_STEP)
        if target is None:
            return NOT_REDRIVE
        if mine.get(REDRIVE_SERVICE) != self.service:
            return True
        kept = [(n, v) for n, v in headers if n not in _BULKY and n != REDRIVE_SERVICE]
        record = Record(msg.topic(), msg.partition(), msg.offset(), mine.get(REDRIVE_KEY), mine.get(REDRIVE_VALUE),
                        msg.timestamp()[1], kept)
        step = target.decode("utf-8", "replace")
        shown = None if step == own_step else (record.value(), (mine.get(REDRIVE_ENCODING) or b"original").decode())
        try:
            if step == own_step:
                own(record)  # the record again, as it was read: nothing ran before this step
            else:
                self._resume(record, step, mine.get(REDRIVE_INPUT))
        except RecordError as err:
            self.failed(record, err, shown)
        return None

    def _resume(self, record: Record, step: str, given: bytes | None) -> None:
        self.ctx.current = record
        push = self._push(record.topic(), step)
        try:
            k, v, ts = self.decode(given or b"")
        except (ValueError, TypeError) as exc:
            raise DeserializationError(f"the re-drive record's {REDRIVE_INPUT} does not decode: {exc}",
                                       self.ctx.coordinates(), step,
                                       fix="re-drive the dead letter again with fw dead-letters redrive") from None
        push(k, v, ts)

    def _push(self, topic: str, step: str) -> Any:
        for parent, push in (self.pushes.get(step) or {}).items():
            if topic in self.reads(parent):
                return push
        raise ProcessingError(f"the re-drive record resumes at step {step!r}, which this service's pipeline has "
                              f"no longer behind topic {topic!r}", self.ctx.coordinates(), step,
                              fix="re-drive with the pipeline the dead letter was written by, or skip it")
