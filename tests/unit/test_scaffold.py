"""`fw new`: names, the docker-compose.yml edit, and what the commands write (no broker).

The generated code's own tests, on a real broker, are in tests/integration/test_scaffold.py.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from framework import WatermarkStrategy
from framework.errors import ConfigError
from framework.scaffold import TEMPLATES, compose, framework_spec, new_service, prometheus
from framework.scaffold.names import service_names

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_TEXT = (ROOT / "docker-compose.yml").read_text()
PROMETHEUS = "deploy/prometheus/prometheus.yml"
PROMETHEUS_TEXT = (ROOT / PROMETHEUS).read_text()


# -- names ---------------------------------------------------------------------------------


def test_a_dashed_or_underscored_name_makes_the_same_service() -> None:
    for name in ("fraud-alerts", "fraud_alerts"):
        names = service_names(name)
        assert (names.package, names.service) == ("fraud_alerts", "fraud-alerts")
        assert names.target == "services.fraud_alerts.pipeline:pipeline"


@pytest.mark.parametrize(("name", "says"), [
    ("fraud alerts", "Kafka topic names cannot hold"),
    ("fraud/alerts", "Kafka topic names cannot hold"),
    ("9lives", "Python package name"),
    ("fraud.alerts", "Python package name"),
    ("Fraud", "capitals"),
    ("class", "Python keyword"),
    ("tests", "reserved"),
    ("", "empty"),
    ("x" * 101, "at most 100"),
])
def test_a_bad_name_is_refused_with_what_and_how_to_fix(name: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as caught:
        service_names(name)
    assert "\n" not in str(caught.value)


# -- docker-compose.yml --------------------------------------------------------------------


def test_an_added_entry_keeps_every_other_byte_and_looks_like_the_others() -> None:
    edited = compose.with_service(COMPOSE_TEXT, "fraud-alerts", "services.fraud_alerts.pipeline:pipeline")
    entry = ('  fraud-alerts:\n'
             '    <<: *service\n'
             '    build: {context: ., dockerfile: Dockerfile}\n'
             '    command: ["fw", "run", "services.fraud_alerts.pipeline:pipeline"]\n'
             '\n')
    assert entry in edited
    assert edited.replace(entry, "", 1) == COMPOSE_TEXT  # comments, anchors, quoting, order: unchanged
    assert edited.index("  fire-alarm:") < edited.index("  fraud-alerts:") < edited.index("  hashtags:")
    parsed = yaml.safe_load(edited)["services"]
    assert parsed["fraud-alerts"] == {**parsed["even-odd"],
                                      "command": ["fw", "run", "services.fraud_alerts.pipeline:pipeline"]}


@pytest.mark.parametrize("service", ["aaa", "zzz"])
def test_an_entry_first_or_last_keeps_the_comment_block_and_the_blank_lines(service: str) -> None:
    edited = compose.with_service(COMPOSE_TEXT, service, f"services.{service}.pipeline:pipeline")
    lines = edited.splitlines()
    header = lines.index(f"  {service}:")
    assert lines[header - 1] in ("", "  # from the image of the root Dockerfile; `command` names the pipeline to run.")
    if service == "aaa":  # right under the comment that introduces the service entries
        assert lines[header - 1].startswith("  # from the image")
        first = COMPOSE_TEXT.splitlines().index("  # from the image of the root Dockerfile; `command` names the pipeline to run.") + 1
        assert lines[header + 4:header + 6] == ["", COMPOSE_TEXT.splitlines()[first]]  # the former first entry
    else:  # last: a blank line, then the volumes
        assert lines[header + 4:header + 6] == ["", "volumes:"]
    assert [line for line in lines if line.startswith("#")] == \
        [line for line in COMPOSE_TEXT.splitlines() if line.startswith("#")]


def test_an_existing_entry_is_left_as_it_is_unless_replaced() -> None:
    once = compose.with_service(COMPOSE_TEXT, "fraud-alerts", "services.fraud_alerts.pipeline:pipeline")
    assert compose.with_service(once, "fraud-alerts", "services.fraud_alerts.pipeline:pipeline") == once
    assert compose.entry_matches(once, "fraud-alerts", "services.fraud_alerts.pipeline:pipeline")
    assert not compose.entry_matches(COMPOSE_TEXT, "even-odd", "services.other.pipeline:pipeline")
    replaced = compose.with_service(COMPOSE_TEXT, "even-odd", "services.other.pipeline:pipeline", replace=True)
    assert replaced == COMPOSE_TEXT.replace("services.even_odd.pipeline", "services.other.pipeline")


def test_a_file_without_the_shared_part_gets_a_complete_entry() -> None:
    edited = compose.with_service("services:\n  kafka:\n    image: apache/kafka:4.1.1\n", "counts",
                                  "services.counts.pipeline:pipeline")
    assert yaml.safe_load(edited)["services"]["counts"] == {
        "restart": "unless-stopped", "depends_on": {"kafka": {"condition": "service_healthy"}},
        "build": {"context": ".", "dockerfile": "Dockerfile"},
        "command": ["fw", "run", "services.counts.pipeline:pipeline"]}


def test_a_broken_compose_file_is_one_line_error() -> None:
    with pytest.raises(ConfigError, match="not valid YAML") as caught:
        compose.with_service("services: [\n", "x", "services.x.pipeline:pipeline")
    assert "\n" not in str(caught.value)


def test_a_new_entry_goes_among_the_services_never_among_the_broker_and_prometheus() -> None:
    """Prometheus moved after the services: a name that sorts last still goes before it."""
    doc = yaml.safe_load(COMPOSE_TEXT)
    moved = {**doc, "services": {**{k: v for k, v in doc["services"].items() if k != "prometheus"},
                                 "prometheus": doc["services"]["prometheus"]}}
    text = yaml.safe_dump(moved, sort_keys=False)
    for service in ("aaa", "zzz", "prometheus-alerts"):
        edited = yaml.safe_load(compose.with_service(text, service, "services.x.pipeline:pipeline"))
        names = list(edited["services"])
        ours = [n for n in names if n not in ("kafka", "prometheus")]
        assert names == ["kafka", *ours, "prometheus"], names
        assert ours == sorted(ours), ours
    edited = compose.with_service(COMPOSE_TEXT, "zzz", "services.zzz.pipeline:pipeline")
    assert list(yaml.safe_load(edited)["services"])[:2] == ["kafka", "prometheus"]


# -- deploy/prometheus/prometheus.yml ------------------------------------------------------


def test_a_new_target_keeps_every_other_byte_and_the_alphabetical_order() -> None:
    edited = prometheus.with_target(PROMETHEUS_TEXT, "fraud-alerts")
    line = "          - fraud-alerts:9400\n"
    assert line in edited and edited.replace(line, "", 1) == PROMETHEUS_TEXT
    targets = prometheus.targets_of(edited)
    assert targets == sorted(targets) and "fraud-alerts:9400" in targets
    assert yaml.safe_load(edited)["scrape_configs"][0]["static_configs"][0]["targets"] == targets
    assert prometheus.with_target(edited, "fraud-alerts") == edited  # there already: unchanged


def test_a_first_target_turns_an_empty_list_into_a_block_list() -> None:
    empty = PROMETHEUS_TEXT[:PROMETHEUS_TEXT.index("      - targets:")] + "      - targets: []\n"
    edited = prometheus.with_target(empty, "spend")
    assert edited == empty.replace("targets: []\n", "targets:\n          - spend:9400\n")
    assert prometheus.targets_of(prometheus.with_target(edited, "alerts")) == ["alerts:9400",
                                                                              "spend:9400"]


@pytest.mark.parametrize(("text", "says"), [
    ("scrape_configs: [\n", "not valid YAML"),
    ("global: {scrape_interval: 15s}\n", "no scrape job 'services'"),
    ("scrape_configs:\n  - job_name: other\n", "no scrape job 'services'"),
    ("scrape_configs:\n  - job_name: services\n", "has no static targets list"),
    ("scrape_configs:\n  - job_name: services\n    dns_sd_configs: [{names: [x]}]\n",
     "has no static targets list"),
])
def test_a_prometheus_file_without_the_services_job_is_a_one_line_error(text: str,
                                                                        says: str) -> None:
    with pytest.raises(ConfigError, match=says) as caught:
        prometheus.with_target(text, "fraud-alerts")
    assert "\n" not in str(caught.value) and PROMETHEUS in str(caught.value)


# -- what the commands write ---------------------------------------------------------------


def _project(tmp_path: Path, *, with_prometheus: bool = True) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (tmp_path / "services").mkdir()
    (tmp_path / "docker-compose.yml").write_text(COMPOSE_TEXT)
    if with_prometheus:
        (tmp_path / PROMETHEUS).parent.mkdir(parents=True)
        (tmp_path / PROMETHEUS).write_text(PROMETHEUS_TEXT)
    return tmp_path


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _fw(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "framework.cli", *args], check=False, cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("template", TEMPLATES)
def test_each_template_writes_its_service_schemas_tests_and_compose_entry(tmp_path: Path, template: str) -> None:
    root = _project(tmp_path)
    result = new_service(root, "fraud-alerts", template)
    written = set(result.written)
    assert {"services/__init__.py", "services/fraud_alerts/__init__.py", "services/fraud_alerts/pipeline.py",
            "tests/topology/test_fraud_alerts.py", "tests/integration/test_fraud_alerts.py",
            "docker-compose.yml"} <= written
    schemas = sorted(p for p in written if p.startswith("schemas/"))
    assert len(schemas) >= 2 and all(p.startswith("schemas/fraud_alerts.") and p.endswith(".avsc") for p in schemas)
    pipeline = (root / "services/fraud_alerts/pipeline.py").read_text()
    assert "fw run services.fraud_alerts.pipeline:pipeline" in pipeline  # the docstring says how to run it
    assert "{{" not in pipeline and "}}" not in pipeline
    assert PROMETHEUS in written and result.overwritten == []
    expected = prometheus.with_target(PROMETHEUS_TEXT, "fraud-alerts")
    assert (root / PROMETHEUS).read_text() == expected


_ENCODINGS = """
import importlib, sys
from framework.serde import AvroSerde
for package in sys.argv[1:]:
    pipeline = importlib.import_module(f"services.{package}.pipeline").pipeline
    for topic in [*(s.topic for s in pipeline.sources()), *pipeline.sink_topics()]:
        for side, serde in (("key", topic.key_serde), ("value", topic.value_serde)):
            if isinstance(serde, AvroSerde):
                print(package, topic.name, side, serde.encoding, serde.describe())
