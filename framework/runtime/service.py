"""One service process: a consumer-group member running its tasks in one hot loop.

The loop consumes a batch and hands it to the task runner (``framework.engine.runner``),
which routes each record to the task that owns its partition; between batches the loop
advances restores and takes checkpoints when they are due. Tasks are started on assignment
(after their state is restored from the changelogs, with their inputs paused meanwhile) and
checkpointed and stopped on revocation.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
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
    FencedError,
    KafkaClientError,
    OutageTooLong,
    SlowRecord,
)
from framework.kafka.acl import Grant, denied, missing_grants
from framework.kafka.admin import admin_client, topic_ids, topic_partitions
from framework.kafka.clients import TP, ChangelogReader, GlobalReader, GroupConsumer, KafkaOutput
from framework.kafka.connect import ClusterProbe, client_failure, wait_for_cluster
from framework.kafka.groups import stable_assignment
from framework.observe.metrics import multiprocess_dir
from framework.observe.observer import Observer
from framework.observe.server import StatusServer
from framework.pipeline import steps as S
from framework.pipeline.definition import Pipeline
from framework.runtime.checkpoint import Checkpointer
from framework.runtime.faults import crash_point
from framework.runtime.hold import Held, Holds, Request
from framework.runtime.membership import refuse_a_taken_instance_id, unheld_backlog
from framework.runtime.outage import Recovery
from framework.runtime.queries import LiveQueries
from framework.runtime.restore import Restorer
from framework.runtime.slow import SlowRecords
from framework.runtime.standby import Standby
from framework.runtime.topics import (
    ensure_service_topics,
    output_limits,
    producer_max_bytes,
    service_grants,
    topics_missing,
)
from framework.state.directory import ensure_writable
from framework.state.rocksdb import RocksDBBackend

log = logging.getLogger("framework.runtime")
_STALL_DETAIL = 8  # partitions described (one broker request each) in a stall warning
_STANDBY_BATCH = 5_000  # changelog records a standby applies per round of the loop, at most
_STANDBY_WAIT_S = 0.01  # how long a round waits for them when the input is idle: what it adds to latency
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
        self.inputs = pipeline.input_topics()
        self.assigned: set[TP] = set()
        self.has_assignment = False  # the group gave this member its first assignment
        self.rebalances = {"assigned": 0, "revoked": 0, "lost": 0}
        self.stall_warnings = 0
        self.idle_with_lag: str | None = None  # why this member, holding nothing, cannot be healthy
        self._next_publish = 0.0  # while recovering: when /status is published next
        self.client_id: str | None = None  # what advertises the endpoint to fw status
        self.observer: Observer | None = None
        self.standby: Standby | None = None
        self.global_reader: GlobalReader | None = None
        self.server: StatusServer | None = None
        self.holds = Holds()  # savepoint holds asked over the endpoint (framework.runtime.hold)
        self.globals_read = False  # every global table read to its end at start: queries of them answer
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

    def run(self, until: Callable[[Service], bool] | None = None) -> None:
        """Process until ``request_stop`` (a signal) or ``until(self)`` is true; then take a
        final checkpoint and leave the group."""
        cfg, settings = self.config, self.config.kafka.client_settings()
        ensure_writable(cfg.state.dir, self.pipeline.name)  # before starting, waiting for or joining anything
        client_id = self.client_id = self._start_endpoint()
        try:
            self._run(until, cfg, settings, client_id)
        except Exception as exc:
            said = client_failure(exc)
            if isinstance(exc, (AccessProblem, FencedError, OutageTooLong, SlowRecord)) or not (
                    said or isinstance(exc, KafkaClientError)):
                raise  # the cause is known: no question to the cluster (it may be away) first
            # A denied operation surfaces wherever the client noticed it (a transaction in an
            # error state, a produce refused): ask the cluster what this principal lacks.
            missing = _missing_grants(settings, self.pipeline)
            if missing:
                raise denied(settings, self.pipeline.name, missing) from None
            if said:
                raise FatalKafkaError(said) from exc
            raise
        finally:
            if self.server is not None:
                self.server.close()

    def _start_endpoint(self) -> str | None:
        """Serve the status endpoint (docs/observability.md); the consumer's ``client.id``
        that advertises it to ``fw status``, or None when observation is off."""
        obs = self.config.observe
        if not obs.enabled:
            return None
        cfg = self.config
        # a record may hold the loop as long as its transaction lives (at-least-once: as long as
        # the group waits for the member's next poll)
        busy_limit_ms = (cfg.kafka.transaction_timeout_ms if self.exactly_once else cfg.max_poll_interval_ms())
        self.observer = Observer(self, obs.interval_ms / 1000, obs.health_timeout_ms / 1000, busy_limit_ms / 1000)
        self.server = StatusServer(self.observer, obs.host, obs.port, LiveQueries(self), self.holds).start()
        host = obs.advertised_host or ("" if obs.host in ("0.0.0.0", "::") else obs.host)
        self.observer.endpoint = f"http://{host or socket.gethostname()}:{self.server.port}"
        log.info("status endpoint %s (/ status page, /metrics, /health, /ready, /status, /stores)", self.server.url)
        shared = multiprocess_dir()
        if shared:  # a --processes child: tell the supervisor where its endpoint is
            path = os.path.join(shared, f"member-{self.instance_id}.json")
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                json.dump({"pid": os.getpid(), "port": self.server.port, "instance": self.instance_id}, f)
            os.replace(path + ".tmp", path)
        return f"{self.pipeline.name}-{self.instance_id}@{host}:{self.server.port}"

    def _run(self, until: Callable[[Service], bool] | None, cfg: Config, settings: dict[str, str],
             client_id: str | None) -> None:
        wait_for_cluster(settings, cfg.kafka.connect_timeout_ms / 1000)
        max_bytes = producer_max_bytes(cfg.kafka.producer)
        self.partitions = ensure_service_topics(self.pipeline, settings, cfg.kafka.create_topics,
                                                max_message_bytes=max_bytes)
        missing = missing_grants(settings, service_grants(self.pipeline))
        if missing:
            raise denied(settings, self.pipeline.name, missing)
        _warn_about_generated_names(self.pipeline)
        self.backend = RocksDBBackend(cfg.state.dir)
        txid = f"{self.pipeline.name}-{self.instance_id}" if self.exactly_once else None
        self.output = KafkaOutput({**settings, **cfg.kafka.producer,
                                   "transaction.timeout.ms": cfg.kafka.transaction_timeout_ms}, txid)
        self.output.limit_timestamps({topic: (limits.before_ms, limits.after_ms) for topic, limits
                                      in output_limits(self.pipeline, settings, max_bytes).items()})
        self.output.on_missing = lambda names: topics_missing(self.pipeline, names, self.partitions,
                                                              settings["bootstrap.servers"], running=True)
        self.consumer = GroupConsumer({**settings, "max.poll.interval.ms": cfg.max_poll_interval_ms(),
                                       **cfg.kafka.consumer}, self.pipeline.name, client_id=client_id,
                                      instance_id=self.static_id,
                                      leave_on_close=cfg.processing.leave_group_on_shutdown,
                                      stats_interval_ms=cfg.observe.interval_ms if client_id else 0)
        self.runner = TaskRunner(self.pipeline, self.backend, self.output, partitions=self.partitions,
                                 fail_on_error=cfg.processing.on_error is OnError.FAIL, fault=crash_point,
                                 calls=CallLoop() if self.pipeline.async_steps() else None)
        # No re-bootstrap when every broker is down (a one-broker cluster restarting): an admin
        # request made after librdkafka retired its broker handles aborts the process in
        # librdkafka 2.16 (rd_kafka_enq_once_del_source_return: eonce->refcnt > 0), as the
        # producer's hang does (KafkaOutput); it reconnects to the brokers it knew instead.
        self.admin = admin = admin_client({**settings, "metadata.recovery.strategy": "none"})
        restore_reader = ChangelogReader(settings, f"{self.pipeline.name}-restore", fetch_wait_ms=20)
        self.restorer = Restorer(self.runner, restore_reader, lambda topics: topic_ids(admin, topics), self._restored,
                                 self._committed)
        self.checkpointer = Checkpointer(self.runner, self.output, self.consumer, exactly_once=self.exactly_once,
                                         interval_s=cfg.processing.checkpoint_interval_ms / 1000,
                                         timeout_s=cfg.processing.revoke_timeout_ms / 1000, transactional_id=txid)
        if cfg.processing.standby_replicas:
            self.standby = Standby(self.runner, ChangelogReader(settings, f"{self.pipeline.name}-standby"),
                                   lambda topics: topic_ids(admin, topics), cfg.processing.standby_replicas,
                                   assignment=lambda: stable_assignment(admin, self.pipeline.name),
                                   member_id=self.consumer.member_id, active=self._active_tasks,
                                   committed=self._committed)
        probe = ClusterProbe(settings)
        self.recovery = Recovery(lambda timeout_s: probe.why_not(settings, timeout_s), self._reset,
                                 timeout_s=cfg.processing.broker_outage_timeout_ms / 1000,
                                 where=settings["bootstrap.servers"])
        self.checkpointer.on_broken = self.recovery.begin
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
        self._read_global_tables(settings, cfg)
        self.consumer.subscribe(self.inputs, self._on_assign, self._on_revoke, self._on_lost)
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

    def _read_global_tables(self, settings: dict[str, str], cfg: Config) -> None:
        """Every global table whole, to the ends its partitions have now, before anything is
        processed (from where its store left off); then ``_loop`` reads what arrives."""
        tables = self.runner.globals
        if not tables:
            self.globals_read = True
            return
        counts = topic_partitions(self.admin, tables.topics())
        self.global_reader = reader = GlobalReader({**settings, **cfg.kafka.consumer}, f"{self.pipeline.name}-global")
        starts: dict[TP, int | None] = {}
        for table in tables.tables.values():
            topic = table.step.topic.name
            table.set_partitions(counts[topic])
            starts.update({(topic, p): table.positions.get(p) for p in range(counts[topic])})
        reader.assign(starts)
        began = time.monotonic()

        def apply(batch: list[Any]) -> None:
            self.runner.apply_global(batch)
            tables.commit()  # batch by batch: a large table is not held in the write cache whole

        n = reader.catch_up(list(starts), apply, cfg.kafka.connect_timeout_ms / 1000)
        log.info("global tables %s: read %d records in %.1f s before processing", ", ".join(tables.tables), n,
                 time.monotonic() - began)
        self.globals_read = True

    def _loop(self, until: Callable[[Service], bool] | None) -> None:
        consume, runner = self.consumer.consume, self.runner
        batch, timeout = self.config.processing.consume_batch_size, self.config.processing.consume_timeout_ms / 1000
        ckpt, tick_s = self.checkpointer, self.config.processing.watermark_interval_ms / 1000
        stall_s = self.config.processing.stall_warning_ms / 1000
        unrouted, failed, poll = self._unrouted, self._consume_error, self.output.poll
        next_tick = 0.0
        stall_check = time.monotonic() + stall_s
        obs = self.observer
        observe_s = self.config.observe.interval_ms / 1000
        next_observe = time.monotonic() + observe_s if obs is not None else float("inf")
        if obs is not None:
            obs.heartbeat, obs.looping = time.monotonic(), True
        standby, global_reader, holds, calls = self.standby, self.global_reader, self.holds, runner.calls
        while not self._stop and (until is None or not until(self)):
            if self._recovering():  # a broken checkpoint or an unreachable cluster: nothing else runs
                continue
            if holds.busy and self._held_round(batch):  # held at a checkpoint for a savepoint
                continue
            restoring = self.restorer.busy
            if restoring:
                self.restorer.step()
            copying = standby is not None and standby.behind
            # while a restore runs or a standby copy is behind, the input is not waited for:
            # their own reads wait (a copy's briefly), so neither is held to a batch per wait.
            # Nor past the next checkpoint: a batch that does not fill (a low rate) would hold
            # what it has until the wait ends, and the checkpoint after it
            # Records held past a checkpoint's deadline are processed first, and fewer are consumed
            # meanwhile: what a member holds stays within one batch
            held = runner.held_records if runner.held else 0
            wait = 0.0 if restoring or copying or held else min(timeout, max(ckpt.next_due - time.monotonic(), 0.0))
            msgs = consume(max(batch - held, 1), wait)
            now = time.monotonic()
            if standby is not None:
                standby.maybe_refresh(now)
                if standby.busy:
                    standby.step(_STANDBY_BATCH, _STANDBY_WAIT_S if copying and not msgs else 0)
            if obs is not None:
                obs.heartbeat = now
            if global_reader is not None:
                updates = global_reader.poll(batch)
                if updates:
                    runner.apply_global(updates)  # may release joins waiting for the tables
                    ckpt.dirty = True
            if msgs or held:
                stall_check = now + stall_s
                runner.process(cast(Sequence[InputRecord], msgs), unrouted, failed, until=ckpt.next_due)
                runner.end_batch()  # watermarks leave at the end of each batch, in its transaction
                ckpt.dirty = True
                poll()
            if calls is not None and runner.complete():  # async steps' results go out in this interval
                runner.end_batch()
                ckpt.dirty = True
            elif now >= stall_check:
                stall_check = now + stall_s
                self._warn_if_stalled(stall_s)
            if now >= next_tick:  # idleness, processing-time timers, periodic watermarks
                next_tick = now + tick_s
                if runner.tick():
                    ckpt.dirty = True
                if now >= next_observe:
                    next_observe = now + observe_s
                    obs.observe()  # type: ignore[union-attr]
            ckpt.maybe_checkpoint()

    # -- savepoint holds (framework.runtime.hold) -------------------------------------------

    def _held_round(self, batch: int) -> bool:
        """Act on the hold and release requests; True while held: the round only polls (the
        membership, rebalances) and puts back what was fetched before the pause took effect."""
        holds = self.holds
        while (request := holds.next_request()) is not None:
            request.answer = self._hold(request) if request.action == "hold" else self._release(request.token)
            request.done.set()
        now = time.monotonic()
        if holds.held is not None and holds.expired(now):
            log.warning("savepoint hold %s ended by itself after %.0f s without a release: processing again",
                        holds.held.token, holds.held.seconds)
            holds.end(holds.held.token, f"the hold ended by itself after {holds.held.seconds:.0f} s, before the "
                                        "release: the member processed again")
            self._resume_held()
        if holds.held is None:
            return False
        for msg in self.consumer.consume(batch, 0.1):
            if msg.error() is None:
                self._unrouted(msg)
            else:
                self._consume_error(msg)
        if self.observer is not None:
            self.observer.heartbeat = time.monotonic()
        self.checkpointer.maybe_checkpoint()  # nothing to commit: it only says all is committed (checkpoint age)
        return True

    def _hold(self, request: Request) -> tuple[int, dict[str, Any]]:
        """A checkpoint, then every input partition paused until the release."""
        held = self.holds.held
        if held is not None:
            if held.token == request.token:
                return 200, self._hold_answer()
            return 409, {"error": f"member {self.instance_id} is held for another savepoint ({held.token}); "
                                  "ask again when it is done"}
        if self.recovery.active:
            return 503, {"error": f"member {self.instance_id} is recovering ({self.recovery.why or 'an outage'}); "
                                  "ask again"}
        ckpt = self.checkpointer
        was_dirty, completed = ckpt.dirty, ckpt.completed
        ckpt.checkpoint("savepoint")
        if ckpt.broken is not None or (was_dirty and ckpt.completed == completed):
            return 503, {"error": f"member {self.instance_id} could not complete the checkpoint before the hold "
                                  f"({ckpt.broken or 'aborted'}); ask again"}
        self.consumer.pause(self.assigned)
        self.holds.held = Held(request.token, request.seconds, Holds.deadline(request.seconds))
        log.info("held for savepoint %s after checkpoint %d: partitions %s paused for at most %.0f s",
                 request.token, ckpt.completed, sorted({p for _, p in self.assigned}), request.seconds)
        return 200, self._hold_answer()

    def _hold_answer(self) -> dict[str, Any]:
        return {"instance": self.instance_id, "partitions": sorted([t, p] for t, p in self.assigned),
                "checkpoints": self.checkpointer.completed}

    def _release(self, token: str) -> tuple[int, dict[str, Any]]:
        """The end of the hold; says whether a rebalance disturbed it (or it had ended)."""
        held = self.holds.held
        if held is None or held.token != token:
            if token not in self.holds.ended:
                return 409, {"error": f"member {self.instance_id} is not held for savepoint {token}"}
            return 200, {"instance": self.instance_id, "disturbed": self.holds.ended[token]}
        self.holds.end(token, held.disturbed)
        self._resume_held()
        log.info("savepoint hold %s released", token)
        return 200, {"instance": self.instance_id, "disturbed": held.disturbed}

    def _resume_held(self) -> None:
        self.consumer.resume([tp for tp in self.assigned if tp[1] not in self.restorer.pending])

    def _unrouted(self, msg: Any) -> None:
        """Fetched before a pause or revoke took effect: fetch it again later."""
        self.consumer.seek((msg.topic(), msg.partition()), msg.offset())

    def _consume_error(self, msg: Any) -> None:
        self.consumer.check_error(msg.error())

    # -- recovery (framework.runtime.outage) ------------------------------------------------

    def _recovering(self) -> bool:
        """True while the member recovers from a broken checkpoint or waits for its cluster:
        the round is the recovery's. The consumer is still polled (it keeps the membership
        and serves rebalances); what it returns is dropped, as the recovery's reset rewinds
        every input to its committed offset."""
        rec, obs = self.recovery, self.observer
        if not rec.active:
            down = self.output.connectivity.down_since or self.consumer.connectivity.down_since
            if down is None:
                return False
            if not rec.suspect(down):  # the clients lost their connections, but the cluster answers
                self.output.connectivity.clear()
                self.consumer.connectivity.clear()
                return False
            self.checkpointer.break_interval("the cluster cannot be reached")
        now = time.monotonic()
        if obs is not None:
            obs.heartbeat = now
            if now >= self._next_publish:  # /ready and /status say that the member recovers
                self._next_publish = now + 1.0
                self._publish()
        self.consumer.consume(self.config.processing.consume_batch_size, 0.1)
        if rec.step():
            self._publish()
        return True

    def _reset(self) -> None:
        """The member as after a crash, without one: a new producer (its init_transactions
        settles the broken interval), every task restarted from its stores and restored from
        its changelogs' committed tails, every input rewound to its committed offset."""
        self.checkpointer.renew()
        parts = sorted({p for _, p in self.assigned})
        for p in parts:
            self.restorer.cancel(p)
            self.runner.stop(p)
        self.restorer.start(parts)
        self.consumer.pause(tp for tp in self.assigned if tp[1] in self.restorer.pending)
        self.consumer.rewind_to_committed(self.assigned, self.config.processing.revoke_timeout_ms / 1000)
        self.output.connectivity.clear()
        self.consumer.connectivity.clear()
        self.checkpointer.resume()

    def _warn_if_stalled(self, stall_s: float) -> None:
        """Nothing consumed for ``stall_s``: if records are waiting, say where everything stands."""
        if time.monotonic() - self.recovery.ended_at < stall_s:
            return  # the recovery's rounds consumed nothing on purpose
        waiting = self.consumer.backlog()
        if not waiting:
            if not self.assigned:
                self._check_idle_with_lag()
            return
        self.stall_warnings += 1
        parts = []
        for tp, (pos, end) in sorted(waiting.items())[:_STALL_DETAIL]:
            stable = self.consumer.stable_end(tp)
            task = ("running" if self.runner.running(tp) else "restoring" if tp[1] in self.restorer.pending
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

    def _check_idle_with_lag(self) -> None:
        """This member holds no partition: if records wait where no member of its group reads,
        nobody processes them, and this member is not healthy (/health 503) until the group
        gives it some."""
        inputs = [(topic, p) for topic in self.inputs for p in range(self.partitions)]
        self.idle_with_lag = unheld_backlog(self.admin, self.consumer, self.pipeline.name, inputs)
        if self.idle_with_lag:
            self.stall_warnings += 1
            log.warning("%s: the group does not give them to this member. See fw status %s; a member the group "
                        "no longer counts (past max.poll.interval.ms, fenced) is restarted with its process",
                        self.idle_with_lag, self.pipeline.name)

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
                     self.instance_id, self.runner.records, _counters(self.runner.metrics()))

    # -- assignment ----------------------------------------------------------------------

    def _committed(self, tps: list[TP]) -> dict[TP, int | None]:
        """The group's committed offsets of input partitions ``tps``, in one request: where a
        table read from its own topic is restored to."""
        return self.consumer.committed(tps, self.config.processing.revoke_timeout_ms / 1000)

    def _publish(self) -> None:
        if self.observer is not None:
            self.observer.publish()

    def _on_assign(self, tps: list[TP]) -> list[TP]:
        """Start the new partitions' tasks, or their restores; returns the input partitions
        to hold paused until their restore is done (``_restored`` resumes them)."""
        self.assigned |= set(tps)
        self.holds.disturb(f"partitions {sorted(tps)} assigned to member {self.instance_id}")
        self.has_assignment = True
        self.idle_with_lag = None
        self.rebalances["assigned"] += 1
        numbers = sorted({p for _, p in tps} - set(self.runner.tasks) - set(self.restorer.pending))
        log.info("assigned partitions %s", numbers)
        if numbers:
            if self.standby is not None:
                self.standby.release(numbers)  # their copies become the start of the restore
            self.restorer.start(numbers)  # those with nothing to restore start at once
        if self.standby is not None:
            self.standby.refresh_soon()
        self._publish()
        if self.holds.held is not None:
            return list(tps)  # held: none of them is processed until the release
        return [tp for tp in tps if tp[1] in self.restorer.pending]

    def _active_tasks(self) -> set[int]:
        """The tasks this member runs, restores or is assigned: never standbys."""
        return {p for _, p in self.assigned} | set(self.runner.tasks) | set(self.restorer.pending)

    def _restored(self, partition: int) -> None:
        """Called by the restorer when every store of ``partition`` is at the changelog end."""
        self.runner.start(partition)
        if self.holds.held is None:  # held: the release resumes it
            self.consumer.resume([tp for tp in self.assigned if tp[1] == partition])
        log.info("partition %d restored and running", partition)
        self._publish()

    def _on_revoke(self, tps: list[TP]) -> None:
        """Commit what was processed, then stop the revoked partitions' tasks."""
        log.info("revoking %s", sorted({p for _, p in tps}))
        self.holds.disturb(f"partitions {sorted(tps)} revoked from member {self.instance_id}")
        self.rebalances["revoked"] += 1
        self.checkpointer.checkpoint("revoke")
        self._drop(tps)
        self._publish()

    def _on_lost(self, tps: list[TP]) -> None:
        """The group moved on without us (a session that timed out, an outage): nothing of
        ours may commit; the recovery settles the interval (no broker call here: the cluster
        may be away)."""
        level = logging.INFO if self.recovery.unreachable else logging.WARNING  # an outage is said once
        log.log(level, "partitions lost %s: the open interval is dropped, and processed again by whoever "
                "gets them", sorted({p for _, p in tps}))
        self.rebalances["lost"] += 1
        self.holds.disturb(f"partitions {sorted(tps)} lost by member {self.instance_id}")
        self._drop(tps)
        self.checkpointer.break_interval("partitions lost")

    def _drop(self, tps: list[TP]) -> None:
        self.assigned -= set(tps)
        kept = {p for _, p in self.assigned}
        for p in {p for _, p in tps} - kept:
            self.restorer.cancel(p)
            self.runner.stop(p)
        if self.standby is not None:
            self.standby.refresh_soon()


