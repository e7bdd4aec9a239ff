"""What a member shows of itself: metrics, ``/status``, ``/history``, health and readiness.

The processing loop calls ``observe`` once per ``observe.interval_ms`` (and ``publish`` when
an assignment or a restore changes something). An observation reads the counters the loop
keeps anyway (the runner's, the producer's, the checkpointer's, the restorer's), the
consumer's statistics (librdkafka's, for the last stable offsets) and RocksDB's properties,
copies them to the Prometheus metrics and publishes one immutable status snapshot. The HTTP
thread only ever reads the latest snapshot, and the loop's heartbeat for ``/health``.
"""

from __future__ import annotations

import os
import time
from collections import deque
from typing import Any

from framework.observe.metrics import Metrics
from framework.time.watermarks import NO_WATERMARK

HISTORY_S = 600  # the status page's charts: the last ten minutes


class Observer:
    """Observes one ``Service`` from inside its loop; read by ``framework.observe.server``."""

    def __init__(self, service: Any, interval_s: float, health_timeout_s: float) -> None:
        """``service``: a ``framework.runtime.service.Service`` (not imported: it imports this)."""
        self.service = service
        self.interval_s = interval_s
        self.health_timeout_s = health_timeout_s
        self.metrics = Metrics()
        self.started_at = time.time()
        self.heartbeat = time.monotonic()  # the loop's last round (set by the loop itself)
        self.looping = False  # before the loop starts (topics, transactions), nothing can stall it
        self.state = "starting"
        self.error: str | None = None
        self.endpoint = ""
        self.status: dict[str, Any] = {}
        self.history: deque[dict[str, Any]] = deque(maxlen=max(int(HISTORY_S / interval_s), 10))
        self._copied: dict[tuple[Any, tuple[str, ...]], int] = {}
        self._last_t = time.monotonic()
        self._last_records = 0
        self._last_restored = 0
        self.rate = 0.0
        self.restore_rate = 0.0
        self.stores: list[dict[str, Any]] = []
        self._sample: dict[str, Any] = {}
        self.metrics.info.labels(service.pipeline.name, service.instance_id).set(1)

    # -- health (read by the HTTP thread) ------------------------------------------------

    def health(self) -> tuple[bool, dict[str, Any]]:
        since = time.monotonic() - self.heartbeat
        if self.state == "failed":
            return False, {"status": "failed", "error": self.error}
        idle = getattr(self.service, "idle_with_lag", None)
        if idle:
            return False, {"status": "idle with lag", "why": idle}
        if self.looping and since > self.health_timeout_s:
            slow = getattr(self.service, "slow", None)
            holding = slow.holding() if slow is not None else None
            return False, {"status": "stalled", "loop_silent_s": round(since, 1),
                           "why": f"the processing loop has not come round: {holding or 'a step or a blocking call'} "
                                  "holds it (the loop comes round at least once per checkpoint interval while each "
                                  "record is quick; see /status and the log)"}
        return True, {"status": "ok", "state": self.state, "loop_silent_s": round(since, 1)}

    def ready(self) -> tuple[bool, dict[str, Any]]:
        status = self.status
        ok = bool(status.get("ready")) and self.health()[0]
        return ok, {"ready": ok, "state": status.get("state", self.state),
                    "restore": status.get("restore")}

    def snapshot(self) -> dict[str, Any]:
        healthy, _ = self.health()
        member = dict(self.status or self._member_base())
        member["healthy"] = healthy
        member["ready"] = bool(member.get("ready")) and healthy
        return {"service": self.service.pipeline.name, "generated_at": time.time(), "members": [member]}

    def history_doc(self) -> dict[str, Any]:
        return {"interval_s": self.interval_s, "samples": list(self.history)}

    def metrics_text(self) -> bytes:
        return self.metrics.exposition()

    # -- observation (in the loop) --------------------------------------------------------

    def observe(self) -> None:
        now = time.monotonic()
        svc, m = self.service, self.metrics
        runner = svc.runner
        elapsed = max(now - self._last_t, 1e-6)
        self._last_t = now
        self.rate = (runner.records - self._last_records) / elapsed
        self._last_records = runner.records
        restored = svc.restorer.restored_records
        self.restore_rate = (restored - self._last_restored) / elapsed
        self._last_restored = restored

        m.process_rate.set(self.rate)
        self._measure_stores()
        self.publish()
        self.history.append(self._sample)  # one sample per interval, not per publish

    def _measure_stores(self) -> None:
        """Entries and bytes of every store partition, from RocksDB's properties (no scan)."""
        m, stores = self.metrics, []
        sizes: dict[tuple[str, ...], float] = {}
        counts: dict[tuple[str, ...], float] = {}
        for p, task in sorted(self.service.runner.tasks.items()):
            for name, cached in task.stores.items():
                part = cached.backend
                if not hasattr(part, "estimated_entries"):
                    continue
                entries, size = part.estimated_entries(), part.size_bytes()
                stores.append({"store": name, "partition": p, "entries": entries, "bytes": size})
                counts[(name, str(p))], sizes[(name, str(p))] = entries, size
        m.state_entries.update(counts)
        m.state_bytes.update(sizes)
        self.stores = stores

    def publish(self) -> None:
        """Counters and a new snapshot now (the periodic ``observe``, or an assignment or a
        restore that changed something); rates move only with ``observe``."""
        svc, m = self.service, self.metrics
        runner = svc.runner
        for topic, n in runner.consumed_by_topic().items():
            self._copy(m.consumed, (topic,), n)
        for topic, n in svc.output.produced.items():
            self._copy(m.produced, (topic,), n)
        counters = runner.metrics()
        self._copy(m.dead_letters, (), counters.get("dead_letters", 0))
        by_step = {"late_records": m.late, "unmatched": m.unmatched, "expired_records": m.expired,
                   "async_retries": m.async_retries, "async_timeouts": m.async_timeouts,
                   "async_failures": m.async_failures}
        for name, n in counters.items():
            kind, _, step = name.partition(".")
            if step and kind in by_step:
                self._copy(by_step[kind], (step,), n)
        ckpt = svc.checkpointer
        self._copy(m.checkpoints, (), ckpt.completed)
        self._copy(m.checkpoint_failures, (), ckpt.aborted)
        self._copy(m.aborts, (), svc.output.aborts)
        for event, n in svc.assignment.rebalances.items():
            self._copy(m.rebalances, (event,), n)
        self._copy(m.stalls, (), svc.stall_warnings)
        if runner.calls is not None:
            m.async_in_flight.update({(step,): n for step, n in runner.in_flight().items()})
            for step, seconds in runner.take_call_latencies().items():
                histogram = m.async_call_seconds.labels(step)
                for took in seconds:
                    histogram.observe(took)
        slow = getattr(svc, "slow", None)
        if slow is not None:
            self._copy(m.slow_records, (), slow.warnings)
        for store, n in svc.restorer.restored_by_store.items():
            self._copy(m.restored, (store,), n)
        self._publish(counters)

    def _copy(self, counter: Any, labels: tuple[str, ...], total: int) -> None:
        key = (counter, labels)
        delta = total - self._copied.get(key, 0)
        if delta > 0:
            (counter.labels(*labels) if labels else counter).inc(delta)
            self._copied[key] = total

    def _member_base(self) -> dict[str, Any]:
        svc = self.service
        return {"instance": svc.instance_id, "pid": os.getpid(), "endpoint": self.endpoint,
                "started_at": self.started_at, "state": self.state, "ready": False}

    def _publish(self, counters: dict[str, int]) -> None:
        """The snapshot behind /status and /history, and the gauges; ``counters``: the runner's."""
        svc, m = self.service, self.metrics
        runner, restorer, ckpt = svc.runner, svc.restorer, svc.checkpointer
        slow = getattr(svc, "slow", None)
        wall = time.time()
        assigned = svc.assignment.assigned
        inputs, lag_by_partition = self._inputs(assigned)
        m.lag.update({(i["topic"], str(i["partition"])): i["lag"] for i in inputs if i["lag"] is not None})

        watermarks = []
        wm_values: dict[tuple[str, ...], float] = {}
        wm_delays: dict[tuple[str, ...], float] = {}
        task_wm: dict[int, int] = {}  # the lowest watermark over a task's steps
        for p, task in sorted(runner.tasks.items()):
            for clock in task.time.clocks.values():
                w = clock.watermark
                for step in sorted(clock.steps):
                    known = w != NO_WATERMARK
                    delay = wall - w / 1000 if known else None
                    watermarks.append({"partition": p, "step": step, "watermark_ms": w if known else None,
                                       "delay_s": None if delay is None else round(delay, 3)})
                    if known:
                        wm_values[(str(p), step)] = w / 1000
                        wm_delays[(str(p), step)] = delay  # type: ignore[assignment]
                if w != NO_WATERMARK:
                    task_wm[p] = min(task_wm.get(p, w), w)
        m.watermark.update(wm_values)
        m.watermark_delay.update(wm_delays)

        restore_items = restorer.progress()
        restoring_parts = set(restorer.pending)
        remaining = sum(r["remaining"] for r in restore_items)
        m.restore_remaining.update({(r["store"], str(r["partition"])): r["remaining"] for r in restore_items})
        by_part: dict[int, dict[str, Any]] = {}
        for r in restore_items:
            entry = by_part.setdefault(r["partition"], {"restored": 0, "remaining": 0})
            entry["restored"] += r["restored"]
            entry["remaining"] += r["remaining"]
        rate = self.restore_rate
        for entry in by_part.values():
            entry["rate"] = round(rate, 1)
            entry["eta_s"] = round(entry["remaining"] / rate, 1) if rate > 0 else None

        partitions = []
        for p in sorted({tp[1] for tp in assigned} | set(runner.tasks) | restoring_parts):
            wm = task_wm.get(p)
            partitions.append({
                "partition": p, "state": "restoring" if p in restoring_parts else
                "running" if p in runner.tasks else "assigned",
                "lag": lag_by_partition.get(p), "watermark_ms": wm,
                "watermark_delay_s": None if wm is None else round(wall - wm / 1000, 3),
                "restore": by_part.get(p)})
        standby = svc.standby.progress() if svc.standby is not None else []
        m.tasks.update({("running",): len(runner.tasks), ("restoring",): len(restoring_parts),
                        ("standby",): len({s["partition"] for s in standby})})

        age = wall - ckpt.committed_as_of  # how long processed work has waited to be committed
        m.checkpoint_age.labels(svc.instance_id).set(age)
        if self.state not in ("stopping", "failed"):
            recovery = getattr(svc, "recovery", None)
            self.state = ("waiting for the cluster" if recovery is not None and recovery.active and recovery.unreachable
                          else "recovering" if recovery is not None and recovery.active
                          else "rejoining" if svc.assignment.rejoining
                          else "starting" if not svc.assignment.has_assignment
                          else "restoring" if restoring_parts else "running")
        ready = self.state == "running"
        m.ready.labels(svc.instance_id).set(1 if ready else 0)
        lag_total = sum(i["lag"] for i in inputs if i["lag"] is not None)
        delays = list(wm_delays.values())
        self.status = {
            **self._member_base(), "ready": ready,
            "records_processed": runner.records, "process_rate": round(self.rate, 1), "lag": lag_total,
            "partitions": partitions, "inputs": inputs, "watermarks": watermarks,
            "checkpoint": {"completed": ckpt.completed, "failed": ckpt.aborted,
                           "last_duration_s": round(ckpt.last_duration_s, 4), "phases_ms": ckpt.phases_ms(),
                           "age_s": round(age, 3), "interval_s": ckpt.interval_s},
            "restore": {"restored": restorer.restored_records, "remaining": remaining,
                        "rate": round(rate, 1), "eta_s": round(remaining / rate, 1) if rate > 0 and remaining else None,
                        "stores": restore_items},
            "standby": standby,
            "stores": self.stores,
            "counters": {"dead_letters": counters.get("dead_letters", 0),
                         "late_records": {k.partition(".")[2]: v for k, v in counters.items()
                                          if k.startswith("late_records.")},
                         "rebalances": sum(svc.assignment.rebalances.values()), "stall_warnings": svc.stall_warnings,
                         "slow_records": slow.warnings if slow is not None else 0,
                         "held_records": runner.held_records,
                         "async_in_flight": runner.in_flight() if runner.calls is not None else {},
                         "transaction_aborts": svc.output.aborts},
        }
        self._sample = {"t": round(wall, 3), "rate": round(self.rate, 1), "lag": lag_total,
                        "watermark_delay_s": round(max(delays), 3) if delays else None}

    def _inputs(self, assigned: set[tuple[str, int]]) -> tuple[list[dict[str, Any]], dict[int, int]]:
        """Per assigned input partition: position, last stable offset and lag (from the
        consumer's statistics, refreshed by librdkafka on the observation interval)."""
        stats = self.service.consumer.partition_stats
        out: list[dict[str, Any]] = []
        by_partition: dict[int, int] = {}
        for tp in sorted(assigned):
            end, position = stats.get(tp, (-1, -1))
            # nothing consumed or committed yet: everything up to the end waits
            lag = None if end < 0 else max(end - max(position, 0), 0)
            out.append({"topic": tp[0], "partition": tp[1], "position": position if position >= 0 else None,
                        "end": end if end >= 0 else None, "lag": lag})
            if lag is not None:
                by_partition[tp[1]] = by_partition.get(tp[1], 0) + lag
        return out, by_partition
