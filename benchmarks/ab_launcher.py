"""Stand-in for ``python -m framework.cli`` that applies proposed changes of the framework at
start-up, so the suite can measure them without editing framework/ (A/B):

    BENCH_FW_LAUNCHER=benchmarks/ab_launcher.py AB_PRODUCE=1 \\
        benchmarks/run --systems fw-1 --workloads w1 --phases throughput --no-report

AB_PRODUCE=1  KafkaOutput.produce calls Producer.produce positionally (no kwargs dict, no
              second method call); the BufferError path is the original one.
AB_GC=N       gc.set_threshold(N, 50, 1000): fewer generation-0 collections in the hot loop.
"""

import gc
import os
import sys

if os.environ.get("AB_GC"):
    gc.set_threshold(int(os.environ["AB_GC"]), 50, 1000)

if os.environ.get("AB_PRODUCE"):
    from framework.kafka import clients

    _original = clients.KafkaOutput.produce

    def produce(self, topic, key, value, timestamp, headers=None, partition=None):  # noqa: ANN001, ANN201
        try:
            if headers is None and partition is None:
                # positional: topic, value, key, partition, callback, on_delivery, timestamp
                self._p.produce(topic, value, key, -1, self._on_delivery, None, timestamp)
            else:
                self._p.produce(topic, value, key, -1 if partition is None else partition, self._on_delivery,
                                None, timestamp, list(headers) if headers else None)
        except BufferError:
            _original(self, topic, key, value, timestamp, headers, partition)

    clients.KafkaOutput.produce = produce

from framework.cli import main  # noqa: E402

sys.argv = ["fw", *sys.argv[1:]]
main()
