"""Stateless steps and the two steps that write to topics (key_by, to).

Each builder returns the ``push(key, value, timestamp)`` closure for one task. User code
runs inside ``try`` so a failure names its step; the task attaches the record coordinates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from framework.errors import ProcessingError, RecordError, SerializationError
from framework.headers import ORIGIN

if TYPE_CHECKING:
    from framework.operators.context import TaskContext
    from framework.pipeline import steps as S


def user_error(step: str, exc: BaseException, given: tuple[Any, Any, int] | None = None) -> RecordError:
    """The error for user code that raised in ``step``. ``given``: the step's input ``(key,
    value, timestamp)``, passed by steps that had no effect yet when their code raised (nothing
    emitted, no state changed), so that the record can be re-driven to the step as it was
    (``fw dead-letters redrive``)."""
    if isinstance(exc, RecordError):
        return exc
    err = ProcessingError(f"{type(exc).__name__}: {exc}", None, step,
                          fix="fix the step's function or the input (with on_error=dead_letter the "
                              "record goes to the dead-letter topic)")
    err.step_input = given
    return err


def build_map(step: S.Map, ctx: TaskContext, down: S.Push) -> S.Push:
    fn, name = step.fn, step.name

    def push(k: Any, v: Any, ts: int) -> None:
        try:
            out = fn(v)
        except Exception as exc:
            raise user_error(name, exc, (k, v, ts)) from exc
        down(k, out, ts)

    return push


def build_filter(step: S.Filter, ctx: TaskContext, down: S.Push) -> S.Push:
    fn, name = step.fn, step.name

    def push(k: Any, v: Any, ts: int) -> None:
        try:
            keep = fn(v)
        except Exception as exc:
            raise user_error(name, exc, (k, v, ts)) from exc
        if keep:
            down(k, v, ts)

    return push


def build_flat_map(step: S.FlatMap, ctx: TaskContext, down: S.Push) -> S.Push:
    fn, name = step.fn, step.name

    def push(k: Any, v: Any, ts: int) -> None:
        try:
            outs = list(fn(v))
        except Exception as exc:
            raise user_error(name, exc, (k, v, ts)) from exc
        for out in outs:
            down(k, out, ts)

    return push


def build_peek(step: S.Peek, ctx: TaskContext, down: S.Push) -> S.Push:
    fn, name = step.fn, step.name

    def push(k: Any, v: Any, ts: int) -> None:
        try:
            fn(k, v, ts)
        except Exception as exc:
            raise user_error(name, exc, (k, v, ts)) from exc
        down(k, v, ts)

    return push


def build_key_by(step: S.KeyBy, ctx: TaskContext, down: S.Push) -> S.Push:
    """Writes ``(fn(value), value)`` to the step's repartition topic (partitioned by the new key),
    with the input record it was made from in the ``fw.origin`` header."""
    fn, name, origin = step.fn, step.name, ctx.origin
    produce, topic = ctx.output.produce, ctx.pipeline.repartition_topic(step.name)
    ks = step.key_serde.serialize
    vs = ctx.codec.encode if step.value_serde is None else step.value_serde.bind(topic, False).serialize

    def push(k: Any, v: Any, ts: int) -> None:
        try:
            new_key = fn(v)
            kb = ks(new_key)
        except Exception as exc:
            raise user_error(name, exc, (k, v, ts)) from exc
        try:
            vb = vs(v)
        except Exception as exc:
            raise SerializationError(
                f"cannot encode the value for the repartition topic {topic!r}: {type(exc).__name__}: {exc}", None,
                name, fix="re-key built-in values (dict, list, tuple, str, int, float, ...), register the value's "
                          "type with Pipeline(..., types=[...]), or give key_by a value_serde") from exc
        where = origin()
        try:
            produce(topic, kb, vb, ts, None if where is None else [(ORIGIN, where)])
        except RecordError as exc:  # the producer refused it: this record's error
            raise exc.in_step(name)

    return push


def build_sink(step: S.Sink, ctx: TaskContext, down: S.Push) -> S.Push:
    t = step.topic
    ks, vs = t.key_serde.bind(t.name, True).serialize, t.value_serde.bind(t.name, False).serialize
    topic, name = t.name, step.name
    produce, written = ctx.sender(topic)

    def push(k: Any, v: Any, ts: int) -> None:
        try:
            kb = None if k is None else ks(k)
            vb = None if v is None else vs(v)
        except Exception as exc:
            raise SerializationError(f"cannot encode the output for {topic!r}: {type(exc).__name__}: {exc}",
                                     None, name, fix=f"make the step's output match {topic!r}'s serdes") from exc
        try:
            produce(written, kb, vb, ts)
        except RecordError as exc:  # the producer refused it: this record's error
            raise exc.in_step(name)

    return push
