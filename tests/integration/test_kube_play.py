"""The repository's Kubernetes manifest of the sensors service, run by ``podman kube play``.

``deploy/kubernetes/services/sensors.yaml`` (what ``fw new`` writes, from
``framework/scaffold/templates/kubernetes/``) is a headless Service, a StatefulSet of two
members and a PodDisruptionBudget. Debian's podman 4.3.1 runs none of those kinds, so
``tests.containers.kube.statefulset_pods`` derives what the StatefulSet would create: Pods
``sensors-0`` and ``sensors-1`` with their claims, the container spec, environment, probes and
volume mounts as written, changed only where podman 4.3.1 cannot run them (that module's
docstring lists each change and why). The test itself changes two values more:

- ``FW_OBSERVE__ADVERTISED_HOST`` is ``$(POD_NAME)``, not ``$(POD_NAME).sensors.$(POD_NAMESPACE).svc``:
  without the headless Service no such name exists; on a podman network with DNS
  (aardvark-dns) a pod is found by its name (``sensors-1`` resolves as ``sensors-1.dns.podman``);
- the ConfigMap's ``FW_BOOTSTRAP_SERVERS`` is the test's broker, as a user points it at theirs;
  and the image is the one built here from the ``Dockerfile`` (``tests.containers.images``).

The broker is the test's own, on the host (the framework's ``LocalBroker``), with a second
listener on the podman network's gateway, advertised as ``host.containers.internal`` (podman
writes that name into each pod's ``/etc/hosts``): a pod cannot reach the host's loopback, where
the broker's first listener is. The pods start first, since the gateway's address exists once
a container runs on the network; the members wait for the broker (``kafka.connect_timeout_ms``).

Podman turns only the liveness probe into a healthcheck, and one that cannot pass here:
``curl -f http://localhost:0/health`` (the named port ``http`` becomes 0, the image has no
curl), and without systemd nothing runs it. The test asks every probe's path and port (the
named port resolved from the manifest) itself, over HTTP at the pod's address, as the kubelet
does.

Then: the sensors demo's readings produced, member ``sensors-0`` asked for the rolling mean of
every sensor (``/stores/mean-temperature/<sensor>``), those of ``sensors-1``'s partitions
included (forwarded to it at its advertised name), the same of ``sensors-1``, and the answers
compared with the sums and counts of the readings. Everything it created is removed at the
end, pass or fail.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from framework.broker.local import ExtraListener, LocalBroker
from framework.config import Config
from framework.demo import expected_results, make_readings
from framework.observe.endpoint import ask_json
from framework.produce import produce
from services.sensors import pipeline as sensors
from tests.containers.engine import machine_lock, missing_tools, podman
from tests.containers.images import STACK_PROJECT, build_services, service_images
from tests.containers.kube import statefulset_pods
from tests.integration.harness import wait_until
from tests.ports import worker_port, worker_port_pair

ROOT = Path(__file__).resolve().parents[2]
SERVICE = "sensors"
MANIFEST = ROOT / "deploy/kubernetes/services" / f"{SERVICE}.yaml"
CONFIG_MAP = ROOT / "deploy/kubernetes/config.yaml"
NETWORK = "fw-kube"
STORE = "mean-temperature"
READINGS, SENSORS = 2000, 16
HOST_NAME = "host.containers.internal"  # the host, in a pod's /etc/hosts (the network's gateway)


@pytest.fixture
def pods(tmp_path: Path) -> Iterator[tuple[dict[str, str], str, float]]:
    """The two members running in podman, on the network ``fw-kube``, and the broker they
    use: yields each pod's address, the broker's bootstrap address on the host, and the moment
    ``kube play`` began. Everything is removed afterwards, pass or fail."""
    missing = missing_tools()
    assert not missing, (f"the container tests need Debian's {', '.join(missing)}: scripts/test installs "
                         f"them (apt-get install {' '.join(missing)})")
    with machine_lock("kube-play"):
        build_services(STACK_PROJECT, log=lambda line: print(f"[images] {line}"))
        manifest = list(yaml.safe_load_all(MANIFEST.read_text()))
        names = [f"{SERVICE}-{n}" for n in range(2)]
        _remove(names)  # what a killed earlier run left behind
        played = tmp_path / "pods.yaml"
        broker: LocalBroker | None = None
        try:
            podman("network", "create", NETWORK)
            gateway = json.loads(podman("network", "inspect", NETWORK).stdout)[0]["subnets"][0]["gateway"]
            listener = ExtraListener(gateway, worker_port(), HOST_NAME)
            config_map = yaml.safe_load(CONFIG_MAP.read_text())
            config_map["data"]["FW_BOOTSTRAP_SERVERS"] = f"{HOST_NAME}:{listener.port}"
            played.write_text(yaml.safe_dump_all(statefulset_pods(
                manifest, config_map, service_images(STACK_PROJECT)[SERVICE],
                {"FW_OBSERVE__ADVERTISED_HOST": "$(POD_NAME)"}), sort_keys=False))
            started = time.monotonic()
            # The pods first: their bridge, and so the gateway the broker listens on, exists
            # once a container runs on the network. The members wait for the broker meanwhile
            # (kafka.connect_timeout_ms, 60 s).
            podman("kube", "play", "--network", NETWORK, str(played))
            print(f"[kube] play returned after {time.monotonic() - started:.1f}s")
            broker = LocalBroker(tmp_path / "broker", worker_port_pair(), extra_listener=listener)
            broker.start()
            print(f"[kube] broker answers {time.monotonic() - started:.1f}s after play")
            yield {name: address(name) for name in names}, broker.bootstrap, started
        finally:
            for name in names:
                print(logs(name))
            if played.exists():
                podman("kube", "down", str(played), check=False)
            _remove(names)
            if broker is not None:
                broker.wipe()


def _remove(pods: list[str]) -> None:
    podman("pod", "rm", "--force", *pods, check=False)
    podman("volume", "rm", "--force", *(f"state-{pod}" for pod in pods), check=False)
    podman("network", "rm", "--force", NETWORK, check=False)


def address(pod: str) -> str:
    """The pod's address on the network (its infra container's, which its containers share)."""
    template = f'{{{{(index .NetworkSettings.Networks "{NETWORK}").IPAddress}}}}'
    return podman("inspect", "--format", template, f"{pod}-{SERVICE}").stdout.decode().strip()


def logs(pod: str, lines: int = 40) -> str:
    proc = podman("logs", "--tail", str(lines), f"{pod}-{SERVICE}", check=False)
    return f"--- {pod} log:\n{(proc.stdout + proc.stderr).decode(errors='replace')}"


def probes(manifest: list[dict[str, Any]]) -> dict[str, tuple[int, str]]:
    """Each probe of the StatefulSet's container: its port (a named port resolved) and path."""
    container = next(d for d in manifest if d["kind"] == "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    named = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    out = {}
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = container[kind]["httpGet"]
        out[kind] = (named.get(get["port"], get["port"]), get["path"])
    return out


def answers_200(url: str) -> bool:
    return ask_json(url, 5.0)[0] == 200


def answers(url: str, sensors_: list[str]) -> dict[str, tuple[int, Any]]:
    """The member's answer for each sensor's rolling mean (``/stores/mean-temperature/<sensor>``)."""
    return {s: ask_json(f"{url}/stores/{STORE}/{urllib.parse.quote(s)}", 15.0) for s in sensors_}


def answers_all(url: str, expected: dict[str, tuple[int, float]]) -> bool:
    return all(code == 200 and holds(body, *expected[s]) for s, (code, body) in answers(url, list(expected)).items())


def shown(url: str, expected: dict[str, tuple[int, float]], pod: str) -> str:
    return json.dumps(answers(url, list(expected)), indent=1)[-3000:] + logs(pod)


# The services' image may have to be built (a cold run: minutes); a warm run takes under a minute.
@pytest.mark.timeout(1200)
def test_the_sensors_manifest_runs_in_podman_and_members_forward_live_queries(
        pods: tuple[dict[str, str], str, float]) -> None:
    addresses, bootstrap, started = pods
    manifest = list(yaml.safe_load_all(MANIFEST.read_text()))
    port = probes(manifest)["readinessProbe"][0]
    urls = {pod: f"http://{ip}:{port}" for pod, ip in addresses.items()}

    # 1. Both members ready (assigned and restored), each probe's path and port answering 200.
    for pod, url in urls.items():
        wait_until(partial(answers_200, f"{url}/ready"), 180, f"{pod}'s /ready", partial(logs, pod))
    print(f"[kube] both members ready {time.monotonic() - started:.1f}s after play")
    for pod, ip in addresses.items():
        for kind, (probe_port, path) in probes(manifest).items():
            assert answers_200(f"http://{ip}:{probe_port}{path}"), f"{pod}'s {kind} ({path})"

    # 2. The readings; each member asked for every sensor's rolling mean until all are there.
    readings = make_readings(READINGS, SENSORS)
    config = Config.load(kafka={"bootstrap_servers": bootstrap})
    produce(sensors.pipeline.sources()[0].topic, ((r["id"], r, r["timestamp"]) for r in readings), config=config)
    # Per sensor the store keeps the readings' sum and count (the mean is their quotient).
    expected = {s: (count, mean) for s, (count, mean, _) in expected_results(readings, sensors.RISE_C).items()}
    for pod, url in urls.items():
        wait_until(partial(answers_all, url, expected), 180, f"{pod} to answer every sensor's mean",
                   partial(shown, url, expected, pod))
    print(f"[kube] every mean answered by both members {time.monotonic() - started:.1f}s after play")

    # 3. Each member answered keys of the other's partitions too: forwarded to the owner (at
    # the name it advertises), which read them from its store (`member` is the reader's id).
    for pod, url in urls.items():
        got = answers(url, list(expected))
        assert all(code == 200 and holds(body, *expected[s]) for s, (code, body) in got.items()), got
        readers = {body["member"] for _, body in got.values()}
        assert readers == set(urls), f"{pod}'s answers were read by {readers}: {got}"
        assert all(body["entries"][0]["source"] == "active" for _, body in got.values())


def holds(body: Any, count: int, mean: float) -> bool:
    """Whether a store answer holds the sum and count of ``count`` readings of mean ``mean``."""
    if not isinstance(body, dict) or not body.get("entries"):
        return False
    total, n = body["entries"][0]["value"]
    return bool(n == count and total / n == pytest.approx(mean))
