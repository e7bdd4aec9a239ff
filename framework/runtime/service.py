"""One service process: a consumer-group member running its tasks in one hot loop.

The loop consumes a batch and hands it to the task runner (``framework.engine.runner``),
which routes each record to the task that owns its partition, until the next checkpoint is
due. Around the input, each concern of the member (restores, standby copies, global tables,
async steps' results, ticks and observation, stall warnings, the checkpoint; a recovery or a
savepoint hold, which take the whole round) is a participant of its round
(``framework.runtime.round``). Tasks are started on assignment (after their state is restored
from the changelogs, with their inputs paused meanwhile) and checkpointed and stopped on
revocation (``framework.runtime.assignment``); this module wires the parts together.
"""

from __future__ import annotations

import logging
import signal
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, cast

from framework.config import Config, Guarantee, OnError
from framework.engine.calls import CallLoop
from framework.engine.context import InputRecord
from framework.engine.runner import TaskRunner
from framework.errors import (
    AccessProblem,
    FatalKafkaError,
    KafkaClientError,
    SlowRecord,
)
from framework.kafka.acl import denied, missing_grants
from framework.kafka.admin import admin_client, topic_ids, topic_partitions
from framework.kafka.clients import TP, ChangelogReader, GlobalReader, ProducerFailed
from framework.kafka.connect import ClusterProbe, wait_for_cluster
from framework.kafka.groups import stable_assignment, static_member
from framework.observe.observer import Observer
from framework.observe.server import StatusServer
from framework.pipeline.definition import Pipeline
from framework.runtime.assignment import Assignment
from framework.runtime.checkpoint import Checkpointer
from framework.runtime.faults import crash_point
from framework.runtime.hold import HoldRound, Holds
from framework.runtime.membership import StallWatch, refuse_a_taken_instance_id
from framework.runtime.outage import Recovery, RecoveryRound
from framework.runtime.parts import (
    counters,
    explained,
    member_consumer,
    member_output,
    member_skips,
    serve_endpoint,
    warn_about_generated_names,
)
from framework.runtime.queries import LiveQueries
from framework.runtime.restore import Restorer
from framework.runtime.round import (
    Backpressure,
    CallResults,
    Checkpointing,
    Copying,
    GlobalUpdates,
    Participant,
    Restoring,
    Round,
    Takeover,
    Ticking,
)
from framework.runtime.slow import SlowRecords
from framework.runtime.standby import Standby
from framework.runtime.topics import (
    ensure_service_topics,
    internal_topics,
    producer_max_bytes,
    service_grants,
)
from framework.state.directory import ensure_writable
from framework.state.rocksdb import RocksDBBackend

log = logging.getLogger("framework.runtime")
_SETTLE_AT_STOP_S = 5.0  # how long a stopping member waits for its async steps' calls in flight


