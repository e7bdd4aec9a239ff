"""Outages of the cluster and fatal client errors, on the real broker (docs/operations.md,
"Outages"): a member waits out its only broker SIGKILLed or stopped for a while, keeps its
process and endpoint (``/health`` 200, ``/ready`` 503 meanwhile), and goes on exactly once
when the broker is back; an outage past ``processing.broker_outage_timeout_ms`` ends it
promptly with one line naming the cause; of two processes with one instance id, one is left
running and the other exits with one line (the newcomer refuses to start; or, when the
member it would replace has no endpoint to ask, the newcomer joins and the member it fences
exits).

The broker killed here is the test's own (the ``broker`` fixture), never the suite's.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from framework.broker.local import LocalBroker
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from framework.ops.status import MemberStatus, service_status
from tests.integration.harness import (
    EvenOddOutputs,
    ServiceProcess,
    check_exactly_once,
    check_final_state,
    even_odd_inputs,
    produce,
    service_env,
    sigkill_broker,
    wait_until,
)

N = 12_000
KEYS = 200
TARGET = "tests.integration.pipelines:even_odd"


def _env(bootstrap: str, suffix: str, **extra: str) -> dict[str, str]:
    env = service_env(bootstrap, suffix, checkpoint_interval_ms=200, batch_size=500)
    env.pop("FW_KAFKA_CONSUMER__SESSION_TIMEOUT_MS")  # the framework's own (10 s): outages outlast it or not
    return {**env, "FW_OBSERVE__PORT": "0", **extra}


def _feed(bootstrap: str, suffix: str, lo: int, hi: int) -> None:
    produce(bootstrap, f"numbers-{suffix}", even_odd_inputs(lo, hi, KEYS))


def _start(broker: LocalBroker, unique: str, tmp_path: Path, services: list[ServiceProcess],
           **extra: str) -> tuple[ServiceProcess, EvenOddOutputs]:
    ensure_topics(admin_client({"bootstrap.servers": broker.bootstrap}), [TopicSpec(f"numbers-{unique}", 4)])
    svc = ServiceProcess(TARGET, tmp_path, "0", _env(broker.bootstrap, unique, **extra))
    services.append(svc.start())
    return svc, EvenOddOutputs(broker.bootstrap, unique, N)


def _code(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


class Endpoint(threading.Thread):
    """Asks a member's ``/health`` and ``/ready`` over and over, keeping every answer."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.answers: list[tuple[int, int]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.2):
            self.answers.append((_code(self.url + "/health"), _code(self.url + "/ready")))

    def stop(self) -> list[tuple[int, int]]:
        self.halt.set()
        self.join()
        return self.answers


def _status(bootstrap: str, suffix: str) -> list[MemberStatus]:
    return service_status({"bootstrap.servers": bootstrap}, f"eo-{suffix}", None).members


def _outage(broker: LocalBroker, seconds: float, graceful: bool) -> None:
    if graceful:
        assert broker.stop()
    else:
        sigkill_broker(broker)
    time.sleep(seconds)  # the outage itself: how long the broker stays away
    broker.start()


@pytest.mark.chaos
@pytest.mark.parametrize(("how", "seconds"), [("sigkill", 15), ("sigkill", 45), ("graceful", 10)],
                         ids=["sigkill-15s", "sigkill-45s", "graceful-10s"])
