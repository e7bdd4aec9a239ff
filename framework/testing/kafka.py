"""A service against a real Kafka broker, from a test or a demo script.

``ServiceRun`` runs a service the way it is deployed, ``fw run`` in a process of its own,
on topics of its own: the pipeline is built with a ``suffix`` appended to its service and
topic names, so every run starts from empty topics and a new consumer group. It creates
the service's topics, produces input and reads the committed output, encoding and decoding
with the pipeline's own serdes::

    with ServiceRun("services.totals.pipeline:build_pipeline", bootstrap, tmp_path,
                    suffix="-t1") as run:
        run.produce("totals-purchases", [("o-1", {"user": "ann", "amount": 1250}, 1000)])
        assert run.read_by_key("totals-totals", count=1) == {"ann": [...]}

Topic names are given as the pipeline names them without the suffix. The builder is a
function ``suffix -> Pipeline`` named ``module:function``; ``fw run`` reaches it through
``framework.testing.kafka:suffixed_pipeline``, which reads ``FW_TEST_PIPELINE`` and
``FW_TEST_SUFFIX``. The pytest fixtures that give a broker are in
``framework.testing.fixtures``.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from framework.config import Config, KafkaConfig
from framework.errors import ConfigError, KafkaClientError
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from framework.kafka.io import read_committed
from framework.pipeline import Pipeline, Topic
from framework.produce import produce
from framework.runtime.topics import ensure_service_topics

__all__ = ["ServiceRun", "load_builder", "suffixed_pipeline"]

PIPELINE_VAR = "FW_TEST_PIPELINE"
SUFFIX_VAR = "FW_TEST_SUFFIX"
STOP_TIMEOUT_S = 60.0


def load_builder(target: str) -> Callable[[str], Pipeline]:
    """Import ``module:function`` (a function taking the suffix and returning a Pipeline)."""
    module_name, _, attr = target.partition(":")
    if not attr:
        raise ConfigError(f"expected module:function, got {target!r} "
                          "(e.g. services.totals.pipeline:build_pipeline)")
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # services import from the working directory, as with `fw run`
    builder = getattr(importlib.import_module(module_name), attr, None)
    if not callable(builder):
        raise ConfigError(f"{module_name} has no function {attr!r} that builds a pipeline")
    return builder  # type: ignore[no-any-return]


def suffixed_pipeline() -> Pipeline:
    """The pipeline ``fw run`` runs for a ``ServiceRun``: ``$FW_TEST_PIPELINE`` called with
    ``$FW_TEST_SUFFIX``."""
    target = os.environ.get(PIPELINE_VAR)
    if not target:
        raise ConfigError(f"{PIPELINE_VAR} is not set; it names the builder (module:function) to run")
    return load_builder(target)(os.environ.get(SUFFIX_VAR, ""))


class ServiceRun:
    """One service run as ``fw run`` on a real broker, for the span of a ``with`` block.

    ``builder``: ``module:function`` building the pipeline from a suffix. ``workdir``: where
    the state directory and the log file go. ``root``: the project directory, the working
    directory of ``fw run`` (default: the current one). ``partitions``: create the sources
    with this many partitions (default: the pipeline's). ``env``: more environment
    variables for the service. Checkpoints every 100 ms, so outputs become visible soon.
    Leaving the block stops the service with SIGTERM (a final checkpoint) and raises
    ``AssertionError`` if it did not exit cleanly.
    """

    def __init__(self, builder: str, bootstrap: str, workdir: Path, *, suffix: str = "",
                 root: Path | None = None, partitions: int | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.builder, self.bootstrap, self.suffix = builder, bootstrap, suffix
        self.root = (root or Path.cwd()).resolve()
        self.workdir = Path(workdir)
        self.log_path = self.workdir / "service.log"
        self.partitions = partitions
        self.extra_env = dict(env or {})
        self.pipeline = load_builder(builder)(suffix)
        self.proc: subprocess.Popen[bytes] | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.create_topics()
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        code = self.stop()
        if exc_type is None and code != 0:
            raise AssertionError(f"`fw run` of {self.pipeline.name} exited with {code}\n{self.log_tail()}")

    def create_topics(self) -> None:
        """Create the service's topics (sources first, with ``partitions`` when given)."""
        settings = {"bootstrap.servers": self.bootstrap}
        if self.partitions is not None:
            sources = [TopicSpec(s.topic.name, self.partitions, dict(s.topic.config))
                       for s in self.pipeline.sources()]
            ensure_topics(admin_client(settings), sources)
        ensure_service_topics(self.pipeline, settings)

    def start(self) -> None:
        """Start ``fw run`` in its own process; its output goes to ``log_path``."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        pythonpath = os.pathsep.join(p for p in (str(self.root), os.environ.get("PYTHONPATH", "")) if p)
        env = {
            **os.environ,
            "FW_BOOTSTRAP_SERVERS": self.bootstrap,
            "FW_STATE_DIR": str(self.workdir / "state"),
            "FW_PROCESSING__CHECKPOINT_INTERVAL_MS": "100",
            "FW_KAFKA_CONSUMER__SESSION_TIMEOUT_MS": "6000",
            PIPELINE_VAR: self.builder,
            SUFFIX_VAR: self.suffix,
            "PYTHONPATH": pythonpath,
            **self.extra_env,
        }
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "framework.cli", "run", "framework.testing.kafka:suffixed_pipeline",
                 "--instance-id", "run-0"],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.root,
            )

    def stop(self) -> int | None:
        """SIGTERM and wait (SIGKILL after a minute); the exit code, None if never started."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def log_tail(self, chars: int = 4000) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return text[-chars:]

    # -- records -----------------------------------------------------------------------

    def topic(self, name: str) -> Topic:
        """The pipeline's topic ``name`` (as named without the suffix), with its serdes."""
        topics = [s.topic for s in self.pipeline.sources()] + self.pipeline.sink_topics()
        topics.append(self.pipeline.dead_letter)
        for t in topics:
            if t.name in (name + self.suffix, name):
                return t
        known = sorted({t.name.removesuffix(self.suffix) for t in topics})
        raise ConfigError(f"{name!r} is not a topic of {self.pipeline.name}; its topics: {known}")

    def produce(self, topic: str, records: Iterable[tuple[Any, Any, int]]) -> int:
        """Produce ``(key, value, timestamp_ms)`` records, encoded with the topic's serdes, and
        wait until the broker has them all; returns how many."""
        cluster = Config(kafka=KafkaConfig(bootstrap_servers=self.bootstrap))  # as create_topics: no security
        return produce(self.topic(topic), records, config=cluster)

    def read(self, topic: str, count: int, timeout_s: float = 60.0) -> list[tuple[Any, Any]]:
        """The committed ``(key, value)`` records of ``topic`` once at least ``count`` are
        visible (each partition's in order), decoded. ``AssertionError`` with the service's
        log when they do not all come within ``timeout_s``."""
        t = self.topic(topic)
        try:
            raw = read_committed(self.bootstrap, t.name, count, timeout_s)
        except KafkaClientError as exc:
            state = "running" if self.proc is not None and self.proc.poll() is None else "not running"
            raise AssertionError(f"{exc} (the service is {state})\n{self.log_tail()}") from exc
        key_de = t.key_serde.bind(t.name, True).deserialize
        value_de = t.value_serde.bind(t.name, False).deserialize
        return [(None if k is None else key_de(k), None if v is None else value_de(v)) for k, v in raw]

    def read_by_key(self, topic: str, count: int, timeout_s: float = 60.0) -> dict[Any, list[Any]]:
        """Like ``read``, as each key's values in order (Kafka keeps a key's records in order)."""
        out: dict[Any, list[Any]] = defaultdict(list)
        for key, value in self.read(topic, count, timeout_s):
            out[key].append(value)
        return dict(out)