"""


def test_every_avro_topic_of_a_generated_service_is_single_object(tmp_path: Path) -> None:
    """Never raw Avro, which reads another schema's record as its own: the single-object
    encoding names each record's schema and needs no registry running."""
    root = _project(tmp_path)
    for template in TEMPLATES:
        new_service(root, f"gen-{template}", template)
    done = subprocess.run([sys.executable, "-c", _ENCODINGS, *(f"gen_{t}" for t in TEMPLATES)], cwd=root,
                          env={**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{ROOT}"}, check=False,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = [line.split(" ", 4) for line in done.stdout.splitlines()]
    topics = {(package, topic) for package, topic, *_ in rows}
    assert len(topics) == 17  # 2 per template, 3 for join and enrich, a late topic for windowed
    assert all(side == "value" and encoding == "single-object" for _, _, side, encoding, _ in rows), rows
    assert all(serde.startswith("Avro (single-object, schema gen_") for *_, serde in rows), rows


def test_without_a_prometheus_file_none_is_written(tmp_path: Path) -> None:
    root = _project(tmp_path, with_prometheus=False)
    result = new_service(root, "fraud-alerts")
    assert PROMETHEUS not in result.written and not (root / "deploy").exists()


def test_the_same_command_twice_changes_nothing_and_says_so(tmp_path: Path) -> None:
    root = _project(tmp_path)
    first = _fw(root, "new", "service", "fraud-alerts", "--template", "windowed")
    assert first.returncode == 0, first.stderr
    before = _tree(root)
    again = _fw(root / "services", "new", "service", "fraud_alerts", "--template", "windowed")  # from below the root
    assert again.returncode == 0, again.stderr
    assert "nothing changed" in again.stdout
    assert _tree(root) == before


def test_other_content_is_a_conflict_and_force_overwrites_it(tmp_path: Path) -> None:
    root = _project(tmp_path)
    assert _fw(root, "new", "service", "fraud-alerts").returncode == 0
    pipeline = root / "services/fraud_alerts/pipeline.py"
    generated = pipeline.read_text()
    pipeline.write_text(generated + "# edited\n")
    before = _tree(root)

    refused = _fw(root, "new", "service", "fraud-alerts", "--template", "stateless")
    assert refused.returncode != 0
    assert refused.stderr.startswith("error: service 'fraud-alerts' exists with other content in ")
    assert "--force" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert _tree(root) == before  # nothing written, not even the files that would be new

    forced = _fw(root, "new", "service", "fraud-alerts", "--force")
    assert forced.returncode == 0, forced.stderr
    assert "overwrote services/fraud_alerts/pipeline.py" in forced.stdout
    assert pipeline.read_text() == generated


@pytest.mark.parametrize(("args", "says"), [
    (["fraud alerts"], "error: service name 'fraud alerts' has ' '"),
    (["9lives"], "error: service name '9lives' does not make a Python package name"),
    (["fraud#alerts"], "error: service name 'fraud#alerts' has '#'"),
    (["even-odd"], "error: service 'even-odd' exists with other content in services/even_odd/pipeline.py"),
    (["x", "--template", "nope"], "Invalid value for '--template'"),
])
def test_bad_names_are_one_line_errors_without_a_traceback(tmp_path: Path, args: list[str], says: str) -> None:
    root = _project(tmp_path)
    (root / "services/even_odd").mkdir()
    (root / "services/even_odd/pipeline.py").write_text("pipeline = None\n")  # an existing service
    before = _tree(root)
    done = _fw(root, "new", "service", *args)
    assert done.returncode != 0
    assert says in done.stderr
    assert "Traceback" not in done.stderr
    if not says.startswith("Invalid"):  # click's usage errors add a usage line; ours are one line
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert _tree(root) == before


def test_outside_a_project_the_error_says_where_to_run_it(tmp_path: Path) -> None:
    done = _fw(tmp_path, "new", "service", "fraud-alerts")
    assert done.returncode != 0
    assert done.stderr.startswith("error: no project here") and "fw new project" in done.stderr


def test_a_new_project_twice_changes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "shop"
    first = _fw(tmp_path, "new", "project", "shop", "--framework", "kstreamflow @ file:///opt/kstreamflow")
    assert first.returncode == 0, first.stderr
    before = _tree(target)
    assert {"pyproject.toml", "README.md", ".gitignore", "Dockerfile", "docker-compose.yml", "scripts/test",
            "scripts/demo", "scripts/ci", "tests/conftest.py", "services/spend/pipeline.py",
            "tests/topology/test_spend.py", "tests/integration/test_spend.py"} <= set(before)
    assert '"kstreamflow @ file:///opt/kstreamflow"' in (target / "pyproject.toml").read_text()
    assert os.access(target / "scripts/test", os.X_OK)
    assert prometheus.targets_of((target / PROMETHEUS).read_text()) == ["spend:9400"]
    again = _fw(tmp_path, "new", "project", "shop", "--framework", "kstreamflow @ file:///opt/kstreamflow")
    assert again.returncode == 0 and "nothing changed" in again.stdout
    assert _tree(target) == before


def test_the_framework_dependency_points_where_this_framework_was_installed_from() -> None:
    """This checkout is installed editable: its direct_url.json names the directory."""
    spec = framework_spec()
    name, _, url = spec.partition(" @ ")
    assert name == "kstreamflow" and url.startswith("file://"), spec
    assert (Path(url.removeprefix("file://")) / "pyproject.toml").is_file()


def test_a_new_project_deploys_like_this_repository(tmp_path: Path) -> None:
    """The shared service part (healthcheck, endpoint port) and the Prometheus entry of a
    generated project's compose file are this repository's; its Prometheus configuration
    is this repository's with the project's services as targets; `fw new service` there
    adds to both files."""
    target = tmp_path / "shop"
    made = _fw(tmp_path, "new", "project", "shop", "--framework", "kstreamflow @ file:///x")
    assert made.returncode == 0, made.stderr
    ours = yaml.safe_load(COMPOSE_TEXT)
    theirs = yaml.safe_load((target / "docker-compose.yml").read_text())
    assert theirs["x-service"] == ours["x-service"]
    assert theirs["services"]["prometheus"] == ours["services"]["prometheus"]
    assert theirs["volumes"] == ours["volumes"]
    assert theirs["services"]["spend"]["healthcheck"] == ours["x-service"]["healthcheck"]
    config = yaml.safe_load((target / PROMETHEUS).read_text())
    expected = yaml.safe_load(PROMETHEUS_TEXT)
    expected["scrape_configs"][0]["static_configs"][0]["targets"] = ["spend:9400"]
    assert config == expected

    added = _fw(target, "new", "service", "alerts", "--template", "stateless")
    assert added.returncode == 0, added.stderr
    assert f"wrote {PROMETHEUS}" in added.stdout
    assert prometheus.targets_of((target / PROMETHEUS).read_text()) == ["alerts:9400", "spend:9400"]
    services = list(yaml.safe_load((target / "docker-compose.yml").read_text())["services"])
    assert services == ["kafka", "prometheus", "alerts", "spend"]


def test_every_place_that_lists_the_templates_lists_them_all(tmp_path: Path) -> None:
    helped = _fw(tmp_path, "new", "service", "--help")
    assert helped.returncode == 0, helped.stderr
    assert all(f"{t}:" in helped.stdout for t in TEMPLATES), helped.stdout
    made = _fw(tmp_path, "new", "project", "shop", "--framework", "kstreamflow @ file:///opt/kstreamflow")
    assert made.returncode == 0, made.stderr
    assert f"--template {'|'.join(TEMPLATES)}" in (tmp_path / "shop/README.md").read_text()
    for doc in ("docs/tutorial.md", "docs/scaffolding.md"):
        text = (ROOT / doc).read_text()
        missing = [t for t in TEMPLATES if f"`{t}`" not in text and f"--template {t}`" not in text]
        assert not missing, f"{doc} does not list {missing}"


def test_the_enrich_template_says_its_first_run_shows_nothing_until_the_table_moves_and_how_to_see_output(
        tmp_path: Path) -> None:
    root = _project(tmp_path)
    made = _fw(root, "new", "service", "shop", "--template", "enrich")
    assert made.returncode == 0, made.stderr
    said = " ".join(made.stdout.split())
    assert ("First run: shop-enriched stays empty until the customers' watermark passes each order's time. "
            "To see output, send a later customer update") in said, made.stdout
    assert "to every partition of shop-customers, or give the customers' table an idle_timeout_ms" in said
    assert "services/shop/pipeline.py" in said
    pipeline = " ".join((root / "services/shop/pipeline.py").read_text().split())
    assert "stays empty until the customers' watermark passes the orders' times" in pipeline
    # the knob named is the one the pipeline's watermark strategy takes
    assert "idle_timeout_ms" in inspect.signature(WatermarkStrategy.bounded_out_of_orderness).parameters
    assert "idle_timeout_ms" in (ROOT / "docs/tables.md").read_text()
    keyed = _fw(root, "new", "service", "totals", "--template", "keyed")
    assert keyed.returncode == 0 and "First run" not in keyed.stdout, keyed.stdout
