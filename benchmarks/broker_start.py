"""What a start of the local broker costs, with and without the brokers' class-data archive
(``framework.classdata.DetachedArchive``): seconds from the start to the first answer, and the
broker JVM's CPU seconds by then, of a fresh instance (its storage formatted) and of a restart
of the same instance, each repeated. The archive is the one of ``$FW_HOME/kafka-cds``: written
first, by a broker stopped cleanly, when there is none.

    .venv/bin/python benchmarks/broker_start.py              # 3 repeats
    .venv/bin/python benchmarks/broker_start.py --repeat 5

Prints one line per start and the medians. Nothing here is asserted anywhere: the figures go
to benchmarks/NOTES.md by hand.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from framework.broker.local import LocalBroker, free_port_pair


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _start(broker: LocalBroker) -> tuple[float, float]:
    began = time.monotonic()
    status = broker.start()
    ready = time.monotonic() - began
    assert status.pid is not None
    return ready, _cpu_s(status.pid)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="fw-broker-start-") as tmp:
        first = LocalBroker(Path(tmp) / "first", free_port_pair())
        first.start()
        first.wipe()  # a clean stop: the archive is written if there was none
        for archive in (False, True):
            for run in range(args.repeat):
                broker = LocalBroker(Path(tmp) / f"{archive}-{run}", free_port_pair())
                if not archive:
                    broker._archive = lambda java: None  # type: ignore[method-assign]
                for kind in ("fresh", "restart"):
                    ready, cpu = _start(broker)
                    rows.setdefault(f"{'with' if archive else 'without'} archive, {kind}", []).append((ready, cpu))
                    print(f"archive={archive} {kind} run {run}: ready in {ready:.1f} s, broker CPU {cpu:.1f} s",
                          flush=True)
                    broker.stop()
                broker.wipe()
    print("\n| start | ready (s) | broker CPU at ready (s) |\n|---|---|---|")
    for name, values in rows.items():
        ready = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        print(f"| {name} | {ready:.1f} ({', '.join(f'{v[0]:.1f}' for v in values)}) "
              f"| {cpu:.1f} ({', '.join(f'{v[1]:.1f}' for v in values)}) |")


if __name__ == "__main__":
    main()