def _warn_about_generated_names(pipeline: Pipeline) -> None:
    """State and repartition topics named after generated step names (``count-4``) move to
    other steps when steps are added in front of them: say so once, at start."""
    generated = [s.name for i, s in enumerate(pipeline.steps.values())
                 if (s.stateful or isinstance(s, S.KeyBy)) and re.fullmatch(rf"[a-z_]+-{i}", s.name)]
    if generated:
        log.warning("steps %s keep state or a repartition topic under a generated name, which changes when "
                    "steps are added before them (their state would then belong to other steps): give them "
                    "name=... (see docs/writing-a-service.md)", generated)


def _counters(metrics: dict[str, int]) -> str:
    """``; dead_letters=n, late_records.<step>=n, ...`` (only what was counted)."""
    return "".join(f"; {name}={n}" for name, n in sorted(metrics.items()) if n and name != "records")


def _missing_grants(settings: dict[str, str], pipeline: Pipeline) -> list[Grant]:
    try:
        return missing_grants(settings, service_grants(pipeline), timeout_s=10.0)
    except Exception as exc:
        if client_failure(exc) is None:
            raise
        return []  # the cluster cannot say: the original error stands


def run_service(pipeline: Pipeline, config: Config | None = None, instance_id: str | None = None, *,
                static_membership: bool = True) -> None:
    """Run until SIGTERM/SIGINT: the body of ``fw run``."""
    svc = Service(pipeline, config or Config.load(), instance_id, static_membership=static_membership)
    svc.install_signal_handlers()
    svc.run()
