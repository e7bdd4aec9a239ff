"""``fw doctor``: is this machine, and the cluster it is configured for, ready to run,
test and replay services?

Every check is a small function that returns ``Check`` results (name, status, detail,
and for a failure or a warning the fix). The checks run concurrently, each in a daemon
thread with a time limit: one that does not finish in time is a failure of its own and
the doctor goes on, so an unreachable broker costs about five seconds, not a hang.
``run`` yields the results in a fixed order, as soon as each is known.

The broker's clock: Kafka has no request that tells a client the broker's time, and the
broker stamps its own time only on records it appends to a topic configured with
``message.timestamp.type=LogAppendTime``. So the clock check writes three small records to
the topic ``__fw_doctor`` (created on first use: 1 partition, 10 minutes' retention) and
reads the broker's append time from each acknowledgement. With the local send time ``s``
and acknowledgement time ``r``, the skew is ``append - (s + r) / 2``, exact to within
``(r - s) / 2``; the record with the tightest round trip is kept. ``--skip-clock`` leaves
the cluster unwritten.
"""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from framework.broker.local import LocalBroker, external_bootstrap
from framework.config import Config
from framework.errors import FrameworkError
from framework.home import fw_home
from framework.kafka import probe
from framework.pipeline.definition import Pipeline
from framework.serde.registry import SchemaRegistryClient
from framework.state.directory import unwritable, writable_fix

MIN_PYTHON = (3, 11)
MIN_JAVA = 17
DISK_WARN_BYTES = 1 << 30  # 1 GiB
DISK_FAIL_BYTES = 100 << 20  # 100 MiB
SKEW_WARN_MS = 1_000.0
SKEW_FAIL_MS = 30_000.0
CLUSTER_TIME_S = 12.0  # every call to the cluster within one deadline
_GRACE_S = 3.0  # a check's thread gets this much more than its own deadlines before it is given up
_HUNG_FIX = "look for what it waits on (the network, a hung java, mvn or python) and run again"


