"""A task: one partition number of a service, compiled once into per-topic handlers.

The three drivers (Kafka runtime, TestDriver, Spark replay) all create ``Task`` objects and
call ``handle(record)`` per consumed record; the task decodes, runs the compiled closures of
the pipeline, and routes a failing record to the dead-letter topic. Checkpoint support is
split in the steps of the checkpoint procedure: ``produce_changelogs`` (step 1),
``commit_state`` (step 4) and ``discard_state`` (abort).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from framework.engine.context import InputRecord, Output, TaskContext
from framework.errors import DeserializationError, PipelineError, RecordError
from framework.pipeline import steps as S
from framework.pipeline.definition import Pipeline
from framework.state.base import StoreBackend
from framework.state.cache import CachedPartition

log = logging.getLogger("framework.task")
Handler = Callable[[InputRecord], None]


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

    def __init__(self, pipeline: Pipeline, partition: int, backend: StoreBackend, output: Output) -> None:
        self.pipeline = pipeline
        self.partition = partition
        self.output = output
        self.stores = {
            s.name: CachedPartition(backend.open(pipeline.name, s.name, partition))
            for s in pipeline.stateful_steps()
        }
        self.ctx = TaskContext(pipeline, partition, output, self.stores)
        self.handlers: dict[str, Handler] = self._compile()
        self.dead_letters = 0

    # -- compilation ---------------------------------------------------------------------

    def _compile(self) -> dict[str, Handler]:
        from framework.serde import PickleSerde

        p = self.pipeline
        pushes: dict[str, S.Push] = {}
        handlers: dict[str, Handler] = {}
        for step in reversed(list(p.steps.values())):  # steps are stored in topological order
            down = _fanout([pushes[c] for c in p.children[step.name]])
            if isinstance(step, S.Source):
                t = step.topic
                if t.name in handlers:
                    raise PipelineError(f"topic {t.name!r} is a source twice; use one source and fan out")
                handlers[t.name] = self._decoder(step.name, t.key_serde.bind(t.name, True),
                                                 t.value_serde.bind(t.name, False), down)
            elif isinstance(step, S.KeyBy):
                topic = p.repartition_topic(step.name)
                handlers[topic] = self._decoder(step.name, step.key_serde, PickleSerde(), down)
                pushes[step.name] = step.build(self.ctx, down)
            else:
                pushes[step.name] = step.build(self.ctx, down)
        return handlers

    def _decoder(self, step: str, key_serde: Any, value_serde: Any, down: S.Push) -> Handler:
        kd, vd, ctx = key_serde.deserialize, value_serde.deserialize, self.ctx

        def handle(msg: InputRecord) -> None:
            ctx.current = msg
            kb, vb = msg.key(), msg.value()
            try:
                k = None if kb is None else kd(kb)
                v = None if vb is None else vd(vb)
            except Exception as exc:  # noqa: BLE001 - any decoder failure is this record's fault
                raise DeserializationError(
                    f"cannot decode the record: {type(exc).__name__}: {exc}", ctx.coordinates(), step,
                    fix="check the producer's serializer against the source topic's serdes (with "
                        "on_error=dead_letter the record goes to the dead-letter topic)",
                ) from exc
            down(k, v, msg.timestamp()[1])

        return handle

    # -- records -------------------------------------------------------------------------

    def handle(self, msg: InputRecord) -> None:
        """Process one record; a record error goes to the dead-letter topic (policy: dead_letter)."""
        self.handlers[msg.topic()](msg)

    def dead_letter(self, msg: InputRecord, error: RecordError) -> None:
        """Send the original bytes with their coordinates and the error to the dead-letter topic."""
        if error.coordinates is None:
            error.locate(self.ctx.coordinates())
        log.error("dead letter: %s", error)
        headers = [
            ("fw.source.topic", msg.topic().encode()),
            ("fw.source.partition", str(msg.partition()).encode()),
            ("fw.source.offset", str(msg.offset()).encode()),
            ("fw.step", (error.step or "").encode()),
            ("fw.error.type", type(error.__cause__ or error).__name__.encode()),
            ("fw.error.message", str(error)[:4000].encode()),
        ]
        headers += list(msg.headers() or ())
        self.output.produce(self.pipeline.dead_letter.name, msg.key(), msg.value(), msg.timestamp()[1],
                            headers)
        self.dead_letters += 1

    # -- checkpoint steps ----------------------------------------------------------------

    def produce_changelogs(self, source_positions: Mapping[str, int]) -> int:
        """Checkpoint step 1: the write caches' changes to the changelogs. Returns the count."""
        headers = [("fw.source.offsets", json.dumps(source_positions, sort_keys=True).encode())]
        n = 0
        for name, store in self.stores.items():
            if not store.dirty:
                continue
            topic = self.pipeline.changelog_topic(name)
            for k, v in store.changes().items():
                self.output.produce_changelog(topic, self.partition, k, v, headers)
                n += 1
        return n

    def commit_state(self, changelog_offsets: Mapping[str, int]) -> None:
        """Checkpoint step 4: each store's cache and changelog offset in one WriteBatch."""
        for name, store in self.stores.items():
            store.commit(changelog_offsets.get(self.pipeline.changelog_topic(name)))

    def discard_state(self) -> None:
        """After an abort: drop every uncommitted write."""
        for store in self.stores.values():
            store.discard()

    def close(self) -> None:
        for store in self.stores.values():
            store.backend.close()
