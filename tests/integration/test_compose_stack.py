"""docker-compose.yml run by a real container engine: podman, through podman-compose.

The images the compose file names cannot be pulled on this machine: ``tests.containers.images``
builds them from Debian's packages and Maven Central (stand-ins tagged ``apache/kafka``,
``prom/prometheus`` and ``python:3.11-slim``; the services' image from the repository's own
Dockerfile), cached under ``$FW_HOME/containers`` so that a warm run builds nothing.

One test in numbered steps, since the stack starts once (a cold image build takes minutes):

1. the images, built or found; the stack up (``podman-compose up -d``), the broker answering
   on the host's 127.0.0.1:9092 (the compose file's HOST listener);
2. the demo's readings (``framework.demo.make_readings``) produced to the sensors service in
   batches over some seconds; once its first outputs commit, its container is SIGKILLed from
   the host, a crash, which the engine restarts (``restart: unless-stopped``);
3. the outputs checked as ``fw demo`` checks them (``framework.demo.check_outputs`` and
   ``check_windows``): one mean per reading per sensor shows that nothing was lost or written
   twice across the crash (exactly-once);
4. the compose healthcheck: healthy while ``/health`` answers 200, unhealthy once it answers
   503 (a member whose loop is silent longer than its ``observe.health_timeout_ms``);
5. Prometheus (``/api/v1/targets``) scrapes every service.

Two engine facts shape it. Podman runs healthchecks from systemd timers, and this machine has
no systemd: the test runs a container's healthcheck with ``podman healthcheck run``, as the
timer would. podman-compose ignores ``depends_on: condition: service_healthy`` on podman older
than 4.6 (Debian bookworm's is 4.3): the services start with the broker, and wait for it
themselves (``kafka.connect_timeout_ms``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from framework.config import Config
from framework.demo import check_outputs, check_windows, make_readings
from framework.kafka.admin import broker_answers
from framework.kafka.io import read_committed
from framework.pipeline import Topic
from framework.produce import produce
from services.sensors import pipeline as sensors
from tests.containers.engine import engine_env, machine_lock, missing_tools, podman
from tests.containers.images import COMPOSE_FILE, STACK_PROJECT, build_all
from tests.integration.harness import wait_until

ROOT = Path(__file__).resolve().parents[2]
PROJECT = STACK_PROJECT  # the compose project: its containers, network and volumes are named after it
BOOTSTRAP = "127.0.0.1:9092"  # the compose file's HOST listener, published on the host
PROMETHEUS = "http://127.0.0.1:9090"
READINGS = 4000
HEALTH_PROBE = "health-probe"


def compose(*args: str, check: bool = True, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "podman_compose", "-p", PROJECT, "-f", str(COMPOSE_FILE), *args],
                          capture_output=True, text=True, env=engine_env(), cwd=ROOT, timeout=timeout_s,
                          check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"podman-compose {' '.join(args)} failed ({proc.returncode}):\n"
                             f"{(proc.stdout + proc.stderr)[-4000:]}")
    return proc


def container(service: str) -> str:
    """The id of the compose service's container."""
    out = podman("ps", "-a", "--filter", f"label=io.podman.compose.project={PROJECT}",
                 "--filter", f"label=com.docker.compose.service={service}", "--format", "{{.ID}}")
    ids = out.stdout.decode().split()
    assert len(ids) == 1, f"service {service}: containers {ids}"
    return ids[0]


def inspect(cid: str, template: str) -> str:
    return podman("inspect", "--format", template, cid).stdout.decode().strip()


def logs(service: str, lines: int = 40) -> str:
    proc = podman("logs", "--tail", str(lines), container(service), check=False)
    return f"--- {service} log:\n{(proc.stdout + proc.stderr).decode(errors='replace')}"


def answers_200(cid: str, path: str) -> bool:
    """Whether the member in the container answers 200 on ``path`` of its endpoint (port 9400),
    asked from inside the container as the healthcheck asks."""
    script = f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:9400{path}', timeout=5)"
    return podman("exec", cid, "python", "-c", script, check=False).returncode == 0


