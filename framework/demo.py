"""The demo job: the ``sensors`` service, run for real against a Kafka broker.

1. Build the pipeline of ``services/sensors`` with a fresh suffix on its service and topic
   names, so every run starts from empty topics and a new consumer group (the demo can be
   run again and again on the same broker), and create its topics.
2. Produce Avro ``sensor.Reading`` records for a few sensors to its source topic.
3. Run the service (``framework.runtime.service.Service``, exactly-once, RocksDB state in
   a temporary directory) until it has processed every reading, then stop it (the final
   checkpoint commits the last transaction).
4. Read the output topics with a ``read_committed`` consumer and print, per sensor, the
   readings seen, the last rolling mean temperature and the number of alerts, and check
   them against a direct computation over the produced readings.
"""

from __future__ import annotations

import math
import random
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from framework.config import Config
from framework.errors import ConfigError, FrameworkError
from framework.kafka.io import delete_topics, read_committed
from framework.pipeline import Pipeline, Topic
from framework.produce import produce
from framework.runtime.service import Service
from framework.runtime.topics import ensure_service_topics

_REPO_ROOT = Path(__file__).resolve().parents[1]


def _sensors_module() -> Any:
    """``services.sensors.pipeline``, from the working directory or this checkout."""
    for root in (Path.cwd(), _REPO_ROOT):
        if (root / "services" / "sensors" / "pipeline.py").is_file() and str(root) not in sys.path:
            sys.path.insert(0, str(root))
    try:
        import services.sensors.pipeline as module
    except ImportError as exc:
        raise ConfigError(
            f"the demo runs the service in services/sensors, which cannot be imported ({exc}); "
            "run `fw demo` from the repository root"
        ) from exc
    return module


def make_readings(count: int, sensors: int, seed: int = 7) -> list[dict[str, Any]]:
    """``count`` readings, one every 100 ms up to now, from ``sensors`` random sensors: each
    sensor has its own base temperature and noise, and about 1% of readings spike."""
    rng = random.Random(seed)
    bases = [round(rng.uniform(16.0, 26.0), 1) for _ in range(sensors)]
    start = int(time.time() * 1000) - count * 100
    readings = []
    for i in range(count):
        s = rng.randrange(sensors)
        temperature = bases[s] + rng.gauss(0.0, 1.0)
        if rng.random() < 0.01:
            temperature += rng.uniform(6.0, 9.0)
        readings.append({"id": f"sensor-{s}", "timestamp": start + i * 100,
                         "temperature": round(temperature, 2)})
    return readings


def expected_results(
    readings: list[dict[str, Any]], rise: float
) -> dict[str, tuple[int, float, int]]:
    """Per sensor, computed directly: (readings, mean temperature, alerts)."""
    temps: dict[str, list[float]] = defaultdict(list)
    alerts: dict[str, int] = defaultdict(int)
    for r in readings:
        seen = temps[r["id"]]
        if seen and r["temperature"] - seen[-1] > rise:
            alerts[r["id"]] += 1
        seen.append(r["temperature"])
    return {s: (len(t), math.fsum(t) / len(t), alerts[s]) for s, t in temps.items()}


def _topics_of(pipeline: Pipeline) -> list[str]:
    names = pipeline.input_topics()
    names += [pipeline.changelog_topic(name) for name in pipeline.changelogged_stores()]
    names += [t.name for t in pipeline.sink_topics()] + [pipeline.dead_letter.name]
    return list(dict.fromkeys(names))


def run_demo(bootstrap: str, records: int, *, sensors: int = 8, keep_topics: bool = False,
             seed: int = 7) -> Iterator[str]:
    """Run the demo against ``bootstrap``; yields the lines to print."""
    module = _sensors_module()
    suffix = f"-demo-{uuid.uuid4().hex[:8]}"
    pipeline: Pipeline = module.build_pipeline(suffix)
    source = pipeline.sources()[0].topic
    sinks = {t.name: t for t in pipeline.sink_topics()}
    means_topic, alerts_topic = sinks[f"sensor-means{suffix}"], sinks[f"sensor-alerts{suffix}"]
    windows_topic = sinks[f"sensor-minute-means{suffix}"]
    with tempfile.TemporaryDirectory(prefix="fw-demo-state-") as state_dir:
        config = Config.load(kafka={"bootstrap_servers": bootstrap}, state={"dir": state_dir})
        security = dict(config.kafka.security)
        ensure_service_topics(pipeline, config.kafka.client_settings())
        try:
            readings = make_readings(records, sensors, seed)
            yield from _run(pipeline, config, source, means_topic, alerts_topic, readings, sensors, module.RISE_C)
            yield from check_windows(config, windows_topic, readings, module.WINDOW_MS)
        finally:
            if not keep_topics:
                delete_topics(bootstrap, _topics_of(pipeline), extra=security)


