"""The Kubernetes manifests of `fw new` (deploy/kubernetes/) and of this repository: each one
valid against the Kubernetes API's schemas (kubernetes-validate, offline, strict), and what
they say true of the framework and the image: the instance id, the settings, the port and
the paths the endpoint serves, the state directory (no cluster, no broker)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from framework.cli.replay import replay as replay_command
from framework.cli.run import run as run_command
from framework.config import Config, ProcessingConfig
from framework.errors import ConfigError
from framework.observe.server import DEFAULT_PORT, StatusServer
from framework.runtime.service import _SETTLE_AT_STOP_S
from framework.scaffold import kubernetes, new_project, new_service
from framework.scaffold.names import service_names
from framework.scaffold.render import render_tree
from tests.containers.kube import expand

ROOT = Path(__file__).resolve().parents[2]
DIRECTORY = Path(kubernetes.DIRECTORY)
# The oldest Kubernetes release the manifests are meant for, and the newest the validator knows.
VERSIONS = ("1.30.0", kubernetes_validate.latest_version())


def _documents(root: Path) -> dict[str, list[dict[str, Any]]]:
    """Every manifest file below ``root/deploy/kubernetes`` but the kustomization, parsed."""
    found = {}
    for path in sorted((root / DIRECTORY).rglob("*.yaml")):
        if path.name != "kustomization.yaml":
            found[path.relative_to(root).as_posix()] = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return found


def _one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == kind]
    return doc


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new project (service spend) and a service added to it."""
    root = tmp_path_factory.mktemp("k8s") / "shop"
    new_project(root, framework="kstreamflow @ file:///opt/kstreamflow")
    new_service(root, "fraud-alerts", "stateless")
    return root


def _projects(shop: Path) -> list[tuple[Path, str]]:
    return [(shop, "spend"), (shop, "fraud-alerts"), (ROOT, "even-odd")]


# -- valid ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("where", ["project", "repository"])
def test_every_manifest_is_valid_kubernetes(shop: Path, where: str, version: str) -> None:
    root = shop if where == "project" else ROOT
    documents = _documents(root)
    kinds = sorted(d["kind"] for docs in documents.values() for d in docs)
    services = len([p for p in documents if p.startswith(f"{DIRECTORY}/services/")])
    assert services >= 2 and kinds.count("StatefulSet") == services, kinds
    assert kinds.count("Job") == services and kinds.count("ConfigMap") == 1
    for path, docs in documents.items():
        for doc in docs:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{path}: {doc['kind']} is not valid for Kubernetes {version}: {exc}")