def test_a_member_waits_out_an_outage_of_its_broker_and_goes_on_exactly_once(
        broker: LocalBroker, unique: str, tmp_path: Path, services: list[ServiceProcess],
        how: str, seconds: float) -> None:
    """Short and long outages (the broker's restart adds 10-15 s, so the group takes the
    partitions away and gives them back every time), and a broker stopped cleanly: the
    member keeps its process, answers /health 200 and /ready 503 while the broker is away,
    says so once, and processes again when it is back, each input's effects committed once."""
    svc, out = _start(broker, unique, tmp_path, services)
    bootstrap = broker.bootstrap
    _feed(bootstrap, unique, 1, N // 2)
    wait_until(lambda: out.seen.drain() > N // 8, 120, "progress before the outage", svc.log_text)
    endpoint = Endpoint(svc.endpoint())
    endpoint.start()
    _outage(broker, seconds, graceful=how == "graceful")
    back = time.monotonic()
    assert svc.alive, f"the member exited during the outage:\n{svc.log_text()[-3000:]}"
    during = endpoint.stop()
    assert (200, 503) in during, f"/health and /ready during the outage: {sorted(set(during))}"
    assert all(health == 200 for health, _ in during), "the member is healthy: it waits for the cluster"
    _feed(bootstrap, unique, N // 2, N + 1)
    wait_until(lambda: out.seen.drain() >= N // 2, 120, "processing after the broker's return", svc.log_text)
    print(f"{how} {seconds} s: processing again {time.monotonic() - back:.1f} s after the broker answered")
    wait_until(out.complete, 180, "all outputs", lambda: f"{out.drain()}\n{svc.log_text()[-3000:]}")
    assert _code(svc.endpoint() + "/ready") == 200
    assert svc.stop() == 0 and svc.starts == 1
    log = svc.log_text()
    assert log.count("cannot be reached") == 1 and log.count("answers again after") == 1, log[-3000:]
    assert "rdkafka#" not in log, "the clients' own lines about the outage stay in the debug log"
    check_exactly_once(out, N, KEYS)
    out.close()
    check_final_state(bootstrap, unique, N, KEYS)


@pytest.mark.chaos
def test_an_outage_past_its_timeout_ends_the_member_with_one_line_and_nothing_is_lost(
        broker: LocalBroker, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    """With processing.broker_outage_timeout_ms=5000, a broker away for longer ends the member
    (exit 1, one ``error:`` line naming the setting); started again after the broker is back,
    it continues from its last checkpoint."""
    svc, out = _start(broker, unique, tmp_path, services, FW_PROCESSING__BROKER_OUTAGE_TIMEOUT_MS="5000")
    bootstrap = broker.bootstrap
    _feed(bootstrap, unique, 1, N // 2)
    wait_until(lambda: out.seen.drain() > N // 8, 120, "progress before the outage", svc.log_text)
    sigkill_broker(broker)
    assert svc.wait_exit(60) == 1
    errors = [line for line in svc.log_text().splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "broker_outage_timeout_ms" in errors[0] and "could not be reached" in errors[0], \
        svc.log_text()[-3000:]
    broker.start()
    svc.start()
    _feed(bootstrap, unique, N // 2, N + 1)
    wait_until(out.complete, 180, "all outputs after the restart", lambda: f"{out.drain()}\n{svc.log_text()[-3000:]}")
    assert svc.stop() == 0
    check_exactly_once(out, N, KEYS)
    out.close()


def _error_lines(svc: ServiceProcess) -> list[str]:
    return [line for line in svc.log_text().splitlines() if line.startswith("error:")]


@pytest.mark.chaos
@pytest.mark.parametrize("endpoint", [True, False], ids=["refused", "fenced"])
def test_two_members_with_one_instance_id_leave_one_running_and_a_one_line_error(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess], endpoint: bool) -> None:
    """A second process started with a running member's --instance-id (its own state
    directory): when the member's endpoint answers healthy, the second refuses to start;
    when it has none (observe disabled), the second joins and fences it, and the first exits.
    Either way one exits within seconds, non-zero, with one error line naming the id and the
    fix, the other does the work exactly once, and fw status shows the one left."""
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(f"numbers-{unique}", 4)])
    env = _env(kafka_bootstrap, unique)
    first_env = env if endpoint else {**env, "FW_OBSERVE__ENABLED": "false"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = ServiceProcess(TARGET, tmp_path / "a", "0", first_env)
    second = ServiceProcess(TARGET, tmp_path / "b", "0", env)
    services.append(first.start())
    out = EvenOddOutputs(kafka_bootstrap, unique, N)
    _feed(kafka_bootstrap, unique, 1, N // 2)
    wait_until(lambda: out.seen.drain() > N // 8, 120, "the first member's progress", first.log_text)
    services.append(second.start())
    loser, winner = (second, first) if endpoint else (first, second)
    wait_until(lambda: not loser.alive, 60, "one member's exit", loser.log_text)
    assert loser.wait_exit(5) == 1
    errors = _error_lines(loser)
    assert len(errors) == 1, loser.log_text()[-3000:]
    assert "instance id '0'" in errors[0] and "--instance-id" in errors[0], errors[0]
    assert ("is taken: a healthy member runs" if endpoint else "fenced this one") in errors[0], errors[0]
    _feed(kafka_bootstrap, unique, N // 2, N + 1)
    wait_until(out.complete, 180, "all outputs from the member left",
               lambda: f"{out.drain()}\n{winner.log_text()[-3000:]}")
    assert winner.alive and not _error_lines(winner)
    if endpoint:
        live = winner.endpoint().rsplit(":", 1)[1]
        assert [m.endpoint and m.endpoint.rsplit(":", 1)[1] for m in _status(kafka_bootstrap, unique)] == [live]
        assert _code(winner.endpoint() + "/health") == 200
    assert winner.stop() == 0
    check_exactly_once(out, N, KEYS)
    out.close()


@pytest.mark.chaos
def test_two_processes_started_at_once_with_one_instance_id_leave_one_running(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess]) -> None:
    """Two processes given one --instance-id at the same moment (each its own state directory)
    both join before either can find the other healthy, and fence each other's producer and
    static membership in turn. Within a minute one of them exits, non-zero, with one error
    line naming --instance-id; the other does the work, every input's effects committed once."""
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(f"numbers-{unique}", 4)])
    env = _env(kafka_bootstrap, unique)
    out = EvenOddOutputs(kafka_bootstrap, unique, N)
    _feed(kafka_bootstrap, unique, 1, N // 2)
    both = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        both.append(ServiceProcess(TARGET, tmp_path / name, "0", env))
    for svc in both:
        services.append(svc.start())
    wait_until(lambda: not all(svc.alive for svc in both), 120, "one of the two exits",
               lambda: "\n".join(svc.log_text()[-3000:] for svc in both))
    [loser] = [svc for svc in both if not svc.alive]
    [winner] = [svc for svc in both if svc is not loser]
    assert loser.wait_exit(5) == 1
    errors = _error_lines(loser)
    assert len(errors) == 1 and "--instance-id" in errors[0], loser.log_text()[-3000:]
    print(f"the process that exited said: {errors[0]}")
    _feed(kafka_bootstrap, unique, N // 2, N + 1)
    wait_until(out.complete, 180, "all outputs from the member left",
               lambda: f"{out.drain()}\n{winner.log_text()[-3000:]}")
    assert winner.alive and not _error_lines(winner), winner.log_text()[-3000:]
    assert winner.stop() == 0
    check_exactly_once(out, N, KEYS)
    out.close()
    check_final_state(kafka_bootstrap, unique, N, KEYS)