def _run(pipeline: Pipeline, config: Config, source: Topic, means_topic: Topic,
         alerts_topic: Topic, readings: list[dict[str, Any]], sensors: int,
         rise: float) -> Iterator[str]:
    produce(source, ((r["id"], r, r["timestamp"]) for r in readings), config=config)
    yield f"produced {len(readings)} Avro readings of {sensors} sensors to {source.name}"

    # Each reading is consumed twice: from the source topic, then from the by-sensor
    # repartition topic that brings every sensor's readings to the task owning its state.
    expected_processed = 2 * len(readings)
    deadline = time.monotonic() + max(120.0, len(readings) / 100)
    service = Service(pipeline, config, "demo")
    started = time.monotonic()
    service.run(until=lambda s: s.records_processed >= expected_processed
                or time.monotonic() > deadline)
    elapsed = time.monotonic() - started
    if service.records_processed < expected_processed:
        raise FrameworkError(f"service {pipeline.name} processed {service.records_processed} of "
                             f"{expected_processed} records before the deadline")
    yield (f"service {pipeline.name} ({config.processing.guarantee}): "
           f"{service.records_processed} records processed (source + repartition) "
           f"in {elapsed:.1f}s")
    yield from check_outputs(config, means_topic, alerts_topic, readings, rise)


def check_outputs(config: Config, means_topic: Topic, alerts_topic: Topic,
                  readings: list[dict[str, Any]], rise: float, timeout_s: float = 60.0) -> Iterator[str]:
    """Read the sensors service's means and alerts (``read_committed``, waiting up to
    ``timeout_s`` for one mean per reading) and check them against ``expected_results``:
    per sensor, as many means as readings (a duplicate or a loss shows), the last mean and
    the alert count. Yields the lines to print; raises ``FrameworkError`` on a difference."""
    bootstrap, security = config.kafka.bootstrap_servers, dict(config.kafka.security)
    key_de = means_topic.key_serde.bind(means_topic.name, True).deserialize
    mean_de = means_topic.value_serde.bind(means_topic.name, False).deserialize
    counts: dict[str, int] = defaultdict(int)
    last_mean: dict[str, float] = {}
    means = read_committed(bootstrap, means_topic.name, len(readings), timeout_s, extra=security)
    for kb, vb in means:
        assert kb is not None and vb is not None  # every mean has its sensor as the key
        sensor = key_de(kb)
        counts[sensor] += 1
        last_mean[sensor] = mean_de(vb)  # a partition holds a sensor's means in order
    alerts: dict[str, int] = defaultdict(int)
    alert_key_de = alerts_topic.key_serde.bind(alerts_topic.name, True).deserialize
    for kb, _vb in read_committed(bootstrap, alerts_topic.name, None, timeout_s, extra=security):
        assert kb is not None  # every alert has its sensor as the key
        alerts[alert_key_de(kb)] += 1
    yield (f"read {len(means)} means from {means_topic.name} and {sum(alerts.values())} "
           f"alerts from {alerts_topic.name} (read_committed)")
    yield ""
    yield f"{'sensor':<10} {'readings':>8} {'mean °C':>8} {'alerts':>6}"
    for sensor in sorted(counts, key=lambda s: (len(s), s)):
        yield f"{sensor:<10} {counts[sensor]:>8} {last_mean[sensor]:>8.2f} {alerts[sensor]:>6}"
    yield ""

    expected = expected_results(readings, rise)
    wrong = [
        sensor for sensor in sorted(set(expected) | set(counts))
        if sensor not in expected or sensor not in last_mean
        or counts[sensor] != expected[sensor][0]
        or not math.isclose(last_mean[sensor], expected[sensor][1], rel_tol=1e-9)
        or alerts[sensor] != expected[sensor][2]
    ]
    if wrong:
        for sensor in wrong:
            yield f"MISMATCH {sensor}: expected (readings, mean, alerts) = {expected.get(sensor)}"
        raise FrameworkError(
            f"the outputs in {means_topic.name} and {alerts_topic.name} differ from a direct "
            f"computation for {wrong}")
    yield ("check: readings, means and alerts equal a direct computation over the produced "
           f"readings (alert: a rise of more than {rise:g} °C over the sensor's previous one)")


def expected_window_means(readings: list[dict[str, Any]], window_ms: int) -> dict[tuple[str, int], float]:
    """Per (sensor, window start), the mean temperature, computed directly."""
    temps: dict[tuple[str, int], list[float]] = defaultdict(list)
    for r in readings:
        temps[(r["id"], r["timestamp"] - r["timestamp"] % window_ms)].append(r["temperature"])
    return {k: math.fsum(t) / len(t) for k, t in temps.items()}


def check_windows(config: Config, topic: Topic, readings: list[dict[str, Any]], window_ms: int) -> Iterator[str]:
    """The event-time minute means that fired equal a direct computation; windows still open
    when the demo stopped (the watermark had not passed them) have not fired."""
    bootstrap, security = config.kafka.bootstrap_servers, dict(config.kafka.security)
    key_de = topic.key_serde.bind(topic.name, True).deserialize
    value_de = topic.value_serde.bind(topic.name, False).deserialize
    fired = {}
    for kb, vb in read_committed(bootstrap, topic.name, None, 60.0, extra=security):
        assert kb is not None and vb is not None  # every window's result has its sensor as the key
        result = value_de(vb)
        fired[(key_de(kb), result["start"])] = result["value"]
    expected = expected_window_means(readings, window_ms)
    wrong = [w for w, mean in fired.items() if w not in expected or not math.isclose(mean, expected[w], rel_tol=1e-9)]
    if wrong or not fired:
        raise FrameworkError(f"event-time minute means differ from a direct computation for {wrong[:5]}"
                             if wrong else f"no minute window fired in {topic.name}")
    yield (f"check: the {len(fired)} one-minute event-time means that fired (of {len(expected)} windows) "
           f"equal a direct computation")