def healthcheck(cid: str) -> str:
    """Run the container's healthcheck once (what podman's timer does every ``interval``) and
    return the engine's verdict: starting, healthy or unhealthy."""
    podman("healthcheck", "run", cid, check=False)
    return inspect(cid, "{{.State.Health.Status}}")


def port_taken(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def stack() -> Iterator[float]:
    """The compose stack, up; yields the moment ``up`` started (``time.monotonic``). Taken down
    with its volumes afterwards, pass or fail."""
    missing = missing_tools()
    assert not missing, (f"the container tests need Debian's {', '.join(missing)}: scripts/test installs "
                         f"them (apt-get install {' '.join(missing)})")
    with machine_lock("stack"):
        yield from _stack()


def _stack() -> Iterator[float]:
    build_all(PROJECT, log=lambda line: print(f"[images] {line}"))
    podman("rm", "-f", HEALTH_PROBE, check=False)  # what a killed earlier run left behind
    compose("down", "-v", "--timeout", "5", check=False)
    busy = [p for p in (9092, 9090) if port_taken(p)]
    assert not busy, f"docker-compose.yml publishes ports {busy}, already taken on this machine"
    started = time.monotonic()
    try:
        compose("up", "-d")
        print(f"[stack] up -d returned after {time.monotonic() - started:.1f}s")
        yield started
    finally:
        podman("rm", "-f", HEALTH_PROBE, check=False)
        compose("down", "-v", "--timeout", "10", check=False)


# A cold run builds every image first (debootstrap, Debian's packages, the services' pip install).
@pytest.mark.timeout(1800)
def test_compose_stack_runs_the_services_exactly_once_health_and_metrics(stack: float) -> None:
    config = Config.load(kafka={"bootstrap_servers": BOOTSTRAP})
    pipeline = sensors.pipeline
    source = pipeline.sources()[0].topic
    sinks = {t.name: t for t in pipeline.sink_topics()}
    means, alerts = sinks["sensor-means"], sinks["sensor-alerts"]

    # 1. The broker, then the sensors service: ready once assigned and restored.
    wait_until(lambda: broker_answers(BOOTSTRAP), 180, "the compose broker on 127.0.0.1:9092",
               lambda: logs("kafka"))
    # The compose file's broker healthcheck (the image's kafka-broker-api-versions.sh) passes.
    wait_until(lambda: healthcheck(container("kafka")) == "healthy", 60, "the kafka container's healthcheck",
               lambda: logs("kafka"))
    # A one-off even-odd member whose /health answers 503 (step 4), started now so that its
    # healthcheck's start_period (60 s, within which failures do not count, as in Docker)
    # passes while steps 2 and 3 run: its loop waits 1 s for records and may be silent 1 ms.
    compose("run", "-d", "--no-deps", "--name", HEALTH_PROBE, "-e", "FW_OBSERVE__HEALTH_TIMEOUT_MS=1",
            "-e", "FW_PROCESSING__CONSUME_TIMEOUT_MS=1000", "even-odd")
    member = container("sensors")
    wait_until(lambda: answers_200(member, "/ready"), 240, "the sensors container's /ready",
               lambda: logs("sensors"))
    print(f"[stack] sensors ready {time.monotonic() - stack:.1f}s after up")

    # 2. The readings, produced in batches over some seconds; once the first outputs commit, the
    # container is killed mid-stream, a crash the engine restarts.
    readings = make_readings(READINGS, 8)
    with ThreadPoolExecutor(1) as pool:
        producing = pool.submit(produce_paced, source, readings, config)
        wait_until(lambda: committed(means, config) > 0, 180, "the first committed mean", lambda: logs("sensors"))
        print(f"[stack] first output {time.monotonic() - stack:.1f}s after up")
        restarts = int(inspect(member, "{{.RestartCount}}"))
        os.kill(int(inspect(member, "{{.State.Pid}}")), signal.SIGKILL)
        print(f"[stack] sensors container killed with {committed(means, config)} of {READINGS} means committed")
        wait_until(lambda: int(inspect(member, "{{.RestartCount}}")) > restarts
                   and inspect(member, "{{.State.Status}}") == "running", 60,
                   "the engine to restart the killed sensors container", lambda: logs("sensors"))
        print(f"[stack] sensors container restarted by the engine {time.monotonic() - stack:.1f}s after up")
        producing.result()

    # 3. The outputs, checked as `fw demo` checks them.
    for line in check_outputs(config, means, alerts, readings, sensors.RISE_C, timeout_s=300):
        print(line)
    for line in check_windows(config, sinks["sensor-minute-means"], readings, sensors.WINDOW_MS):
        print(line)

    # 4. The healthcheck: healthy while /health answers 200 ...
    wait_until(lambda: healthcheck(member) == "healthy", 60, "the sensors container's healthcheck to pass",
               lambda: logs("sensors"))
    # ... and unhealthy after `retries` (3) failures once /health answers 503 (the probe member).
    wait_until(lambda: health_says(HEALTH_PROBE) == 503, 180, "the probe member's /health to answer 503",
               lambda: podman("logs", "--tail", "30", HEALTH_PROBE, check=False).stdout.decode())
    wait_until(lambda: healthcheck(HEALTH_PROBE) == "unhealthy", 180, "the probe container to turn unhealthy")
    assert int(inspect(HEALTH_PROBE, "{{.State.Health.FailingStreak}}")) >= 3
    print(f"[stack] healthchecks: sensors healthy, the probe unhealthy {time.monotonic() - stack:.1f}s after up")

    # 5. Prometheus scrapes every service's /metrics.
    services = sorted(name for name in compose_services() if name not in ("kafka", "prometheus"))
    wait_until(lambda: scraped_up() >= {f"{s}:9400" for s in services}, 120,
               "Prometheus to scrape every service", lambda: json.dumps(targets(), indent=1)[-3000:])
    print(f"[stack] Prometheus scrapes all {len(services)} services {time.monotonic() - stack:.1f}s after up")


def produce_paced(source: Topic, readings: list[dict[str, Any]], config: Config, batch: int = 200,
                  pause_s: float = 0.25) -> None:
    """The readings in batches, a pause between them: the pause spreads the input over time
    (so that the kill lands while records are in flight), it waits for nothing."""
    for start in range(0, len(readings), batch):
        produce(source, ((r["id"], r, r["timestamp"]) for r in readings[start:start + batch]), config=config)
        time.sleep(pause_s)


def committed(topic: Topic, config: Config) -> int:
    return len(read_committed(config.kafka.bootstrap_servers, topic.name, None, 5.0))


def health_says(cid: str) -> int:
    """The HTTP status the member's /health answers, asked inside its container (0: none)."""
    script = ("import urllib.request, urllib.error\n"
              "try: print(urllib.request.urlopen('http://127.0.0.1:9400/health', timeout=5).status)\n"
              "except urllib.error.HTTPError as e: print(e.code)\n"
              "except OSError: print(0)")
    out = podman("exec", cid, "python", "-c", script, check=False).stdout.decode().strip()
    return int(out) if out.isdigit() else 0


def compose_services() -> list[str]:
    return compose("config", "--services").stdout.split()


def targets() -> list[dict[str, object]]:
    with urllib.request.urlopen(f"{PROMETHEUS}/api/v1/targets", timeout=5) as response:
        return list(json.load(response)["data"]["activeTargets"])


def scraped_up() -> set[str]:
    """The service targets Prometheus scraped successfully last time."""
    try:
        return {str(t["labels"]["instance"]) for t in targets()  # type: ignore[index]
                if t.get("health") == "up"}
    except OSError:
        return set()