class Status(str, Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"  # not applicable here (nothing configured) or not checkable (cluster unreachable)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report; ``fix`` says what to do about a failure or warning."""

    name: str
    status: Status
    detail: str
    fix: str | None = None


@dataclass(frozen=True)
class Step:
    """Checks that run together (the cluster's share one connection): the names of the
    lines they produce, in order, the function, and its time limit in seconds."""

    names: tuple[str, ...]
    run: Callable[[], list[Check]]
    limit_s: float


# -- pure judgements -------------------------------------------------------------------------


def java_major(output: str) -> int | None:
    """The major version in ``java -version`` output: ``"1.8.0_292"`` -> 8, ``"17.0.15"`` -> 17,
    ``"21-ea"`` -> 21; None when no version line is found."""
    found = re.search(r'version "(\d+)(?:\.(\d+))?[^"]*"', output)
    if found is None:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major


def disk_status(free_bytes: int) -> Status:
    """Fail below 100 MiB free, warn below 1 GiB."""
    if free_bytes < DISK_FAIL_BYTES:
        return Status.FAIL
    return Status.WARN if free_bytes < DISK_WARN_BYTES else Status.OK


def skew_status(skew_ms: float) -> Status:
    """Fail when the clocks differ by more than 30 s, warn above 1 s (either direction)."""
    if abs(skew_ms) > SKEW_FAIL_MS:
        return Status.FAIL
    return Status.WARN if abs(skew_ms) > SKEW_WARN_MS else Status.OK


def skew_of(samples: Sequence[probe.ClockSample]) -> tuple[float, float]:
    """The broker's clock minus the local one, in ms, from the sample with the tightest
    round trip, and the bound of its error (half that round trip)."""
    best = min(samples, key=lambda s: s.received_ms - s.sent_ms)
    return best.append_ms - (best.sent_ms + best.received_ms) / 2, (best.received_ms - best.sent_ms) / 2


def exit_code(checks: Sequence[Check]) -> int:
    """1 when any check failed; warnings and skipped checks do not count."""
    return 1 if any(c.status is Status.FAIL for c in checks) else 0


def size(n: int) -> str:
    """Bytes as ``87 MiB`` below a GiB, else ``3.4 GiB``."""
    return f"{n / (1 << 20):.0f} MiB" if n < 1 << 30 else f"{n / (1 << 30):.1f} GiB"


def _ms(ms: float) -> str:
    if ms < 10:
        return f"{ms:.1f} ms"
    return f"{ms:.0f} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


# -- the machine -----------------------------------------------------------------------------


def check_python() -> list[Check]:
    try:
        ours = f"kstreamflow {importlib.metadata.version('kstreamflow')}"
    except importlib.metadata.PackageNotFoundError:
        ours = "kstreamflow (not installed: run from the source tree)"
    have = ".".join(map(str, sys.version_info[:3]))
    if sys.version_info < MIN_PYTHON:
        return [Check("python", Status.FAIL, f"Python {have}, {ours}",
                      f"use Python {'.'.join(map(str, MIN_PYTHON))} or later (scripts/bootstrap.sh makes .venv)")]
    return [Check("python", Status.OK, f"Python {have} ({sys.executable}), {ours}")]


def _run(cmd: list[str], timeout_s: float) -> str:
    """stdout and stderr of ``cmd``, ANSI colours removed (``mvn`` prints them)."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    return re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)


def check_java() -> list[Check]:
    fix = f"install a Java {MIN_JAVA}+ JDK (e.g. apt-get install openjdk-17-jdk-headless) and put java on PATH"
    java = shutil.which("java")
    if java is None:
        return [Check("java", Status.FAIL, "no java on PATH (the local broker and Spark run on it)", fix)]
    text = _run([java, "-version"], 10.0)
    major = java_major(text)
    line = next((ln for ln in text.splitlines() if "version" in ln), text.strip()[:80])
    if major is None:
        return [Check("java", Status.FAIL, f"cannot read the version of {java}: {line!r}", fix)]
    if major < MIN_JAVA:
        return [Check("java", Status.FAIL, f"Java {major} at {java}; {MIN_JAVA} or later is needed", fix)]
    return [Check("java", Status.OK, f"{line.strip()} ({java})")]


def _kafka_jars_cached() -> bool:
    return (LocalBroker().jar_dir / ".complete").exists()


def _connector_dir() -> Path | None:
    """Where Spark's Kafka connector of the installed pyspark is cached (None: no pyspark)."""
    try:
        return fw_home() / "spark-kafka" / importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        return None


def _connector_cached(target: Path | None) -> bool:
    return target is not None and (target / ".complete").exists() and any(target.glob("spark-sql-kafka-0-10*.jar"))


def check_maven() -> list[Check]:
    mvn = shutil.which("mvn")
    if mvn is None:
        cached = _kafka_jars_cached() and _connector_cached(_connector_dir())
        status = Status.WARN if cached else Status.FAIL
        needed = "no jar needs fetching now" if cached else "jars are still to be fetched"
        return [Check("maven", status, f"no mvn on PATH (it fetches jars from Maven Central; {needed})",
                      "install Apache Maven (e.g. apt-get install maven)")]
    first = _run([mvn, "-v"], 15.0).strip().splitlines()
    return [Check("maven", Status.OK, f"{first[0] if first else 'mvn'} ({mvn})")]


def check_kafka_jars(bootstrap: str | None) -> list[Check]:
    """The server jars of the local broker; only a warning when the configured cluster is
    another one (``fw broker start`` is then not needed)."""
    local = LocalBroker()
    if _kafka_jars_cached():
        return [Check("kafka jars", Status.OK, f"Kafka server jars in {local.jar_dir}")]
    status = Status.FAIL if bootstrap in (None, local.bootstrap) else Status.WARN
    return [Check("kafka jars", status, f"the local broker's jars are not in {local.jar_dir}",
                  "fw broker fetch (resolves them with mvn from Maven Central)")]


def check_spark() -> list[Check]:
    # In a child process: importing Spark here would load it into fw (only replay/ may).
    code = "import importlib, sys; print(importlib.import_module(sys.argv[1]).__version__)"
    proc = subprocess.run([sys.executable, "-c", code, "pyspark"], capture_output=True, text=True, timeout=30,
                          check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return [Check("pyspark", Status.FAIL, f"pyspark does not import: {last}",
                      "pip install the framework with its dependencies (scripts/bootstrap.sh does)"),
                Check("spark-kafka", Status.SKIP, "skipped: no pyspark")]
    version = proc.stdout.strip()
    target = _connector_dir()
    checks = [Check("pyspark", Status.OK, f"pyspark {version}")]
    if _connector_cached(target):
        return [*checks, Check("spark-kafka", Status.OK, f"Spark's Kafka connector in {target}")]
    # a warning: the first fw replay fetches it itself (a fresh machine is not broken)
    return [*checks, Check("spark-kafka", Status.WARN, f"Spark's Kafka connector {version} is not in {target} yet",
                           "the first fw replay resolves it with mvn from Maven Central; "
                           "fw replay SERVICE --dry-run does so without running Spark")]


def check_disk(state_dir: Path) -> list[Check]:
    """``state_dir`` is writable by this user (created if missing, as a member creates it:
    ``framework.state.directory``), and the free space on its file system."""
    why = unwritable(state_dir)
    if why is not None:
        return [Check("disk", Status.FAIL, why, writable_fix(state_dir))]
    existing = state_dir.resolve()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    status = disk_status(free)
    detail = f"{size(free)} free under {state_dir.resolve()} (state.dir)"
    if status is Status.OK:
        return [Check("disk", status, detail)]
    return [Check("disk", status, detail, f"free space on {existing}'s file system, or set FW_STATE_DIR to a "
                                          "directory on a larger one (RocksDB state and its compactions live there)")]


def check_registry() -> list[Check]:
    try:
        client = SchemaRegistryClient.from_env(timeout_s=5.0)
    except FrameworkError as exc:
        return [Check("registry", Status.FAIL, str(exc), "set both FW_SCHEMA_REGISTRY_USER and _PASSWORD, or neither")]
    if client is None:
        return [Check("registry", Status.SKIP, "no schema registry configured (FW_SCHEMA_REGISTRY_URL); skipped")]
    try:
        subjects = client.subjects()
    except FrameworkError as exc:
        return [Check("registry", Status.FAIL, str(exc),
                      "check that the registry runs (a local one: fw registry start) and that "
                      "FW_SCHEMA_REGISTRY_URL (and _USER/_PASSWORD) name it")]
    finally:
        client.close()
    return [Check("registry", Status.OK, f"{client.url} answers: {len(subjects)} subjects")]


# -- the cluster -----------------------------------------------------------------------------

CLUSTER_NAMES = ("cluster", "broker", "transactions", "durability", "clock")


def cluster_names(service: Pipeline | None) -> tuple[str, ...]:
    return (*CLUSTER_NAMES, "topics") if service is not None else CLUSTER_NAMES


def check_cluster(config: Config, clock: bool = True, service: Pipeline | None = None) -> list[Check]:
    """Reachable; its brokers and controller; transactions possible; the broker's clock; and
    how the cluster keeps ``service``'s topics, when one is named."""
    settings = config.kafka.client_settings()
    deadline = probe.Deadline(CLUSTER_TIME_S)
    try:
        facts = probe.cluster_facts(settings, deadline)
    except FrameworkError as exc:
        return [_unreachable(settings, str(exc)),
                *(Check(name, Status.SKIP, "skipped: the cluster is not reachable")
                  for name in cluster_names(service)[1:])]
    protocol = settings.get("security.protocol", "plaintext").upper()
    clock_check = _clock(settings, deadline) if clock else Check("clock", Status.SKIP, "skipped (--skip-clock)")
    checks = [Check("cluster", Status.OK, f"{settings['bootstrap.servers']} ({protocol}) answers: cluster "
                                          f"{facts.cluster_id}"),
              _brokers(facts), _transactions(facts), durability(facts, config.kafka.producer), clock_check]
    if service is not None:
        try:
            kept = probe.topic_replication(settings, service_topics(service), deadline)
        except FrameworkError as exc:
            checks.append(Check("topics", Status.WARN, f"cannot describe the topics of {service.name}: {exc}",
                                "grant Describe and DescribeConfigs on them to this principal"))
        else:
            checks.append(topic_durability(service.name, kept, len(facts.brokers)))
    return checks


def service_topics(pipeline: Pipeline) -> list[str]:
    """Every topic ``pipeline`` reads or writes: sources, repartition topics, changelogs, dead
    letters, sinks and global tables' topics, each once, in that order."""
    names = [*pipeline.input_topics(),
             *(pipeline.changelog_topic(s) for s in pipeline.changelogged_stores()), pipeline.dead_letter.name,
             *(t.name for t in pipeline.sink_topics()), *(g.topic.name for g in pipeline.global_tables())]
    return list(dict.fromkeys(names))


def topic_durability(service: str, kept: Mapping[str, probe.TopicReplication | None], brokers: int) -> Check:
    """The replication factor and ``min.insync.replicas`` of each of a service's topics
    (None: not created yet); a warning when, on two brokers or more, one of them keeps a
    write on one node only."""
    present = {t: r for t, r in kept.items() if r is not None}
    absent = [t for t, r in kept.items() if r is None]
    shapes: dict[tuple[int, int | None], int] = {}
    for r in present.values():
        shapes[(r.replicas, r.min_insync)] = shapes.get((r.replicas, r.min_insync), 0) + 1
    shown = ", ".join(f"{n} at RF {rf}/min ISR {'unknown' if isr is None else isr}"
                      for (rf, isr), n in sorted(shapes.items()))
    detail = f"{service}: {_count(len(present), 'topic')}" + (f" ({shown})" if shown else "")
    if absent:
        detail += f"; not created yet (its first run creates them): {', '.join(absent)}"
    lax = []
    if brokers >= 2:
        for topic, r in present.items():
            if r.replicas < 2:
                lax.append(f"{topic} RF {r.replicas}")
            elif r.min_insync is not None and r.min_insync < 2:
                lax.append(f"{topic} min.insync.replicas={r.min_insync}")
    if not lax:
        return Check("topics", Status.OK, detail)
    return Check("topics", Status.WARN, f"{detail}: on {_count(brokers, 'broker')} an acknowledged write can be lost "
                                        f"with one node: {'; '.join(lax)}",
                 "add replicas with Kafka's kafka-reassign-partitions.sh and set min.insync.replicas=2 with "
                 "kafka-configs.sh --alter --entity-type topics --entity-name TOPIC --add-config "
                 "min.insync.replicas=2 (a service's own topics are created with kafka.internal_replication_factor "
                 "and kafka.internal_min_insync_replicas)")


def _unreachable(settings: dict[str, str], reason: str) -> Check:
    bootstrap = settings["bootstrap.servers"]
    protocol = settings.get("security.protocol", "plaintext").upper()
    detail = f"cannot reach {bootstrap} ({protocol}): {reason}"
    if bootstrap == LocalBroker().bootstrap and external_bootstrap():
        # fw broker start leaves an external cluster alone, and FW_BOOTSTRAP_SERVERS names one
        fix = "start the local broker: env -u FW_BOOTSTRAP_SERVERS fw broker start"
    elif bootstrap == LocalBroker().bootstrap:
        fix = "start the local broker: fw broker start (or set FW_BOOTSTRAP_SERVERS to your cluster)"
    else:
        fix = (f"check that the brokers at {bootstrap} (kafka.bootstrap_servers, FW_BOOTSTRAP_SERVERS) are up "
               f"and reachable from here, that their listener speaks {protocol} (security.protocol in "
               "FW_KAFKA_SECURITY__*) and that the credentials are right")
    return Check("cluster", Status.FAIL, detail, fix)


def _brokers(facts: probe.ClusterFacts) -> Check:
    # No client request reports a broker's software version: the ApiVersions answer is not
    # exposed by confluent-kafka, and Kafka 4 removed inter.broker.protocol.version.
    return Check("broker", Status.OK, f"{_count(len(facts.brokers), 'broker')} {', '.join(facts.brokers)}; controller "
                                      f"{facts.controller or 'unknown'} (the broker version is not visible to clients)")


def _transactions(facts: probe.ClusterFacts) -> Check:
    names = probe.TRANSACTION_SETTINGS
    if facts.configs_error is not None:
        return Check("transactions", Status.WARN, f"cannot read {' and '.join(names)}: {facts.configs_error}",
                     "grant DescribeConfigs on the cluster to this principal, or check those settings by hand")
    rf, isr = (facts.broker_configs[n] for n in names)
    count = len(facts.brokers)
    detail = f"{_count(count, 'broker')}; {names[0]}={rf}, {names[1]}={isr}"
    if count >= rf and count >= isr:
        return Check("transactions", Status.OK, detail)
    return Check("transactions", Status.FAIL, f"{detail}: the transaction log cannot be created, so exactly_once "
                                              "cannot commit", f"set {names[0]} and {names[1]} to at most {count} "
                                                               "in the brokers' configuration, or add brokers "
                                                               "(at_least_once needs no transactions)")


def durability(facts: probe.ClusterFacts, producer: Mapping[str, str]) -> Check:
    """Whether an acknowledged write survives a node's loss: on a cluster of two brokers or
    more, the replication new topics get (the framework's internal ones among them, unless
    ``kafka.internal_*`` says otherwise), the transaction log's min ISR, and the producer's
    ``acks`` and idempotence (``kafka.producer``)."""
    count = len(facts.brokers)
    lax = [f"kafka.producer {key}={producer[key]}" for key, safe in (("acks", ("all", "-1")),
                                                                       ("enable.idempotence", ("true",)))
           if key in producer and str(producer[key]).lower() not in safe]
    if count < 2 and not lax:
        return Check("durability", Status.OK, "one broker: nothing is replicated (production clusters have three or "
                                              "more brokers)")
    configs = facts.broker_configs
    rf, isr = (configs.get(n) for n in probe.DURABILITY_SETTINGS)
    txn_isr = configs.get(probe.TRANSACTION_SETTINGS[1])
    if count >= 2:
        if rf is not None and rf < 2:
            lax.append(f"default.replication.factor={rf} (new topics, the service's own among them, on one node)")
        if isr is not None and isr < 2 and (rf or 0) >= 2:
            lax.append(f"min.insync.replicas={isr} (a write acknowledged by one node alone)")
        if txn_isr is not None and txn_isr < 2:
            lax.append(f"transaction.state.log.min.isr={txn_isr}")
    shown = ", ".join(f"{n}={configs[n]}" for n in probe.DURABILITY_SETTINGS if n in configs)
    detail = f"{_count(count, 'broker')}" + (f"; {shown}" if shown else "")
    if not lax:
        return Check("durability", Status.OK, detail)
    return Check("durability", Status.WARN, f"{detail}: an acknowledged write can be lost with one node: "
                                            f"{'; '.join(lax)}",
                 "set default.replication.factor=3, min.insync.replicas=2 and transaction.state.log.min.isr=2 in "
                 "the brokers' configuration (or kafka.internal_replication_factor and "
                 "kafka.internal_min_insync_replicas for the service's own topics), and leave acks and "
                 "enable.idempotence out of kafka.producer")


def _clock(settings: dict[str, str], deadline: probe.Deadline) -> Check:
    try:
        skew, bound = skew_of(probe.clock_samples(settings, deadline))
    except FrameworkError as exc:
        return Check("clock", Status.WARN, f"cannot sample the broker's clock: {exc}",
                     f"allow this principal to create and write {probe.CLOCK_TOPIC}, or run with --skip-clock")
    status = skew_status(skew)
    side = "ahead of" if skew >= 0 else "behind"
    detail = f"the broker's clock is {_ms(abs(skew))} {side} this machine's (±{_ms(bound)})"
    if status is Status.OK:
        return Check("clock", status, detail)
    return Check("clock", status, detail, "synchronise both clocks with NTP (chrony, timedatectl set-ntp true): "
                                          "records carry this machine's time, which the broker's retention "
                                          "measures against its own")


# -- running them ----------------------------------------------------------------------------


def load_config(config_file: Path | None) -> tuple[Check, Config | None]:
    try:
        config, origins = Config.load_with_origins(config_file)
    except FrameworkError as exc:
        return Check("config", Status.FAIL, str(exc), "correct that setting (in FW_CONFIG's file or FW_* variables)"), None
    source = f"file {config_file}" if config_file else "defaults and FW_* variables"
    bootstrap = f"{config.kafka.bootstrap_servers} ({origins['kafka.bootstrap_servers']})"
    return Check("config", Status.OK, f"from {source}: bootstrap {bootstrap}, "
                                      f"state.dir {config.state.dir}, {config.processing.guarantee}"), config


def steps(config: Config | None, clock: bool = True, service: Pipeline | None = None) -> list[Step]:
    """Every check, in the order of the report; those that need a valid configuration are
    skipped without one. ``service``: its topics are checked too."""
    out = [Step(("python",), check_python, 5.0), Step(("java",), check_java, 12.0),
           Step(("maven",), check_maven, 17.0),
           Step(("kafka jars",), lambda: check_kafka_jars(config.kafka.bootstrap_servers if config else None), 5.0)]
    if config is not None:
        out.append(Step(cluster_names(service), lambda: check_cluster(config, clock, service), CLUSTER_TIME_S))
    else:
        out.append(Step(cluster_names(service), lambda: [Check(n, Status.SKIP, "skipped: no valid configuration")
                                                         for n in cluster_names(service)], 1.0))
    out += [Step(("registry",), check_registry, 8.0), Step(("pyspark", "spark-kafka"), check_spark, 32.0)]
    if config is not None:
        out.append(Step(("disk",), lambda: check_disk(config.state.dir), 5.0))
    return out


def run(todo: Sequence[Step]) -> Iterator[Check]:
    """Start every step at once; yield their results in order, each as soon as it is known.
    A step that outlives its limit (plus a grace) fails each of its lines."""
    started = time.monotonic()
    runners = [_Runner(step) for step in todo]
    for runner in runners:
        runner.start()
    for runner, step in zip(runners, todo, strict=True):
        runner.join(max(started + step.limit_s + _GRACE_S - time.monotonic(), 0.0))
        yield from runner.results()


class _Runner(threading.Thread):
    # Daemon: a call that ignores its own timeout must not keep the process alive.
    def __init__(self, step: Step) -> None:
        super().__init__(daemon=True, name=f"doctor-{step.names[0]}")
        self.step = step
        self._results: list[Check] | None = None

    def run(self) -> None:
        try:
            self._results = self.step.run()
        except subprocess.TimeoutExpired as exc:  # java -version, mvn -v or the pyspark import hung
            self._results = [Check(n, Status.FAIL, f"{' '.join(map(str, exc.cmd))} gave no answer within "
                                                   f"{exc.timeout:g}s", _HUNG_FIX) for n in self.step.names]
        except Exception as exc:  # noqa: BLE001 - a check's own bug is its failure, not the doctor's
            self._results = [Check(n, Status.FAIL, f"the check raised {type(exc).__name__}: {exc}",
                                   "report this as a bug of fw doctor") for n in self.step.names]

    def results(self) -> list[Check]:
        if self._results is None:
            limit = self.step.limit_s + _GRACE_S
            return [Check(n, Status.FAIL, f"no result within {limit:g}s", _HUNG_FIX)
                    for n in self.step.names]
        return self._results


# -- the report ------------------------------------------------------------------------------

SYMBOLS = {Status.OK: "✓", Status.WARN: "!", Status.FAIL: "✗", Status.SKIP: "-"}
ASCII_SYMBOLS = {Status.OK: "ok", Status.WARN: "!", Status.FAIL: "x", Status.SKIP: "-"}
NAME_WIDTH = max(len(n) for n in ("python", "config", "kafka jars", *CLUSTER_NAMES, "spark-kafka"))


def line(check: Check, symbols: dict[Status, str] = SYMBOLS) -> str:
    """``✗ cluster      cannot reach ... Fix: fw broker start``: the fix on the same line."""
    text = f"{symbols[check.status]} {check.name:<{NAME_WIDTH}}  {check.detail}"
    return f"{text}. Fix: {check.fix}" if check.fix and check.status in (Status.FAIL, Status.WARN) else text


def summary(checks: Sequence[Check]) -> str:
    failed = sum(c.status is Status.FAIL for c in checks)
    warned = sum(c.status is Status.WARN for c in checks)
    if not failed and not warned:
        return "all checks passed"
    return f"{failed} failed, {_count(warned, 'warning')}"

