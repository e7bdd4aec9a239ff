"""``fw demo --service NAME``: any service that declares a demo, run end to end on a broker.

A service declares its demo in its own package, ``services/<package>/demo.py``, as
``DEMO = ServiceDemo(...)``: which source topic (or topics) gets the generated input, which
output topics are read back, an input generator, a direct computation of the expected results
over that input, and a function that reduces the outputs to the same shape. This runner
is generic:

1. Build the service's pipeline (``services/<package>/pipeline.py``, ``build_pipeline``)
   with a fresh suffix on its service and topic names, so every run starts from empty
   topics and a new consumer group, and create its topics (the sources with
   ``ServiceDemo.partitions``: event-time demos use one, so the last record moves every
   task's watermark).
2. Produce the generated records to their source topics, encoded with each topic's serdes
   and stamped with their event time (a ``None`` value is a tombstone).
3. Run the service in this process (``framework.runtime.service.Service``, exactly once,
   RocksDB state in a temporary directory) until it has consumed every record
   (``consumed_per_record`` times each: 2 when a ``key_by`` repartitions), then stop it;
   its final checkpoint commits the last transaction.
4. Read the outputs with a ``read_committed`` consumer, print a summary, and compare
   ``observe(outputs)`` with ``expected(records)``: equal, or ``FrameworkError`` naming the
   keys that differ. The run's topics are deleted afterwards unless ``keep_topics``.
"""

from __future__ import annotations

import importlib
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from framework.config import Config
from framework.errors import ConfigError, FrameworkError
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from framework.kafka.io import delete_topics, read_committed
from framework.pipeline import Pipeline, Topic
from framework.produce import produce
from framework.runtime.service import Service
from framework.runtime.topics import ensure_service_topics

__all__ = ["InputRecord", "OutputRecord", "ServiceDemo", "TopicRecord", "demo_packages", "load_demo",
           "run_service_demo"]

InputRecord = tuple[Any, Any, int]  # (key, value, timestamp ms), before encoding; value None: a tombstone
TopicRecord = tuple[str, Any, Any, int]  # (source topic, key, value, timestamp ms): demos with several sources
OutputRecord = tuple[Any, Any]  # (key, value), decoded
_REPO_ROOT = Path(__file__).resolve().parents[1]
_SHOWN_ROWS = 12  # the summary prints this many results; the check covers all of them
_ROW_CHARS = 100  # and each cut to this length, to stay readable in a terminal


@dataclass(frozen=True)
class ServiceDemo:
    """A service's demo, declared as ``DEMO`` in ``services/<package>/demo.py``.

    ``source`` and ``outputs`` are topic names as the pipeline names them without the
    suffix. ``generate(records, seed)`` returns the input in produce order (deterministic
    for a seed): ``InputRecord``s for the one ``source``, or, when ``source`` is a tuple of
    topics (a stream and a table, say), ``TopicRecord``s that name their topic first.
    ``expected(input)`` computes the results directly from that same input;
    ``observe({output topic: [(key, value), ...]})`` reduces the committed outputs
    (each partition's in order) to the same shape. ``what`` is one line saying what the
    check compares.
    """

    source: str | tuple[str, ...]
    outputs: tuple[str, ...]
    generate: Callable[[int, int], list[Any]]  # list[InputRecord], or list[TopicRecord] for several sources
    expected: Callable[[list[Any]], Mapping[Any, Any]]
    observe: Callable[[Mapping[str, list[OutputRecord]]], Mapping[Any, Any]]
    what: str
    consumed_per_record: int = 1
    partitions: int | None = None

    def by_source(self, inputs: Sequence[Any]) -> dict[str, list[InputRecord]]:
        """The generated ``inputs`` per source topic (without the suffix), each in generated
        order; ``ConfigError`` for a record naming a topic that is not one of ``source``."""
        if isinstance(self.source, str):
            return {self.source: list(inputs)}
        out: dict[str, list[InputRecord]] = {topic: [] for topic in self.source}
        for topic, key, value, ts in inputs:
            if topic not in out:
                raise ConfigError(f"the demo generated a record for topic {topic!r}, which is not one of its "
                                  f"sources {list(self.source)}. Fix: add it to ServiceDemo(source=...)")
            out[topic].append((key, value, ts))
        return out


def _import_root() -> None:
    """Services import from the working directory (as with ``fw run``) or this checkout."""
    for root in (Path.cwd(), _REPO_ROOT):
        if (root / "services").is_dir() and str(root) not in sys.path:
            sys.path.insert(0, str(root))


def demo_packages() -> list[str]:
    """The service packages that declare a demo (``services/<package>/demo.py``)."""
    _import_root()
    found = set()
    for root in (Path.cwd(), _REPO_ROOT):
        found |= {p.parent.name for p in (root / "services").glob("*/demo.py")}
    return sorted(found)


def load_demo(service: str) -> tuple[ServiceDemo, Callable[[str], Pipeline]]:
    """The ``DEMO`` and ``build_pipeline`` of ``service`` (``fraud-detection`` or ``fraud_detection``)."""
    package = service.replace("-", "_")
    _import_root()
    try:
        demo = importlib.import_module(f"services.{package}.demo").DEMO
        builder = importlib.import_module(f"services.{package}.pipeline").build_pipeline
    except (ImportError, AttributeError) as exc:
        known = ", ".join(demo_packages()) or "none"
        raise ConfigError(f"service {service!r} has no demo ({exc}); services with one: {known}; "
                          f"declare DEMO = ServiceDemo(...) in services/{package}/demo.py") from exc
    if not isinstance(demo, ServiceDemo):
        raise ConfigError(f"services/{package}/demo.py: DEMO must be a framework.demos.ServiceDemo")
    return demo, builder


