"""A task: one partition number of a service, compiled once into per-topic handlers.

Tasks are made and driven by the ``TaskRunner`` (``framework.engine.runner``), the same for
the Kafka runtime, the TestDriver and the Spark replay. A task decodes each record, runs
the compiled closures of the pipeline (``framework.engine.compile``), and sends a failing
record to the dead-letter topic (or, under ``on_error="fail"``, stops on it unless the
operator's skip list names it: ``framework.engine.skips``). Checkpoint support is split in
the steps of the checkpoint procedure: ``produce_changelogs`` (step 1), ``commit_state``
(the state write) and ``discard_state`` (abort).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from framework.engine.compile import build_step
from framework.engine.context import InputRecord, Output, TaskContext, record_headers
from framework.engine.redrive import NOT_REDRIVE, Redrives
from framework.engine.skips import Skip, SkipList
from framework.errors import (
    DeserializationError,
    PipelineError,
    ProcessingError,
    RecordError,
    StateError,
)
from framework.headers import SKIP_REASON, SKIPPED, STEP_INPUT, VALUE_ENCODING, coordinates
from framework.logs import record_fields
from framework.operators.async_io import HOLD
from framework.pipeline import steps as S
from framework.pipeline.definition import TIME_STORE, Pipeline
from framework.serde.values import ValueCodec, ValueSerde
from framework.state.base import STEP_META_KEY, StoreBackend
from framework.state.cache import CachedPartition
from framework.state.keys import state_prefix
from framework.time.clock import WATERMARK_HEADER, Input, TaskClock, control_header
from framework.time.watermarks import NO_WATERMARK, BoundedOutOfOrderness

log = logging.getLogger("framework.task")
Handler = Callable[[InputRecord], bool | None]  # True: the record was a watermark control record
CLOCK_KEY = state_prefix("clock")  # the task clock's entry in the time store


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _gate(handler: Handler, ops: tuple[Any, ...]) -> Handler:
    def gated(msg: InputRecord) -> Any:
        for op in ops:
            if op.pending >= op.capacity:
                return HOLD
        return handler(msg)

    return gated


def _fanout(pushes: list[S.Push]) -> S.Push:
    if not pushes:
        return lambda k, v, ts: None
    if len(pushes) == 1:
        return pushes[0]
    pushes_t = tuple(pushes)

    def fan(k: Any, v: Any, ts: int) -> None:
        for p in pushes_t:
            p(k, v, ts)

    return fan


class Task:
    """The compiled pipeline for one partition number, with its store partitions."""

    def __init__(self, pipeline: Pipeline, partition: int, backend: StoreBackend, output: Output, *,
                 codec: ValueCodec, partitions: int = 1, now_ms: Callable[[], int] | None = None,
                 fail_on_error: bool = False, skips: SkipList | None = None, globals: Any = None,
                 calls: Any = None) -> None:
        self.pipeline = pipeline
        self.partition = partition
        self.partitions = partitions  # tasks of the service: the partitions of its internal topics
        self.output = output
        self.codec = codec
        self.fail_on_error = fail_on_error
        self.skips = skips  # consulted only when a record fails under on_error=fail
        self.stores = {name: CachedPartition(backend.open(pipeline.name, name, partition), codec, name)
                       for name in pipeline.store_names()}
        self._check_state_fits()
        self.time = TaskClock(now_ms or _wall_ms)
        self.ctx = TaskContext(pipeline, partition, output, self.stores, self.time, self, codec, globals, calls)
        self.handlers: dict[str, Handler] = self._compile()
        self.emitters = self._emitters()
        self._time_store = self.stores.get(TIME_STORE)
        self._time_saved: Any = None
        if self._time_store is not None:
            self._time_saved = self._time_store.get(CLOCK_KEY)
            self.time.restore(self._time_saved)
        self.dead_letters = 0
        for fn in self.ctx.start_listeners:  # async steps call again what their store holds in flight
            fn()

    def _check_state_fits(self) -> None:
        """Each stateful step's store was written by a step of the same kind, or is new (then
        it is stamped with the step's signature, which the next checkpoint makes durable)."""
        for step in self.pipeline.stateful_steps():
            store = self.stores[step.name]
            want = step.state_signature()
            found = store.get(STEP_META_KEY)
            if found is None:
                store.put(STEP_META_KEY, want)
            elif found != want:
                raise StateError(
                    f"step {step.name!r} of service {self.pipeline.name!r} is now {describe_signature(want)}, but its "
                    f"state (store {step.name!r}, partition {self.partition}, changelog "
                    f"{self.pipeline.restore_topic(step.name)!r}) was written by {describe_signature(found)}. Fix: give "
                    "the changed step a new name (it starts with empty state; the old state stays unused), or "
                    "keep the step as it was, or reset the service's state (delete its changelog topics and "
                    "local state directory and reprocess its input)")

    # -- compilation ---------------------------------------------------------------------

    def _compile(self) -> dict[str, Handler]:
        p = self.pipeline
        inputs: dict[str, dict[str, S.Push]] = {}  # step -> parent -> push
        handlers: dict[str, Handler] = {}
        self._internal_values: dict[str, Callable[[bytes], Any]] = {}  # repartition topic -> its value decoder
        # re-drive records resume at a step's push, found in ``inputs`` once it is filled in
        self.redrives = Redrives(p.name, inputs, self._reached_from, self.codec.decode, self.ctx,
                                 self.record_failed)
        for step in reversed(list(p.steps.values())):  # steps are stored in topological order
            down = _fanout([inputs[c][step.name] for c in p.children[step.name]])
            if isinstance(step, S.Source):
                t = step.topic
                if t.name in handlers:
                    raise PipelineError(f"topic {t.name!r} is a source twice; use one source and fan out")
                handlers[t.name] = self._source_handler(step, down)
            elif isinstance(step, S.GlobalTable):
                continue  # held by the process (framework.engine.globals), not by a task
            elif isinstance(step, S.KeyBy):
                topic = p.repartition_topic(step.name)
                inp = self.time.input(topic, fed=True)
                values = ValueSerde(self.codec) if step.value_serde is None else step.value_serde.bind(topic, False)
                handlers[topic] = self._decoder(step.name, step.key_serde, values, down, inp)
                self._internal_values[topic] = values.deserialize
                inputs[step.name] = build_step(step, self.ctx, down)
            else:
                inputs[step.name] = build_step(step, self.ctx, down)
        return self._gated(handlers)

    def _reached_from(self, parent: str) -> frozenset[str]:
        """The input topics whose records leave step ``parent`` without crossing a topic (a
        ``key_by``'s: its repartition topic)."""
        if isinstance(self.pipeline.steps[parent], S.KeyBy):
            return frozenset((self.pipeline.repartition_topic(parent),))
        return self.pipeline.step_inputs(parent)

    def _gated(self, handlers: dict[str, Handler]) -> dict[str, Handler]:
        """The handler of each input whose records reach an async step returns ``HOLD`` while
        the step is full: the record is not taken (``TaskRunner.process`` holds it)."""
        ops = self.ctx.async_operators
        if not ops:
            return handlers
        out = dict(handlers)
        for topic, handler in handlers.items():
            reached = tuple(op for op in ops if topic in self.pipeline.step_inputs(op.name))
            if reached:
                out[topic] = _gate(handler, reached)
        return out

    def _source_handler(self, step: S.Source, down: S.Push) -> Handler:
        t, wm = step.topic, step.watermarks
        ks, vs = t.key_serde.bind(t.name, True), t.value_serde.bind(t.name, False)
        if wm is None:
            self.time.input(t.name)
            return self._decoder(step.name, ks, vs, down)
        assign = wm.assigner(step.name)
        if wm.upstream:
            inp = self.time.input(t.name, fed=True)
            return self._decoder(step.name, ks, vs, down, inp, assign)
        inp = self.time.input(t.name, wm.generator(), idle_timeout_ms=wm.idle_timeout_ms)
        return self._generating_decoder(step.name, ks, vs, down, inp, assign)

    def _decode(self, step: str, kd: Callable[[bytes], Any], vd: Callable[[bytes], Any],
                msg: InputRecord) -> tuple[Any, Any]:
        kb, vb = msg.key(), msg.value()
        try:
            return (None if kb is None else kd(kb)), (None if vb is None else vd(vb))
        except Exception as exc:  # any decoder failure is this record's fault
            raise self._undecodable(step, exc) from exc

    def _undecodable(self, step: str, exc: Exception) -> DeserializationError:
        return DeserializationError(
            f"cannot decode the record: {type(exc).__name__}: {exc}", self.ctx.coordinates(), step,
            fix="check the producer's serializer against the source topic's serdes (with "
                "on_error=dead_letter the record goes to the dead-letter topic)",
        )

    def _decoder(self, step: str, key_serde: Any, value_serde: Any, down: S.Push, fed: Input | None = None,
                 assign: Callable[[Any, int], int] | None = None) -> Handler:
        """Decode and push; on a ``fed`` input, watermark control records update the clock."""
        kd, vd, ctx, decode, on_control = key_serde.deserialize, value_serde.deserialize, self.ctx, self._decode, \
            self.time.on_control
        redrive = self.redrives.handle

        def handle(msg: InputRecord) -> bool | None:
            ctx.current = msg
            if msg.value() is None and msg.key() is None:  # a watermark control record, or a re-drive
                if fed is not None:
                    for name, value in record_headers(msg) or ():
                        if name == WATERMARK_HEADER:
                            on_control(fed, value)
                            return True
                done = redrive(msg, step, handle)
                if done is not NOT_REDRIVE:
                    return done  # type: ignore[no-any-return]
            k, v = decode(step, kd, vd, msg)
            ts = msg.timestamp()[1]
            down(k, v, ts if assign is None else assign(v, ts))
            return None

        return handle

    def _generating_decoder(self, step: str, key_serde: Any, value_serde: Any, down: S.Push, inp: Input,
                            assign: Callable[[Any, int], int] | None) -> Handler:
        """Decode, push, then advance the partition's watermark generator with the record.
        (Every record of an event-time source passes here: the decoding is ``_decode``'s, inline.)"""
        kd, vd, ctx, undecodable, advanced = key_serde.deserialize, value_serde.deserialize, self.ctx, \
            self._undecodable, self.time.advanced
        gen = inp.generator
        on_event = gen.on_event  # type: ignore[union-attr]
        redrive = self.redrives.handle
        # bounded out-of-orderness (the common strategy) inline: watermark = max timestamp - lag
        lag = gen.lag if type(gen) is BoundedOutOfOrderness else None

        def handle(msg: InputRecord) -> bool | None:
            ctx.current = msg
            kb, vb = msg.key(), msg.value()
            if vb is None and kb is None:  # perhaps a re-drive record (framework.engine.redrive)
                done = redrive(msg, step, handle)
                if done is not NOT_REDRIVE:
                    return done  # type: ignore[no-any-return]
            try:
                k = None if kb is None else kd(kb)
                v = None if vb is None else vd(vb)
            except Exception as exc:  # any decoder failure is this record's fault
                raise undecodable(step, exc) from exc
            ts = msg.timestamp()[1]
            if assign is not None:
                ts = assign(v, ts)
            if inp.idle:
                inp.idle = False  # rejoins the minimum; the clocks never go back
            inp.seen = True
            try:
                down(k, v, ts)
            finally:
                if lag is None:
                    w = on_event(v, ts)
                else:
                    w = ts - lag
                    if w > gen.watermark:  # type: ignore[union-attr]
                        gen.watermark = w  # type: ignore[union-attr]
                    else:
                        w = gen.watermark  # type: ignore[union-attr]
                if w > inp.watermark:
                    inp.watermark = w
                    advanced(inp)
            return None

        return handle

    def _emitters(self) -> list[list[Any]]:
        """Where this task writes watermark control records: ``[topic, clock, last sent, partitions]``."""
        out: list[list[Any]] = []
        for step in self.pipeline.steps.values():
            if isinstance(step, S.KeyBy):
                out.append([self.pipeline.repartition_topic(step.name), self.ctx.clock_for(step.name), NO_WATERMARK,
                            self.partitions])
            elif isinstance(step, S.Sink) and step.topic.watermarks:
                out.append([step.topic.name, self.ctx.clock_for(step.name), NO_WATERMARK,
                            step.topic.partitions or self.partitions])
        return out

    # -- time ----------------------------------------------------------------------------

    def flush_watermarks(self) -> bool:
        """Send each downstream topic this task's watermark (or idleness), if it changed, to
        every partition: a downstream task's watermark is the minimum over its upstream tasks.
        True when something was sent."""
        produce, sent = self.output.produce, False
        for em in self.emitters:
            topic, clock, last, n = em
            state = None if clock.idle else clock.watermark
            if state == last or state == NO_WATERMARK:
                continue
            em[2], sent = state, True
            header = [(WATERMARK_HEADER, control_header(self.partition, self.partitions, state))]
            for p in range(n):
                produce(topic, None, None, 0, header, p)
        return sent

    def tick(self) -> bool:
        """Wall-clock work: idle partitions, processing-time timers, watermark emission.
        True when it changed state or produced something (a checkpoint has work to do)."""
        self.ctx.current = None
        self.time.tick()
        now = self.time.now_ms()
        for _, fn in self.ctx.processing_listeners:
            fn(now)
        sent = self.flush_watermarks()
        return sent or any(store.dirty for store in self.stores.values())

    def timer_failed(self, step: str, ts: int, key: bytes, exc: BaseException) -> None:
        err = ProcessingError(f"timer at {ts} for key {key!r} failed: {type(exc).__name__}: {exc}", None, step,
                              fix="fix the step's timer or window function (the timer is in the dead-letter "
                                  "topic with its key and timestamp)")
        if self.fail_on_error:
            raise err from exc
        log.error("dead letter: %s", err, extra={
            **record_fields(None, step, key=key), "partition": self.partition, "timestamp": ts,
            "service": self.pipeline.name})
        headers = [("fw.step", step.encode()), ("fw.timer.timestamp", str(ts).encode()),
                   ("fw.error.type", type(exc).__name__.encode()), ("fw.error.message", str(err)[:4000].encode())]
        try:
            self.output.produce(self.pipeline.dead_letter.name, key, None, max(ts, 0), headers)
        except RecordError:  # a time the dead-letter topic refuses: fw.timer.timestamp keeps it
            self.output.produce(self.pipeline.dead_letter.name, key, None, 0, headers)
        self.dead_letters += 1

    # -- records -------------------------------------------------------------------------

    def handle(self, msg: InputRecord) -> bool | None:
        """Process one record (True: it was a watermark control record). A record error is
        raised for the caller to dead-letter or stop on."""
        return self.handlers[msg.topic()](msg)

    def record_failed(self, msg: InputRecord, error: RecordError,
                      shown: tuple[bytes | None, str] | None = None) -> None:
        """``msg`` failed with ``error``, wherever it was processed (the record loop, a re-drive,
        an async call's result): to the dead-letter topic. Under ``on_error="fail"`` the error
        is raised with its coordinates, unless the operator's skip list names the record
        (``framework.engine.skips``): then it is dead-lettered with the skip, one warning says
        so, and processing goes on."""
        if not self.fail_on_error:
            self.dead_letter(msg, error, shown)
            return
        error.locate(error.coordinates or self.ctx.coordinates())
        where = error.coordinates
        skip = None if self.skips is None or where is None else self.skips.find(where)
        if skip is None:
            if where is None:
                raise error
            first = coordinates(where.origin or "") or (where.topic, where.partition, where.offset)
            raise error.or_else(f"to go on past this one record, stop the service and run fw group skip "
                                f"{self.pipeline.target or self.pipeline.name} {':'.join(map(str, first))}")
        self.dead_letter(msg, error, shown, skip)

    def dead_letter(self, msg: InputRecord, error: RecordError, shown: tuple[bytes | None, str] | None = None,
                    skip: Skip | None = None) -> None:
        """Send the record to the dead-letter topic: its key, a value people can read (below),
        its timestamp and headers, then the coordinates, origin, step and error as headers:
        after the record's own, so the last header of each ``fw.`` name is the framework's even
        if the record carried one (the last one is what Java's ``Headers.lastHeader`` reads).

        The value (``fw.value.encoding`` says which): a source record's bytes as they were
        produced (``original``); a repartition record's value as the step received it, as JSON
        (``json``) or, when it has no JSON form, as Python's ``repr`` (``repr``): never the
        framework's internal encoding, unless it does not decode (``internal``).

        A copy the producer refuses (larger than it may send, or with a timestamp the topic
        refuses) goes without its key, value, timestamp and headers, saying so in
        ``fw.omitted``; the original stays at its coordinates.

        A step that failed before it had any effect gave the error its input
        (``RecordError.step_input``): it goes in ``fw.step.input``, in the value encoding, when
        it has a form there, so the record can be re-driven to the step (``framework.engine.redrive``).
        ``shown``: the value and encoding to show instead (a re-driven record's, which has none).
        ``skip``: the skip-list entry that named the record (``fw.skipped``, ``fw.skip.reason``),
        said in a warning instead of the error line."""
        if error.coordinates is None:
            error.locate(self.ctx.coordinates())
        fields = {**record_fields(error.coordinates, error.step), "service": self.pipeline.name}
        if skip is None:
            log.error("dead letter: %s", error, extra=fields)
        else:
            log.warning("skipped %s in step %r (the skip list of service %s names %s%s): %s; it goes to the "
                        "dead-letter topic %s and the service goes on", error.coordinates.described()
                        if error.coordinates else "a record", error.step, self.pipeline.name, skip.where,
                        f": {skip.reason}" if skip.reason else "", error.message, self.pipeline.dead_letter.name,
                        extra=fields)
        origin = self.ctx.origin() if self.ctx.current is msg else None
        where = coordinates((origin or b"").decode("utf-8", "replace"))
        own = [
            ("fw.source.topic", msg.topic().encode()),
            ("fw.source.partition", str(msg.partition()).encode()),
            ("fw.source.offset", str(msg.offset()).encode()),
        ]
        if where is not None:
            own += [("fw.origin.topic", where[0].encode()), ("fw.origin.partition", str(where[1]).encode()),
                    ("fw.origin.offset", str(where[2]).encode())]
        value, encoding = self._readable_value(msg, error) if shown is None else shown
        own += [
            ("fw.step", (error.step or "").encode()),
            ("fw.error.type", type(error.__cause__ or error).__name__.encode()),
            ("fw.error.message", str(error)[:4000].encode()),
            (VALUE_ENCODING, encoding.encode()),
        ]
        step_input = None if error.step_input is None else _encoded(self.codec, list(error.step_input))
        if step_input is not None:
            own.append((STEP_INPUT, step_input))
        if skip is not None:
            own += [(SKIPPED, skip.where.encode()), (SKIP_REASON, skip.reason.encode())]
        original = record_headers(msg)
        if original is None:
            own.append(("fw.source.headers", b"not copied: the client cannot read them (a name not in UTF-8)"))
        topic, key, ts = self.pipeline.dead_letter.name, msg.key(), msg.timestamp()[1]
        try:
            self.output.produce(topic, key, value, ts, [*(original or ()), *own])
        except RecordError as exc:  # the producer refused the copy (too large; a timestamp the topic refuses)
            log.error("the dead letter of %s cannot be sent as it is, so it goes without its key, value and "
                      "headers; the record stays at %s until the topic's retention deletes it: %s",
                      error.coordinates, error.coordinates, exc.message, extra={
                          **record_fields(error.coordinates, error.step), "service": self.pipeline.name})
            given = next((len(v) for n, v in own if n == STEP_INPUT), None)
            headers = f"{len(original or ())} headers"
            omitted = (f"key ({len(key or b'')} bytes), value ({len(value or b'')} bytes), timestamp {ts} and "
                       f"{headers}{'' if given is None else f' and {STEP_INPUT} ({given} bytes)'}: {exc.message}")
            kept = [(n, v) for n, v in own if n != STEP_INPUT]  # as large as the value: it goes too
            self.output.produce(topic, None, None, 0, [*kept, ("fw.omitted", omitted.encode())])  # 0: now
        self.dead_letters += 1

    def _readable_value(self, msg: InputRecord, error: RecordError) -> tuple[bytes | None, str]:
        """A dead letter's value and its ``fw.value.encoding`` (see ``dead_letter``)."""
        raw = msg.value()
        decode = self._internal_values.get(msg.topic())
        if decode is None or raw is None:
            return raw, "original"
        if isinstance(error, DeserializationError):
            return raw, "internal"
        try:
            value = decode(raw)
        except Exception:  # noqa: BLE001 - it decoded for the step: only a changed type can fail here
            return raw, "internal"
        try:
            return json.dumps(value, ensure_ascii=False, allow_nan=False, default=_json_form).encode(), "json"
        except (TypeError, ValueError):
            return repr(value).encode("utf-8", "replace"), "repr"

    # -- checkpoint steps ----------------------------------------------------------------

    def produce_changelogs(self, source_positions: Mapping[str, int]) -> int:
        """Checkpoint step 1: the write caches' changes to the changelogs. Returns the count."""
        for fn in self.ctx.checkpoint_listeners:  # async steps: the records in flight into their stores
            fn()
        if self._time_store is not None:
            snapshot = self.time.snapshot()
            if snapshot != self._time_saved:
                self._time_store.put(CLOCK_KEY, snapshot)
                self._time_saved = snapshot
        headers = [("fw.source.offsets", json.dumps(source_positions, sort_keys=True).encode())]
        # An output that sends a store's changes at once (the Kafka producer) does; others record by record.
        send_all = getattr(self.output, "produce_changelogs", None)
        n = 0
        for name, store in self.stores.items():
            if not store.dirty or self.pipeline.table_source(name) is not None:  # its topic is its changelog
                continue
            topic = self.pipeline.changelog_topic(name)
            changes = store.changes()
            if send_all is not None:
                n += send_all(topic, self.partition, changes, headers)
                continue
            for k, v in changes.items():
                self.output.produce_changelog(topic, self.partition, k, v, headers)
                n += 1
        return n

    def commit_state(self, offsets: Mapping[str, int]) -> None:
        """Checkpoint step 4: each store's cache and changelog offset in one WriteBatch
        (``offsets`` by topic: the changelogs' next offsets, and the inputs' committed
        positions, which a table read from its own topic continues from)."""
        for name, store in self.stores.items():
            store.commit(offsets.get(self.pipeline.restore_topic(name)))

    def discard_state(self) -> None:
        """After an abort: drop every uncommitted write. The task's in-memory time (clock,
        timer heaps) is not rolled back: a task that goes on after an abort is rebuilt."""
        for store in self.stores.values():
            store.discard()

    def counters(self) -> dict[str, int]:
        """``dead_letters`` and the operators' counters (``late_records.<step>``)."""
        return {"dead_letters": self.dead_letters, **self.ctx.counters}

    def dump(self) -> dict[str, dict[bytes, Any]]:
        """Every entry of every store of the task (committed, with the uncommitted writes over
        it), as ``store -> key bytes -> value``: what its changelogs would restore."""
        return {name: dict(store.iter_range(b"", None)) for name, store in self.stores.items()}

    def close(self) -> None:
        self.ctx.close()
        for store in self.stores.values():
            store.backend.close()


def _encoded(codec: ValueCodec, value: Any) -> bytes | None:
    """``value`` in the value encoding; None when it has no form there (a type the pipeline did
    not register): such a dead letter cannot be re-driven to its step."""
    try:
        return codec.encode(value)
    except Exception:  # noqa: BLE001 - whatever the encoder refuses, the dead letter goes without it
        return None


def _json_form(value: Any) -> Any:
    """What JSON carries for a value it has no form of: a dataclass as its fields, a date as
    ISO 8601, a set as a list; anything else has none (the dead letter's value is its repr)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    raise TypeError(f"no JSON form for {type(value).__name__}")


def describe_signature(signature: Any) -> str:
    """A step signature in words: ``a window step (TumblingWindows size_ms=60000 ...)``."""
    if not isinstance(signature, dict):
        return f"something else ({signature!r})"
    text = f"a {signature.get('kind', '?')} step"
    windows = signature.get("windows")
    if isinstance(windows, dict):
        params = " ".join(f"{k}={v}" for k, v in windows.items() if k != "type")
        text += f" ({windows.get('type')} {params})"
    if signature.get("layout", 1) != S.STATE_LAYOUT:
        text += f", state layout {signature.get('layout')}"
    return text