class Service:
    """Runs ``pipeline`` as member ``instance_id`` of consumer group ``pipeline.name``; a given
    ``instance_id`` is also its static ``group.instance.id`` unless ``static_membership`` is false."""

    def __init__(self, pipeline: Pipeline, config: Config, instance_id: str | None = None, *,
                 static_membership: bool = True) -> None:
        config.validate()
        pipeline.validate()
        self.pipeline = pipeline
        self.config = config
        self.instance_id = instance_id or uuid.uuid4().hex[:8]
        # a given id is stable, so it may be the static group.instance.id; a random one would
        # leave a ghost member holding partitions until its session times out
        self.static_id = instance_id if static_membership else None
        self.exactly_once = config.processing.guarantee is Guarantee.EXACTLY_ONCE
        self.fail_on_error = config.processing.on_error is OnError.FAIL  # then it reads the skip list too
        self.inputs = pipeline.input_topics()
        self.client_id: str | None = None  # what advertises the endpoint to fw status
        self.observer: Observer | None = None
        self.standby: Standby | None = None
        self.global_reader: GlobalReader | None = None
        self.server: StatusServer | None = None
        self.holds = Holds()  # savepoint holds asked over the endpoint (framework.runtime.hold)
        self.globals_read = False  # every global table read to its end at start: queries of them answer
        self.stall: StallWatch | None = None
        self._stop = False

    # -- lifecycle -----------------------------------------------------------------------

    def request_stop(self, *_: Any) -> None:
        self._stop = True

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)

    @property
    def records_processed(self) -> int:
        return self.runner.records

    @property
    def stall_warnings(self) -> int:
        return self.stall.warnings if self.stall is not None else 0

    @property
    def idle_with_lag(self) -> str | None:
        """Why this member, holding no partition, cannot be healthy (``StallWatch``)."""
        return self.stall.idle_with_lag if self.stall is not None else None

    def run(self, until: Callable[[Service], bool] | None = None) -> None:
        """Process until ``request_stop`` (a signal) or ``until(self)`` is true; then take a
        final checkpoint and leave the group."""
        cfg, settings = self.config, self.config.kafka.client_settings()
        ensure_writable(cfg.state.dir, self.pipeline.name)  # before starting, waiting for or joining anything
        client_id = self.client_id = self._start_endpoint()
        try:
            self._run(until, cfg, settings, client_id)
        except Exception as exc:
            error = explained(exc, settings, self.pipeline, skip_list=self.fail_on_error)
            if error is exc:
                raise
            raise error from (exc if isinstance(error, FatalKafkaError) and not isinstance(error, AccessProblem)
                              else None)
        finally:
            if self.server is not None:
                self.server.close()

    def _start_endpoint(self) -> str | None:
        """Serve the status endpoint; the consumer's ``client.id`` that advertises it to ``fw
        status``, or None when observation is off."""
        if not self.config.observe.enabled:
            return None
        self.observer, self.server, client_id = serve_endpoint(self, LiveQueries(self))
        return client_id

    def _run(self, until: Callable[[Service], bool] | None, cfg: Config, settings: dict[str, str],
             client_id: str | None) -> None:
        wait_for_cluster(settings, cfg.kafka.connect_timeout_ms / 1000)
        max_bytes = producer_max_bytes(cfg.kafka.producer)
        self.partitions = ensure_service_topics(self.pipeline, settings, cfg.kafka.create_topics,
                                                max_message_bytes=max_bytes, internal=internal_topics(cfg.kafka))
        missing = missing_grants(settings, service_grants(self.pipeline, skip_list=self.fail_on_error))
        if missing:
            raise denied(settings, self.pipeline.name, missing)
        warn_about_generated_names(self.pipeline)
        self.backend = RocksDBBackend(cfg.state.dir)
        txid = f"{self.pipeline.name}-{self.instance_id}" if self.exactly_once else None
        self.output = member_output(self.pipeline, cfg, settings, txid, self.partitions, max_bytes)
        self.consumer = member_consumer(self.pipeline, cfg, settings, client_id, self.static_id)
        fail = self.fail_on_error
        self.runner = TaskRunner(self.pipeline, self.backend, self.output, partitions=self.partitions,
                                 fail_on_error=fail, skips=member_skips(self.pipeline, settings) if fail else None,
                                 fault=crash_point, calls=CallLoop() if self.pipeline.async_steps() else None)
        # No re-bootstrap when every broker is down (a one-broker cluster restarting): an admin
        # request made after librdkafka retired its broker handles aborts the process in
        # librdkafka 2.16 (rd_kafka_enq_once_del_source_return: eonce->refcnt > 0), as the
        # producer's hang does (KafkaOutput); it reconnects to the brokers it knew instead.
        self.admin = admin = admin_client({**settings, "metadata.recovery.strategy": "none"})
        restore_reader = ChangelogReader(settings, f"{self.pipeline.name}-restore", fetch_wait_ms=20)
        self.restorer = Restorer(self.runner, restore_reader, lambda topics: topic_ids(admin, topics),
                                 lambda p: self.assignment.restored(p), self._committed)
        self.checkpointer = Checkpointer(self.runner, self.output, self.consumer, exactly_once=self.exactly_once,
                                         interval_s=cfg.processing.checkpoint_interval_ms / 1000,
                                         timeout_s=cfg.processing.revoke_timeout_ms / 1000, transactional_id=txid)
        if cfg.processing.standby_replicas:
            self.standby = Standby(self.runner, ChangelogReader(settings, f"{self.pipeline.name}-standby"),
                                   lambda topics: topic_ids(admin, topics), cfg.processing.standby_replicas,
                                   assignment=lambda: stable_assignment(admin, self.pipeline.name),
                                   member_id=self.consumer.member_id, active=lambda: self.assignment.active_tasks(),
                                   committed=self._committed)
        probe = ClusterProbe(settings)
        self.recovery = Recovery(lambda timeout_s: probe.why_not(settings, timeout_s), self._reset,
                                 timeout_s=cfg.processing.broker_outage_timeout_ms / 1000,
                                 where=settings["bootstrap.servers"])
        self.checkpointer.on_broken = self.recovery.begin
        self.checkpointer.holds_instance = self._holds_instance
        self.assignment = Assignment(self.instance_id, self.runner, self.restorer, self.consumer, self.checkpointer,
                                     self.holds, self.standby, recovering=lambda: self.recovery.active,
                                     publish=self._publish, timeout_s=cfg.processing.revoke_timeout_ms / 1000)
        self.slow = SlowRecords(self.pipeline, self.runner, warn_after_s=cfg.processing.slow_record_warning_ms / 1000,
                                transaction_timeout_s=cfg.kafka.transaction_timeout_ms / 1000
                                if self.exactly_once else None,
                                transaction_began=lambda: self.checkpointer.began_at)
        if self.observer is not None:
            self.restorer.on_progress = self.observer.publish
            self.checkpointer.on_checkpoint = self.observer.metrics.checkpoint_duration.observe
        log.info("service %s instance %s starting: %s, inputs %s, config %s", self.pipeline.name,
                 self.instance_id, cfg.processing.guarantee.value, self.inputs, cfg.redacted())
        if self.static_id:
            refuse_a_taken_instance_id(self.admin, self.pipeline.name, self.static_id, self.client_id)
        self.checkpointer.start()
        self.stall = self.assignment.stall = StallWatch(
            cfg.processing.stall_warning_ms / 1000, self.pipeline.name, self.consumer, admin,
            inputs=lambda: [(t, p) for t in self.inputs for p in range(self.partitions)],
            assigned=lambda: self.assignment.assigned, task_state=self.assignment.task_state,
            checkpoints=lambda: (self.checkpointer.completed, self.checkpointer.aborted),
            quiet_until=lambda: self.recovery.ended_at)
        self.round = self._round(cfg, settings)
        self._read_global_tables(cfg)
        a = self.assignment
        self.consumer.subscribe(self.inputs, a.on_assign, a.on_revoke, a.on_lost)
        failed = False
        self.slow.start()
        try:
            self._loop(until)
            if self.observer is not None:
                self.observer.state = "stopping"
            # what is in flight in async steps completes, briefly, rather than being called again at start
            self.runner.settle(_SETTLE_AT_STOP_S)
            if self.checkpointer.broken is not None:
                log.warning("stopping while the last checkpoint interval could not complete (%s): what was "
                            "processed since the last checkpoint is processed again when the member starts",
                            self.checkpointer.broken)
            self.checkpointer.checkpoint("shutdown")
        except BaseException as exc:
            # Nothing of the failed interval may commit: not its outputs, and not the
            # positions past the record that failed (leaving the group would otherwise commit).
            failed = True
            if self.slow.overdue is not None and isinstance(exc, Exception):
                exc = SlowRecord(self.slow.overdue)  # the cause of the client error that follows it
            if self.observer is not None:
                self.observer.state, self.observer.error = "failed", f"{type(exc).__name__}: {exc}"
            self.checkpointer.abandon()
            if isinstance(exc, SlowRecord):
                raise exc from None
            raise
        finally:
            self.slow.stop()
            self._shutdown(quiet=failed)

    def _loop(self, until: Callable[[Service], bool] | None) -> None:
        """The member's round (``framework.runtime.round``): the takeovers (a recovery, a hold)
        first; then the input, processed (records held past a deadline first); then each
        participant; the checkpoint last."""
        consume, runner, ckpt, rnd = self.consumer.consume, self.runner, self.checkpointer, self.round
        batch, timeout = self.config.processing.consume_batch_size, self.config.processing.consume_timeout_ms / 1000
        unrouted, failed, poll = self._unrouted, self._consume_error, self.output.poll
        self._heartbeat(time.monotonic())
        if self.observer is not None:
            self.observer.looping = True
        while not self._stop and (until is None or not until(self)):
            now = time.monotonic()
            if rnd.taken(now):
                continue
            # what a member holds stays within one batch: fewer are consumed while some are held
            held = runner.held_records if runner.held else 0
            msgs = consume(max(batch - held, 1), 0.0 if held else rnd.wait_s(now, timeout))
            now = time.monotonic()
            self._heartbeat(now)
            try:
                if msgs or held:
                    runner.process(cast(Sequence[InputRecord], msgs), unrouted, failed, until=ckpt.next_due)
                    runner.end_batch()  # watermarks leave at the end of each batch, in its transaction
                    ckpt.dirty = True
                    poll()
                rnd.run(now, idle=not (msgs or held))
            except ProducerFailed as exc:  # a record refused by a fenced producer: as a fenced checkpoint
                ckpt.producer_failed(exc)

    def _round(self, cfg: Config, settings: dict[str, str]) -> Round:
        """The member's round: its takeovers and participants, in order."""
        batch, obs = cfg.processing.consume_batch_size, self.observer
        takeovers: list[Takeover] = [
            RecoveryRound(self.recovery, self.checkpointer, self.output, self.consumer, batch,
                          heartbeat=self._heartbeat, publish=self._publish),
            HoldRound(self.holds, self.instance_id, self.checkpointer, self.consumer, batch,
                      assigned=lambda: self.assignment.assigned, restoring=lambda: self.restorer.pending,
                      recovering=lambda: (self.recovery.why or "") if self.recovery.active else None,
                      heartbeat=self._heartbeat),
        ]
        participants: list[Participant] = [Restoring(self.restorer)]
        if self.standby is not None:
            participants.append(Copying(self.standby))
        if self.runner.globals:
            reader = self.global_reader = GlobalReader({**settings, **cfg.kafka.consumer},
                                                       f"{self.pipeline.name}-global")
            participants.append(GlobalUpdates(self.runner, reader, batch))
        if self.runner.calls is not None:
            participants += [CallResults(self.runner),
                             Backpressure(self.runner, self.consumer, lambda: self.holds.held is not None)]
        assert self.stall is not None
        participants += [self.stall, Ticking(self.runner, cfg.processing.watermark_interval_ms / 1000,
                                             obs.observe if obs is not None else None, cfg.observe.interval_ms / 1000),
                         Checkpointing(self.checkpointer)]
        return Round(takeovers, participants, changed=self._changed)

    def _read_global_tables(self, cfg: Config) -> None:
        """Every global table whole, to the ends its partitions have now, before anything is
        processed (from where its store left off); then each round reads what arrives."""
        tables = self.runner.globals
        updates = next((p for p in self.round.participants if isinstance(p, GlobalUpdates)), None)
        if updates is not None:
            updates.read_whole(topic_partitions(self.admin, tables.topics()), cfg.kafka.connect_timeout_ms / 1000)
        self.globals_read = True

    def _changed(self) -> None:
        self.checkpointer.dirty = True

    def _heartbeat(self, now: float) -> None:
        if self.observer is not None:
            self.observer.heartbeat = now

    def _unrouted(self, msg: Any) -> None:
        """Fetched before a pause or revoke took effect: fetch it again later."""
        self.consumer.seek((msg.topic(), msg.partition()), msg.offset())

    def _consume_error(self, msg: Any) -> None:
        self.consumer.check_error(msg.error())

    # -- recovery (framework.runtime.outage) ------------------------------------------------

    def _reset(self) -> None:
        """The member as after a crash, without one: a new producer (its init_transactions
        settles the broken interval), every task restarted and every input rewound
        (``Assignment.restart``)."""
        self.checkpointer.renew()
        self._heartbeat(time.monotonic())  # each part waits on the cluster within its own bound
        self.assignment.restart()
        self.output.connectivity.clear()
        self.consumer.connectivity.clear()
        self.checkpointer.resume()

    def _shutdown(self, quiet: bool = False) -> None:
        """Leave the group and close everything. ``quiet``: the member is failing, and the
        error that ends it is the one reported; what the cleanup raises goes to the debug log."""
        try:
            # leaves the group (static: if configured; not while the cluster is away); revoke runs
            # first (a no-op checkpoint)
            self.consumer.close(leave=not self.recovery.unreachable)
        except Exception as exc:
            if not quiet:
                raise
            log.debug("closing the consumer after the failure: %s", exc)
        finally:
            self.restorer.close()
            if self.standby is not None:
                self.standby.close()
            if self.global_reader is not None:
                self.global_reader.close()
            self.runner.close()
            self.backend.close_all()
            log.info("service %s instance %s stopped after %d records%s", self.pipeline.name,
                     self.instance_id, self.runner.records, counters(self.runner.metrics()))

    # -- what the parts call back -------------------------------------------------------

    def _committed(self, tps: list[TP]) -> dict[TP, int | None]:
        """The group's committed offsets of input partitions ``tps``, in one request: where a
        table read from its own topic is restored to."""
        return self.consumer.committed(tps, self.config.processing.revoke_timeout_ms / 1000)

    def _holds_instance(self) -> bool | None:
        """Whether the group's member with this member's static instance id is this process (its
        consumer's client id); None when it cannot tell (no static id, no endpoint to tell
        processes apart, or the group not described now), and when a record in hand outlived
        its transaction (``SlowRecords.overdue``): the broker's abort of it fences the producer
        too, and that is the member's own doing, which ends it with the record's line."""
        if self.static_id is None or self.client_id is None or self.slow.overdue is not None:
            return None
        try:
            holder = static_member(self.admin, self.pipeline.name, self.static_id)
        except KafkaClientError:
            return None
        return holder is not None and holder[0] == self.client_id

    def _publish(self) -> None:
        if self.observer is not None:
            self.observer.publish()

def run_service(pipeline: Pipeline, config: Config | None = None, instance_id: str | None = None, *,
                static_membership: bool = True) -> None:
    """Run until SIGTERM/SIGINT: the body of ``fw run``."""
    svc = Service(pipeline, config or Config.load(), instance_id, static_membership=static_membership)
    svc.install_signal_handlers()
    svc.run()
