"""One service process: a consumer-group member running its tasks in one hot loop.

The loop consumes a batch, hands each record to the task that owns its partition, and
between batches advances restores and takes checkpoints when they are due. Tasks are
created on assignment (after their state is restored from the changelogs, with their
inputs paused meanwhile) and checkpointed and closed on revocation.
"""

from __future__ import annotations

import logging
import signal
import time
import uuid
from collections.abc import Callable
from typing import Any

from framework.config import Config, Guarantee, OnError
from framework.engine.task import Task
from framework.errors import FatalKafkaError, RecordError
from framework.kafka.clients import TP, ChangelogReader, GroupConsumer, KafkaOutput
from framework.pipeline.definition import Pipeline
from framework.runtime.checkpoint import Checkpointer
from framework.runtime.restore import Restorer
from framework.runtime.topics import ensure_service_topics
from framework.state.rocksdb import RocksDBBackend

log = logging.getLogger("framework.runtime")
_STALL_DETAIL = 8  # partitions described (one broker request each) in a stall warning


class Service:
    """Runs ``pipeline`` as member ``instance_id`` of consumer group ``pipeline.name``."""

    def __init__(self, pipeline: Pipeline, config: Config, instance_id: str | None = None) -> None:
        config.validate()
        self.pipeline = pipeline
        self.config = config
        self.instance_id = instance_id or uuid.uuid4().hex[:8]
        self.exactly_once = config.processing.guarantee is Guarantee.EXACTLY_ONCE
        self.inputs = pipeline.input_topics()
        self.tasks: dict[int, Task] = {}
        self.routes: dict[TP, tuple[Callable[[Any], None], Task]] = {}
        self.assigned: set[TP] = set()
        self._stop = False
        self.records_processed = 0

    # -- lifecycle -----------------------------------------------------------------------

    def request_stop(self, *_: Any) -> None:
        self._stop = True

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)

    def run(self, until: Callable[[Service], bool] | None = None) -> None:
        """Process until ``request_stop`` (a signal) or ``until(self)`` is true; then take a
        final checkpoint and leave the group."""
        cfg, settings = self.config, self.config.kafka.client_settings()
        self.partitions = ensure_service_topics(self.pipeline, settings)
        self.backend = RocksDBBackend(cfg.state.dir)
        txid = f"{self.pipeline.name}-{self.instance_id}" if self.exactly_once else None
        self.output = KafkaOutput({**settings, **cfg.kafka.producer,
                                   "transaction.timeout.ms": cfg.kafka.transaction_timeout_ms}, txid)
        self.consumer = GroupConsumer({**settings, **cfg.kafka.consumer}, self.pipeline.name)
        self.restorer = Restorer(self.pipeline, ChangelogReader(settings, f"{self.pipeline.name}-restore"),
                                 self.backend, self._restored)
        self.checkpointer = Checkpointer(self, cfg.processing.checkpoint_interval_ms / 1000,
                                         cfg.processing.revoke_timeout_ms / 1000)
        log.info("service %s instance %s starting: %s, inputs %s, config %s", self.pipeline.name,
                 self.instance_id, cfg.processing.guarantee.value, self.inputs, cfg.redacted())
        self.checkpointer.start()
        self.consumer.subscribe(self.inputs, self._on_assign, self._on_revoke, self._on_lost)
        try:
            self._loop(until)
            self.checkpointer.checkpoint("shutdown")
        except BaseException:
            # Nothing of the failed interval may commit: not its outputs, and not the
            # positions past the record that failed (leaving the group would otherwise commit).
            self.checkpointer.abandon()
            raise
        finally:
            self._shutdown()

    def _loop(self, until: Callable[[Service], bool] | None) -> None:
        consume = self.consumer.consume
        batch, timeout = self.config.processing.consume_batch_size, self.config.processing.consume_timeout_ms / 1000
        ckpt, tick_s = self.checkpointer, self.config.processing.watermark_interval_ms / 1000
        stall_s = self.config.processing.stall_warning_ms / 1000
        next_tick = 0.0
        stall_check = time.monotonic() + stall_s
        while not self._stop and (until is None or not until(self)):
            if self.restorer.busy:
                self.restorer.step()
            msgs = consume(batch, timeout)
            now = time.monotonic()
            if msgs:
                stall_check = now + stall_s
                self._process(msgs)
                for task in self.tasks.values():
                    task.flush_watermarks()  # watermarks leave at the end of each batch, in its transaction
            elif now >= stall_check:
                stall_check = now + stall_s
                self._warn_if_stalled(stall_s)
            if now >= next_tick:  # idleness, processing-time timers, periodic watermarks
                next_tick = now + tick_s
                for task in self.tasks.values():
                    if task.tick():
                        ckpt.dirty = True
            ckpt.maybe_checkpoint()

    def _warn_if_stalled(self, stall_s: float) -> None:
        """Nothing consumed for ``stall_s``: if records are waiting, say where everything stands."""
        waiting = self.consumer.backlog()
        if not waiting:
            return
        parts = []
        for tp, (pos, end) in sorted(waiting.items())[:_STALL_DETAIL]:
            stable = self.consumer.stable_end(tp)
            task = ("running" if tp in self.routes else "restoring" if tp[1] in self.restorer.pending
                    else "no task")
            held = (f", held at offset {stable} by a transaction still open upstream"
                    if stable is not None and stable <= pos else "")
            parts.append(f"{tp[0]}[{tp[1]}] at offset {pos} of {end} ("
                         f"{'paused' if tp in self.consumer.paused else 'fetching'}, {task}{held})")
        if len(waiting) > _STALL_DETAIL:
            parts.append(f"and {len(waiting) - _STALL_DETAIL} more partitions")
        ckpt = self.checkpointer
        log.warning("no input record for %.0f s although records are waiting: %s; checkpoints: "
                    "%d completed, %d aborted. A transaction open upstream holds read_committed "
                    "consumers until it commits or aborts (transaction.timeout.ms of its producer); "
                    "otherwise see the client log for broker errors", stall_s, "; ".join(parts),
                    ckpt.completed, ckpt.aborted)

    def _process(self, msgs: list[Any]) -> None:
        """The hot loop: route each record to its task's compiled handler."""
        routes, fail = self.routes, self.config.processing.on_error is OnError.FAIL
        n = 0
        for msg in msgs:
            if msg.error() is not None:
                self._consume_error(msg)
                continue
            route = routes.get((msg.topic(), msg.partition()))
            if route is None:  # fetched before a pause/revoke took effect: fetch it again later
                self.consumer.seek((msg.topic(), msg.partition()), msg.offset())
                continue
            handler, task = route
            try:
                if handler(msg):
                    continue  # a watermark control record, not a record
            except RecordError as err:
                if fail:
                    raise
                task.dead_letter(msg, err)
            n += 1
        self.records_processed += n
        self.checkpointer.dirty = True
        self.output.poll()

    def _consume_error(self, msg: Any) -> None:
        err = msg.error()
        if err.fatal():
            raise FatalKafkaError(f"consumer: {err}")
        log.warning("consumer: %s", err)

    def _shutdown(self) -> None:
        try:
            self.consumer.close()  # leaves the group; revoke runs first (a no-op checkpoint)
        finally:
            self.restorer.close()
            for task in self.tasks.values():
                task.close()
            self.backend.close_all()
            log.info("service %s instance %s stopped after %d records%s", self.pipeline.name,
                     self.instance_id, self.records_processed, _counters(self.tasks.values()))

    # -- assignment ----------------------------------------------------------------------

    def _on_assign(self, tps: list[TP]) -> None:
        self.assigned |= set(tps)
        numbers = sorted({p for _, p in tps} - set(self.tasks))
        log.info("assigned partitions %s", numbers)
        if not numbers:
            return
        self.consumer.pause([tp for tp in tps if tp[1] in numbers])
        self.restorer.start(numbers)

    def _new_task(self, partition: int) -> Task:
        return Task(self.pipeline, partition, self.backend, self.output, partitions=self.partitions,
                    fail_on_error=self.config.processing.on_error is OnError.FAIL)

    def rebuild_tasks(self) -> None:
        """After an abort: every task again as of the last checkpoint (state, clock, timers)."""
        for partition in list(self.tasks):
            task = self.tasks[partition] = self._new_task(partition)
            for tp in self.routes:
                if tp[1] == partition:
                    self.routes[tp] = (task.handlers[tp[0]], task)

    def _restored(self, partition: int) -> None:
        """Called by the restorer when every store of ``partition`` is at the changelog end."""
        task = self._new_task(partition)
        self.tasks[partition] = task
        mine = [tp for tp in self.assigned if tp[1] == partition]
        for tp in mine:
            self.routes[tp] = (task.handlers[tp[0]], task)
        self.consumer.resume(mine)
        log.info("partition %d restored and running", partition)

    def _on_revoke(self, tps: list[TP]) -> None:
        """Commit what was processed, then close the revoked partitions' tasks."""
        log.info("revoking %s", sorted({p for _, p in tps}))
        self.checkpointer.checkpoint("revoke")
        self._drop(tps)

    def _on_lost(self, tps: list[TP]) -> None:
        """The group moved on without us (session timeout): nothing of ours may commit."""
        log.warning("partitions lost %s: aborting the open transaction", sorted({p for _, p in tps}))
        self._drop(tps)
        self.checkpointer.abort("partitions lost")

    def _drop(self, tps: list[TP]) -> None:
        self.assigned -= set(tps)
        for tp in tps:
            self.routes.pop(tp, None)
        kept = {p for _, p in self.assigned}
        for p in {p for _, p in tps} - kept:
            self.restorer.cancel(p)
            task = self.tasks.pop(p, None)
            if task is not None:
                task.close()


def _counters(tasks: Any) -> str:
    """``; late_records.<step>=n, ...`` summed over ``tasks`` (empty when nothing was counted)."""
    total: dict[str, int] = {}
    for task in tasks:
        for name, n in task.ctx.counters.items():
            total[name] = total.get(name, 0) + n
    return "".join(f"; {name}={n}" for name, n in sorted(total.items()))


def run_service(pipeline: Pipeline, config: Config | None = None, instance_id: str | None = None) -> None:
    """Run until SIGTERM/SIGINT: the body of ``fw run``."""
    svc = Service(pipeline, config or Config.load(), instance_id)
    svc.install_signal_handlers()
    svc.run()
