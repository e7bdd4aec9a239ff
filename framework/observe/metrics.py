"""The Prometheus metrics of one member, with prometheus-client.

Names follow Prometheus' conventions (base units, ``_total`` for counters, ``_seconds``) and
Kafka Streams' and Flink's vocabulary where they have a word for it (records lag, restore
remaining records, late records). The processing loop never touches a metric: counters are
kept as plain integers where the work happens and copied here on each observation
(``framework.observe.observer``), so metrics cost nothing per record.

Under ``fw run --processes N`` every child writes its values to files in
``PROMETHEUS_MULTIPROC_DIR`` (prometheus-client's multiprocess mode: set before any child
starts, by the supervisor) and the supervisor's endpoint sums them. A gauge there keeps the
value a process last set, so a partition that leaves a process is set to 0 rather than
removed (its new owner's value is what the sum or maximum shows).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client import multiprocess as _multiprocess

disable_created_metrics()  # no ``_created`` series beside every counter: Prometheus does not need them

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
Labels = tuple[str, ...]


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROC_ENV) or None


def exposition(registry: CollectorRegistry | None, path: str | None = None) -> bytes:
    """The text format of ``registry``, or of every process's files (under ``path``, else
    ``PROMETHEUS_MULTIPROC_DIR``) in multiprocess mode."""
    if registry is None:
        registry = CollectorRegistry()
        _multiprocess.MultiProcessCollector(registry, path=path)
    return generate_latest(registry)


class GaugeFamily:
    """A labelled gauge set as a whole: label sets missing from an update are removed (or, in
    multiprocess mode, set to 0, since the value files cannot forget a series)."""

    def __init__(self, gauge: Gauge, multiprocess: bool) -> None:
        self.gauge, self.multiprocess = gauge, multiprocess
        self.current: set[Labels] = set()

    def update(self, values: Mapping[Labels, float]) -> None:
        for labels, value in values.items():
            self.gauge.labels(*labels).set(value)
        for labels in self.current - values.keys():
            if self.multiprocess:
                self.gauge.labels(*labels).set(0)
            else:
                self.gauge.remove(*labels)
        self.current = set(values)


class Metrics:
    """Every metric of a member. Single process: a registry of its own (several services in
    one process do not collide). Multiprocess: unregistered metrics whose values go to the
    shared files."""

    def __init__(self) -> None:
        self.multiprocess = multiprocess_dir() is not None
        reg = None if self.multiprocess else CollectorRegistry()
        self.registry = reg
        mp = self.multiprocess

        def counter(name: str, doc: str, labels: Labels = ()) -> Counter:
            return Counter(name, doc, labels, registry=reg)

        def gauge(name: str, doc: str, labels: Labels = (), mode: str = "livesum") -> Gauge:
            return Gauge(name, doc, labels, registry=reg, multiprocess_mode=mode)  # type: ignore[arg-type]

        def family(name: str, doc: str, labels: Labels, mode: str = "livesum") -> GaugeFamily:
            return GaugeFamily(gauge(name, doc, labels, mode), mp)

        self.info = gauge("fw_member_info", "Always 1; labels name the service and the member.",
                          ("service", "instance"))
        self.consumed = counter("fw_records_consumed", "Records processed, per input topic "
                                "(repartition topics included; watermark control records not).", ("topic",))
        self.produced = counter("fw_records_produced", "Records sent, per output topic (outputs, "
                                "repartition topics, changelogs, dead letters).", ("topic",))
        self.process_rate = gauge("fw_process_rate", "Records processed per second over the last "
                                  "observation interval (Kafka Streams: process-rate).")
        self.dead_letters = counter("fw_dead_letters", "Records (and failed timers) sent to the "
                                    "dead-letter topic.")
        self.late = counter("fw_late_records", "Records later than the allowed lateness, per step "
                            "(Flink: numLateRecordsDropped; sent to the late topic when it has one).",
                            ("step",))
        self.unmatched = counter("fw_unmatched_records", "Records an inner join with a table dropped: "
                                 "the table had no row for them, per join step.", ("step",))
        self.expired = counter("fw_expired_records", "Table updates older than the table's history, "
                               "dropped (Kafka Streams' versioned stores drop them too), per table.", ("step",))
        self.lag = family("fw_consumer_lag_records", "Records in an assigned input partition after "
                          "the member's position, up to the last stable offset (Kafka: records-lag).",
                          ("topic", "partition"))
        self.watermark = family("fw_watermark_seconds", "A task's event-time watermark at a step, as "
                                "a Unix time.", ("partition", "step"), "livemax")
        self.watermark_delay = family("fw_watermark_delay_seconds", "Wall clock minus the watermark.",
                                      ("partition", "step"), "livemax")
        self.checkpoints = counter("fw_checkpoints", "Checkpoints completed (outputs, state and input "
                                   "offsets committed together).")
        self.checkpoint_failures = counter("fw_checkpoint_failures", "Checkpoints that failed and were "
                                           "aborted (the interval is processed again).")
        self.checkpoint_duration = Histogram(
            "fw_checkpoint_duration_seconds", "Time to take a checkpoint.", registry=reg,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
        self.checkpoint_age = gauge("fw_checkpoint_age_seconds", "Time since everything the member "
                                    "had processed was committed (by a checkpoint, or none was needed).",
                                    ("instance",), "livemax")
        self.aborts = counter("fw_transaction_aborts", "Transactions aborted: failed checkpoints and "
                              "partitions lost to the group.")
        self.rebalances = counter("fw_rebalances", "Partition assignment changes seen by the member.",
                                  ("event",))
        self.stalls = counter("fw_stall_warnings", "Warnings that records wait but none is read.")
        self.slow_records = counter("fw_slow_records", "Records that stayed in the pipeline's steps "
                                    "longer than processing.slow_record_warning_ms (one WARNING each).")
        self.state_entries = family("fw_state_entries", "Entries of a store partition (RocksDB's "
                                    "estimate of its keys).", ("store", "partition"))
        self.state_bytes = family("fw_state_bytes", "Bytes of a store partition (RocksDB's live data "
                                  "estimate plus memtables).", ("store", "partition"))
        self.restored = counter("fw_restored_records", "Changelog records applied by restores "
                                "(Kafka Streams: restore-total).", ("store",))
        self.restore_remaining = family("fw_restore_remaining_records", "Changelog records a restore "
                                        "still has to apply (Kafka Streams: restore-remaining-records-total).",
                                        ("store", "partition"))
        self.async_in_flight = family("fw_async_in_flight", "Records in flight in an async step (called, "
                                      "not yet emitted), per step.", ("step",))
        self.async_call_seconds = Histogram(
            "fw_async_call_seconds", "Time of each call attempt of an async step, per step.", ("step",),
            registry=reg, buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
        self.async_retries = counter("fw_async_retries", "Calls of an async step made again (Retry), per step.",
                                     ("step",))
        self.async_timeouts = counter("fw_async_timeouts", "Call attempts of an async step past its "
                                      "timeout_ms, per step.", ("step",))
        self.async_failures = counter("fw_async_failures", "Records whose call failed for good (dead "
                                      "letters, or the service stopped with on_error=fail), per step.", ("step",))
        self.tasks = family("fw_tasks", "Tasks of the member by state.", ("state",))
        self.ready = gauge("fw_ready", "1 when every assigned task is restored and processing.",
                           ("instance",), "livemax")

    def exposition(self) -> bytes:
        return exposition(self.registry)
