"""Soak: a member of an exactly-once service rides out outages of its only broker.

Starts a broker of its own (on free ports, in a temporary directory), one member of the
even/odd test service, and a producer that keeps writing numbers; then, for each outage
length given, SIGKILLs the broker (or stops it with SIGTERM, ``--graceful``) while the
member processes, starts it again on the same directory after that many seconds, and
measures how long the member takes to process again. At the end it checks the outputs
read_committed: every input exactly once. Prints one line per outage and a summary.

    .venv/bin/python benchmarks/soak_outage.py 10 45 100 300        # four outages, one after another
    .venv/bin/python benchmarks/soak_outage.py --graceful 30        # the broker stopped cleanly
    .venv/bin/python benchmarks/soak_outage.py --outage-timeout-ms 60000 90   # past the timeout: the
                                                                    # member exits, is started again

Outside the test suite (minutes per outage); its figures are in docs/operations.md, "Outages".
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from framework.broker.local import LocalBroker, free_port_pair
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from tests.integration.harness import (
    EvenOddOutputs,
    ServiceProcess,
    even_odd_anomalies,
    even_odd_inputs,
    produce,
    service_env,
    sigkill_broker,
    wait_until,
)

KEYS = 500
TARGET = "tests.integration.pipelines:even_odd"


def _health(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


class Feeder(threading.Thread):
    """Produces numbers 1, 2, ... at ``rate`` per second while the broker is up; a batch
    that fails (the broker is away) is produced again until it is delivered."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.rate = bootstrap, topic, rate
        self.next = 1
        self.stop_at: int | None = None
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            hi = self.next + self.rate // 10
            try:
                produce(self.bootstrap, self.topic, even_odd_inputs(self.next, hi, KEYS))
            except AssertionError:  # not flushed in time: written again (a duplicate input would fail the audit)
                continue
            self.next = hi
            time.sleep(0.1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outages", nargs="+", type=float, help="outage lengths in seconds")
    ap.add_argument("--graceful", action="store_true", help="stop the broker with SIGTERM instead of SIGKILL")
    ap.add_argument("--outage-timeout-ms", type=int, default=None, help="the member's broker_outage_timeout_ms")
    ap.add_argument("--rate", type=int, default=2000, help="input records per second")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="fw-soak-outage-"))
    broker = LocalBroker(work / "broker", free_port_pair(29500))
    broker.start()
    bootstrap = broker.bootstrap
    suffix = f"soak{os.getpid()}"
    ensure_topics(admin_client({"bootstrap.servers": bootstrap}), [TopicSpec(f"numbers-{suffix}", 4)])
    env = service_env(bootstrap, suffix, checkpoint_interval_ms=1000, batch_size=1000)
    env["FW_KAFKA_CONSUMER__SESSION_TIMEOUT_MS"] = "10000"  # the recorded results' session (the default is 45 s)
    env["FW_OBSERVE__PORT"] = "0"
    if args.outage_timeout_ms is not None:
        env["FW_PROCESSING__BROKER_OUTAGE_TIMEOUT_MS"] = str(args.outage_timeout_ms)
    svc = ServiceProcess(TARGET, work, "0", env).start()
    feeder = Feeder(bootstrap, f"numbers-{suffix}", args.rate)
    feeder.start()
    out = EvenOddOutputs(bootstrap, suffix, 0)
    rc = 0
    try:
        url = svc.endpoint()
        for seconds in args.outages:
            base = sum(out.drain())
            wait_until(lambda: sum(out.drain()) > base + 1000,  # noqa: B023 - called at once
                       120, "progress before the outage", svc.log_text)
            pid = broker.status().pid
            if args.graceful:
                broker.stop()
            else:
                sigkill_broker(broker)
            down = time.monotonic()
            codes: dict[str, set[int]] = {"health": set(), "ready": set()}
            while time.monotonic() - down < seconds and svc.alive:
                codes["health"].add(_health(url + "/health"))
                codes["ready"].add(_health(url + "/ready"))
                time.sleep(0.5)
            if not svc.alive:
                assert svc.proc is not None  # started
                print(f"outage {seconds:.0f} s: the member exited (rc {svc.proc.poll()}) after "
                      f"{time.monotonic() - down:.0f} s", flush=True)
                rc = 0 if args.outage_timeout_ms is not None else 1
                broker.start()
                break
            broker.start()
            back = time.monotonic()
            before = sum(out.drain())
            wait_until(lambda: sum(out.drain()) > before + 100 or not svc.alive,  # noqa: B023 - called at once
                       600, "progress after the outage", svc.log_text)
            if not svc.alive:
                print(f"outage {seconds:.0f} s: the member exited (rc {svc.proc.poll()}) after the broker was back",
                      flush=True)
                rc = 1
                break
            resumed = time.monotonic() - back
            print(f"outage {seconds:.0f} s ({'SIGTERM' if args.graceful else 'SIGKILL'} of pid {pid}): member "
                  f"alive, processing again {resumed:.1f} s after the broker was back; /health answered "
                  f"{sorted(codes['health'])}, /ready {sorted(codes['ready'])} during it", flush=True)
        feeder.halt.set()
        feeder.join()
        n = feeder.next - 1
        out.n = n
        if svc.alive:
            wait_until(out.complete, 600, "every output", lambda: str(out.drain()))
            svc.stop()
        else:
            svc.start()
            wait_until(out.complete, 600, "every output after a restart", lambda: str(out.drain()))
            svc.stop()
        anomalies = even_odd_anomalies(out, n, KEYS)
        clean = all(v == 0 for a in anomalies.values() for v in a.values())
        print(f"{n} inputs; exactly-once audit {'clean' if clean else 'FAILED'}: {anomalies}", flush=True)
        rc = rc or (0 if clean else 1)
    finally:
        if svc.alive:
            svc.proc.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
        out.close()
        broker.wipe()
        print(f"member log: {svc.log_path}", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