def test_the_validator_refuses_what_kubernetes_would() -> None:
    """Strict: an unknown field is an error, so a misspelt probe or mount cannot pass."""
    docs = _documents(ROOT)[f"{DIRECTORY}/services/even-odd.yaml"]
    statefulset = _one(docs, "StatefulSet")
    statefulset["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = []
    with pytest.raises(kubernetes_validate.ValidationError, match="readinessProbes"):
        kubernetes_validate.validate(statefulset, VERSIONS[0], strict=True)


# -- true of the framework and the image ------------------------------------------------------


def _container(root: Path, service: str) -> tuple[dict[str, Any], dict[str, Any]]:
    statefulset = _one(_documents(root)[f"{DIRECTORY}/services/{service}.yaml"], "StatefulSet")
    [container] = statefulset["spec"]["template"]["spec"]["containers"]
    return statefulset, container


def _environment(root: Path, container: dict[str, Any], pod: str, namespace: str) -> dict[str, str]:
    """The container's environment as the kubelet makes it: the ConfigMap's data, then each
    `env` entry in order, field references filled from the pod."""
    config = _one(_documents(root)[f"{DIRECTORY}/config.yaml"], "ConfigMap")
    [source] = container["envFrom"]
    assert source["configMapRef"]["name"] == config["metadata"]["name"]
    env = dict(config["data"])
    fields = {"metadata.name": pod, "metadata.namespace": namespace}
    for entry in container["env"]:
        if "valueFrom" in entry:
            env[entry["name"]] = fields[entry["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            env[entry["name"]] = expand(entry["value"], env)
    return env


@pytest.mark.parametrize("at", [0, 1, 2])
def test_each_pod_runs_the_service_with_its_name_as_the_static_instance_id(shop: Path, at: int) -> None:
    root, service = _projects(shop)[at]
    statefulset, container = _container(root, service)
    names = service_names(service)
    env = _environment(root, container, f"{service}-1", "prod")
    command = [expand(arg, env) for arg in container["command"]]
    assert command == ["fw", "run", names.target, "--instance-id", f"{service}-1"]
    assert (root / Path(*names.target.partition(":")[0].split("."))).with_suffix(".py").is_file()
    assert any("--instance-id" in p.opts for p in run_command.params)
    assert statefulset["metadata"]["name"] == service and len(service) <= kubernetes.MAX_NAME


def test_a_pod_name_reference_left_unexpanded_is_refused() -> None:
    """podman kube play passes `$(POD_NAME)` on as written (tests/integration/test_kube_play.py):
    members sharing that id would fence each other's transactions without end."""
    said = CliRunner().invoke(run_command, ["services.sensors.pipeline:pipeline", "--instance-id", "$(POD_NAME)"])
    assert said.exit_code == 2
    assert "'$(POD_NAME)' holds a $(VAR) reference nobody expanded" in said.output
    with pytest.raises(ConfigError, match=r"observe.advertised_host=.* holds a \$\(VAR\) reference"):
        Config.load(observe={"advertised_host": "$(POD_NAME).sensors.$(POD_NAMESPACE).svc"})


@pytest.mark.parametrize("at", [0, 1, 2])
def test_the_environment_is_settings_the_framework_reads(shop: Path, at: int) -> None:
    """Loaded as a member loads it: every FW_ variable known (an unknown one is an error), and
    each lands where the manifest means it to."""
    root, service = _projects(shop)[at]
    _, container = _container(root, service)
    env = _environment(root, container, f"{service}-0", "prod")
    config = Config.load(env=env)
    assert config.kafka.bootstrap_servers == "kafka:9092"
    assert config.state.dir == Path(kubernetes.STATE_DIR)
    assert config.observe.port == DEFAULT_PORT
    assert config.observe.advertised_host == f"{service}-0.{service}.prod.svc"
    assert env["FW_SCHEMAS_DIR"] == kubernetes.SCHEMAS_DIR


@pytest.mark.parametrize("at", [0, 1, 2])
def test_probes_and_scraping_ask_the_endpoint_where_it_answers(shop: Path, at: int) -> None:
    root, service = _projects(shop)[at]
    statefulset, container = _container(root, service)
    [port] = container["ports"]
    assert port == {"name": "http", "containerPort": DEFAULT_PORT}
    probes = {kind: container[f"{kind}Probe"]["httpGet"] for kind in ("startup", "liveness", "readiness")}
    assert probes == {"startup": {"path": "/health", "port": "http"},
                      "liveness": {"path": "/health", "port": "http"},
                      "readiness": {"path": "/ready", "port": "http"}}
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300
    annotations = statefulset["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"prometheus.io/scrape": "true", "prometheus.io/port": str(DEFAULT_PORT),
                           "prometheus.io/path": "/metrics"}


class _Member:
    """What a member's endpoint shows: healthy, not ready."""

    def metrics_text(self) -> bytes:
        return b"fw_ready 0\n"

    def health(self) -> tuple[bool, dict[str, Any]]:
        return True, {"status": "ok"}

    def ready(self) -> tuple[bool, dict[str, Any]]:
        return False, {"ready": False}

    def snapshot(self) -> dict[str, Any]:
        return {"members": []}

    def history_doc(self) -> dict[str, Any] | None:
        return None


def test_the_endpoint_serves_the_paths_the_probes_and_prometheus_ask() -> None:
    """/health 200 and /ready 503 for a healthy member still restoring; /metrics the text."""
    server = StatusServer(_Member(), "127.0.0.1", 0).start()

    def status(path: str) -> int:
        try:
            with urllib.request.urlopen(f"{server.url}{path}", timeout=10) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    try:
        assert [status(p) for p in ("/health", "/ready", "/metrics")] == [200, 503, 200]
    finally:
        server.close()


def _dockerfile_facts(text: str) -> dict[str, str]:
    env = dict(re.findall(r"(FW_[A-Z_]+)=(\S+)", text))
    [uid] = re.findall(r"useradd [^\n]*--uid (\d+)", text)
    [made] = re.findall(r"mkdir -p (\S+)", text)
    return {**env, "uid": uid, "mkdir": made}


@pytest.mark.parametrize("at", [0, 2])
def test_the_state_volume_is_mounted_where_the_image_keeps_state_and_its_user_can_write(shop: Path,
                                                                                        at: int) -> None:
    root, service = _projects(shop)[at]
    statefulset, container = _container(root, service)
    image = _dockerfile_facts((root / "Dockerfile").read_text())
    env = {e["name"]: e.get("value") for e in container["env"]}
    [mount] = container["volumeMounts"]
    [claim] = statefulset["spec"]["volumeClaimTemplates"]
    assert mount["name"] == claim["metadata"]["name"]
    assert mount["mountPath"] == env["FW_STATE_DIR"] == image["FW_STATE_DIR"] == image["mkdir"]
    assert env["FW_SCHEMAS_DIR"] == image["FW_SCHEMAS_DIR"]
    security = statefulset["spec"]["template"]["spec"]["securityContext"]
    assert security == {"runAsNonRoot": True, "runAsUser": int(image["uid"]), "fsGroup": int(image["uid"])}
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]


@pytest.mark.parametrize("at", [0, 2])
def test_members_find_each_other_and_stop_in_time(shop: Path, at: int) -> None:
    root, service = _projects(shop)[at]
    docs = _documents(root)[f"{DIRECTORY}/services/{service}.yaml"]
    statefulset, headless, budget = (_one(docs, k) for k in ("StatefulSet", "Service", "PodDisruptionBudget"))
    labels = statefulset["spec"]["template"]["metadata"]["labels"]
    assert statefulset["spec"]["serviceName"] == headless["metadata"]["name"]
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    assert headless["spec"]["selector"] == labels == statefulset["spec"]["selector"]["matchLabels"]
    assert headless["spec"]["ports"] == [{"name": "http", "port": DEFAULT_PORT, "targetPort": "http"}]
    assert budget["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": labels}}
    # settle, then the final checkpoint's three transactional calls, each bounded by the revoke timeout
    needed = _SETTLE_AT_STOP_S + 3 * ProcessingConfig().revoke_timeout_ms / 1000
    assert statefulset["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= needed
    resources = _container(root, service)[1]["resources"]
    assert set(resources) == {"requests", "limits"}


@pytest.mark.parametrize("at", [0, 2])
def test_the_replay_job_runs_fw_replay_of_the_service_by_hand_only(shop: Path, at: int) -> None:
    root, service = _projects(shop)[at]
    [job] = _documents(root)[f"{DIRECTORY}/replay/{service}.yaml"]
    assert job["kind"] == "Job" and job["metadata"]["generateName"] == f"{service}-replay-"
    spec = job["spec"]["template"]["spec"]
    assert spec["restartPolicy"] == "Never"
    [container] = spec["containers"]
    command = container["command"]
    assert command[:3] == ["fw", "replay", service_names(service).target]
    options = {o for p in replay_command.params for o in p.opts}
    assert {c for c in command[3:] if c.startswith("--")} <= options
    assert "--output" in command and command[command.index("--output") + 1] == "none"
    kustomization = yaml.safe_load((root / kubernetes.KUSTOMIZATION).read_text())
    assert not any(r.startswith("replay/") for r in kustomization["resources"])


# -- fw new ---------------------------------------------------------------------------------------


def test_the_kustomization_lists_the_config_and_every_service_and_names_the_image(shop: Path) -> None:
    kustomization = yaml.safe_load((shop / kubernetes.KUSTOMIZATION).read_text())
    assert kustomization["resources"] == ["config.yaml", "services/fraud-alerts.yaml", "services/spend.yaml"]
    for resource in kustomization["resources"]:
        assert (shop / DIRECTORY / resource).is_file()
    [image] = kustomization["images"]
    _, container = _container(shop, "spend")
    assert container["image"] == f"{image['name']}:latest" and image["name"] == "shop"


def test_fw_new_service_adds_one_line_to_the_kustomization_and_nothing_twice(shop: Path) -> None:
    before = (shop / kubernetes.KUSTOMIZATION).read_text()
    edited = kubernetes.with_resource(before, "orders")
    line = "  - services/orders.yaml\n"
    assert line in edited and edited.replace(line, "", 1) == before
    assert kubernetes.resources_of(edited)[1:] == sorted(kubernetes.resources_of(edited)[1:])
    assert kubernetes.with_resource(edited, "orders") == edited
    again = new_service(shop, "fraud-alerts", "stateless")
    assert not again.changed


def test_fw_new_says_what_it_wrote_and_how_to_deploy_it(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def fw(cwd: Path, *args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "framework.cli", "new", *args], check=False, cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    made = fw(tmp_path, "project", "shop", "--framework", "kstreamflow @ file:///x")
    for path in (kubernetes.KUSTOMIZATION, kubernetes.CONFIG, f"{DIRECTORY}/services/spend.yaml",
                 f"{DIRECTORY}/replay/spend.yaml"):
        assert f"wrote {path}\n" in made, made
    added = fw(tmp_path / "shop", "service", "alerts", "--template", "stateless")
    for path in (kubernetes.KUSTOMIZATION, f"{DIRECTORY}/services/alerts.yaml", f"{DIRECTORY}/replay/alerts.yaml"):
        assert f"wrote {path}\n" in added, added
    assert "kubectl apply -k deploy/kubernetes" in added
    assert kubernetes.resources_of((tmp_path / "shop" / kubernetes.KUSTOMIZATION).read_text()) == [
        "config.yaml", "services/alerts.yaml", "services/spend.yaml"]


def test_a_project_without_deploy_kubernetes_gets_no_manifests(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (tmp_path / "services").mkdir()
    made = new_service(tmp_path, "alerts", "stateless")
    assert made.changed and not (tmp_path / "deploy" / "kubernetes").exists()


def test_a_kustomization_without_resources_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no `resources` list") as caught:
        kubernetes.with_resource("kind: Kustomization\n", "alerts")
    assert "\n" not in str(caught.value)


def test_a_name_too_long_for_a_statefulset_is_refused_with_the_limit() -> None:
    with pytest.raises(ConfigError, match=f"at most {kubernetes.MAX_NAME}") as caught:
        kubernetes.manifests(service_names("a" * (kubernetes.MAX_NAME + 1)), "shop")
    assert "\n" not in str(caught.value)


# -- this repository -----------------------------------------------------------------------------


def _service_dirs() -> list[str]:
    return sorted(p.name.replace("_", "-") for p in (ROOT / "services").iterdir()
                  if p.is_dir() and (p / "__init__.py").exists())


def test_this_repository_deploys_each_of_its_services_as_fw_new_would() -> None:
    """deploy/kubernetes/ is what `fw new project` and `fw new service` write for this
    repository's project and services (so `fw new service` here adds to it alike)."""
    project = kubernetes.project_of(ROOT)
    assert project == "kstreamflow"
    context = {"project": project, "framework_spec": "", "package": "", "service": "", "target": "",
               "templates": ()}
    expected = {k: v for k, v in render_tree("project", context).items() if k.startswith(f"{DIRECTORY}/")}
    kustomization = expected.pop(kubernetes.KUSTOMIZATION)
    for service in _service_dirs():
        expected.update(kubernetes.manifests(service_names(service), project))
        kustomization = kubernetes.with_resource(kustomization, service)
    found = {p.relative_to(ROOT).as_posix(): p.read_text() for p in sorted((ROOT / DIRECTORY).rglob("*"))
             if p.is_file()}
    assert yaml.safe_load(found.pop(kubernetes.KUSTOMIZATION)) == yaml.safe_load(kustomization)
    assert sorted(found) == sorted(expected), "files missing or left over in deploy/kubernetes/"
    stale = [p for p in expected if found[p] != expected[p]]
    assert not stale, (f"not as fw new writes them: {stale}; write each one's text from "
                       "framework.scaffold.kubernetes.manifests(service_names(NAME), 'kstreamflow')")