def _topic(pipeline: Pipeline, name: str, suffix: str) -> Topic:
    topics = [s.topic for s in pipeline.sources()] + pipeline.sink_topics()
    for t in topics:
        if t.name == name + suffix:
            return t
    raise ConfigError(f"the demo names topic {name!r}, which {pipeline.name} does not have; "
                      f"its topics: {sorted(t.name.removesuffix(suffix) for t in topics)}")


def _topics_of(pipeline: Pipeline) -> list[str]:
    names = pipeline.input_topics()
    names += [pipeline.changelog_topic(name) for name in pipeline.changelogged_stores()]
    names += [t.name for t in pipeline.sink_topics()] + [pipeline.dead_letter.name]
    return list(dict.fromkeys(names))


def run_service_demo(bootstrap: str, service: str, records: int, *, seed: int = 7,
                     keep_topics: bool = False) -> Iterator[str]:
    """Run ``service``'s demo against ``bootstrap`` with ``records`` generated inputs; yields
    the lines to print. Raises ``FrameworkError`` when the results differ from the direct
    computation, ``ConfigError`` when the service has no demo."""
    demo, builder = load_demo(service)
    suffix = f"-demo-{uuid.uuid4().hex[:8]}"
    pipeline = builder(suffix)
    with tempfile.TemporaryDirectory(prefix="fw-demo-state-") as state_dir:
        config = Config.load(kafka={"bootstrap_servers": bootstrap}, state={"dir": state_dir})
        settings = config.kafka.client_settings()
        if demo.partitions is not None:
            ensure_topics(admin_client(settings), [TopicSpec(s.topic.name, demo.partitions, dict(s.topic.config))
                                                   for s in pipeline.sources()])
        ensure_service_topics(pipeline, settings)
        try:
            yield from _run(demo, pipeline, config, suffix, demo.generate(records, seed))
        finally:
            if not keep_topics:
                delete_topics(bootstrap, _topics_of(pipeline), extra=dict(config.kafka.security))


def _process(pipeline: Pipeline, config: Config, expected_consumed: int) -> tuple[int, float]:
    """Run the service until it consumed ``expected_consumed`` records; (consumed, seconds)."""
    deadline = time.monotonic() + max(120.0, expected_consumed / 100)
    service = Service(pipeline, config, "demo")
    started = time.monotonic()
    service.run(until=lambda s: s.records_processed >= expected_consumed or time.monotonic() > deadline)
    if service.records_processed < expected_consumed:
        raise FrameworkError(f"service {pipeline.name} consumed {service.records_processed} of "
                             f"{expected_consumed} records before the deadline; see its log above")
    return service.records_processed, time.monotonic() - started


def _read(config: Config, topic: Topic) -> list[OutputRecord]:
    key_de = topic.key_serde.bind(topic.name, True).deserialize
    value_de = topic.value_serde.bind(topic.name, False).deserialize
    raw = read_committed(config.kafka.bootstrap_servers, topic.name, None, 60.0,
                         extra=dict(config.kafka.security))
    return [(None if k is None else key_de(k), None if v is None else value_de(v)) for k, v in raw]


def _run(demo: ServiceDemo, pipeline: Pipeline, config: Config, suffix: str,
         inputs: list[Any]) -> Iterator[str]:
    for name, records in demo.by_source(inputs).items():
        source = _topic(pipeline, name, suffix)
        produce(source, records, config=config)
        yield f"produced {len(records)} records to {source.name}"
    consumed, seconds = _process(pipeline, config, demo.consumed_per_record * len(inputs))
    yield (f"service {pipeline.name} ({config.processing.guarantee}): {consumed} records consumed "
           f"in {seconds:.1f}s")
    outputs = {name: _read(config, _topic(pipeline, name, suffix)) for name in demo.outputs}
    yield "read " + ", ".join(f"{len(recs)} from {name}{suffix}" for name, recs in outputs.items()) + \
        " (read_committed)"
    observed, expected = demo.observe(outputs), demo.expected(inputs)
    yield ""
    for key in sorted(observed, key=repr)[:_SHOWN_ROWS]:
        shown = repr(observed[key])
        yield f"{key!s:<28} {shown if len(shown) <= _ROW_CHARS else shown[:_ROW_CHARS - 3] + '...'}"
    if len(observed) > _SHOWN_ROWS:
        yield f"... and {len(observed) - _SHOWN_ROWS} more"
    yield ""
    wrong = sorted((k for k in set(observed) | set(expected) if observed.get(k) != expected.get(k)), key=repr)
    if wrong:
        for key in wrong[:_SHOWN_ROWS]:
            yield f"MISMATCH {key}: service {observed.get(key)!r}, direct {expected.get(key)!r}"
        raise FrameworkError(f"the outputs of {pipeline.name} differ from a direct computation for "
                             f"{len(wrong)} keys, e.g. {wrong[:3]}")
    yield f"check passed: {demo.what} ({len(expected)} keys) equal a direct computation over the input"
