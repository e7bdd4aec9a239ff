"""The parts of a member that ``Service`` wires together, made here: its clients (the
transactional producer and the group consumer, configured from the service's settings), its
skip list, its status endpoint, and the one line for a client failure whose cause the cluster
can name."""

from __future__ import annotations

import json
import logging
import os
import re
import socket
from typing import Any

from framework.config import Config
from framework.engine.skips import SkipList, skips_of
from framework.errors import (
    AccessProblem,
    FatalKafkaError,
    FencedError,
    KafkaClientError,
    OutageTooLong,
    SlowRecord,
)
from framework.kafka.acl import Grant, denied, missing_grants
from framework.kafka.clients import GroupConsumer, KafkaOutput
from framework.kafka.connect import client_failure
from framework.kafka.inspect import read_whole
from framework.observe.metrics import multiprocess_dir
from framework.observe.observer import Observer
from framework.observe.server import StatusServer
from framework.pipeline import steps as S
from framework.pipeline.definition import Pipeline
from framework.pipeline.internal import skips_topic
from framework.runtime.topics import output_limits, service_grants, topics_missing

log = logging.getLogger("framework.runtime")


def member_skips(pipeline: Pipeline, settings: dict[str, str]) -> SkipList:
    """The service's skip list as a member under ``on_error="fail"`` consults it: read from
    ``<service>-skips`` the first time one of its records fails, not before
    (``framework.engine.skips``)."""
    topic = skips_topic(pipeline.name)
    return SkipList(load=lambda: skips_of((r.key, r.value) for r in read_whole(settings, topic)).values())


def member_output(pipeline: Pipeline, cfg: Config, settings: dict[str, str], transactional_id: str | None,
                  partitions: int, max_bytes: int | None) -> KafkaOutput:
    """The member's producer: transactional under exactly_once, refusing what the topics it
    writes would refuse, and naming a topic deleted while it runs."""
    output = KafkaOutput({**settings, **cfg.kafka.producer, "transaction.timeout.ms": cfg.kafka.transaction_timeout_ms},
                         transactional_id)
    output.group = pipeline.name  # the member's group (member_consumer): send_offsets watches its coordinator
    output.limit_timestamps({topic: (limits.before_ms, limits.after_ms) for topic, limits
                             in output_limits(pipeline, settings, max_bytes).items()})
    output.on_missing = lambda names: topics_missing(pipeline, names, partitions, settings["bootstrap.servers"],
                                                     running=True)
    return output


def member_consumer(pipeline: Pipeline, cfg: Config, settings: dict[str, str], client_id: str | None,
                    static_id: str | None) -> GroupConsumer:
    """The member's consumer of the group ``pipeline.name``; its poll interval is longer than a
    record may take (``Config.max_poll_interval_ms``)."""
    return GroupConsumer({**settings, "max.poll.interval.ms": cfg.max_poll_interval_ms(), **cfg.kafka.consumer},
                         pipeline.name, client_id=client_id, instance_id=static_id,
                         leave_on_close=cfg.processing.leave_group_on_shutdown,
                         stats_interval_ms=cfg.observe.interval_ms if client_id else 0)


def serve_endpoint(service: Any, queries: Any) -> tuple[Observer, StatusServer, str]:
    """Serve ``service``'s status endpoint (docs/observability.md): its observer, its server,
    and the consumer's ``client.id`` that advertises it to ``fw status``."""
    obs = service.config.observe
    observer = Observer(service, obs.interval_ms / 1000, obs.health_timeout_ms / 1000)
    server = StatusServer(observer, obs.host, obs.port, queries, service.holds,
                          topology=service.pipeline.describe()).start()
    host = obs.advertised_host or ("" if obs.host in ("0.0.0.0", "::") else obs.host)
    observer.endpoint = f"http://{host or socket.gethostname()}:{server.port}"
    log.info("status endpoint %s (/ status page, /metrics, /health, /ready, /status, /topology, /stores)", server.url)
    shared = multiprocess_dir()
    if shared:  # a --processes child: tell the supervisor where its endpoint is
        path = os.path.join(shared, f"member-{service.instance_id}.json")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"pid": os.getpid(), "port": server.port, "instance": service.instance_id}, f)
        os.replace(path + ".tmp", path)
    return observer, server, f"{service.pipeline.name}-{service.instance_id}@{host}:{server.port}"


def explained(exc: Exception, settings: dict[str, str], pipeline: Pipeline, *, skip_list: bool) -> Exception:
    """The error a member stops with for ``exc``: itself when its cause is known, else what the
    cluster says the principal lacks (a denied operation surfaces wherever the client noticed
    it: a transaction in an error state, a produce refused), else the client's failure.
    ``skip_list``: the member reads the skip list (``on_error=fail``), so it needs that too."""
    said = client_failure(exc)
    if isinstance(exc, (AccessProblem, FencedError, OutageTooLong, SlowRecord)) or not (
            said or isinstance(exc, KafkaClientError)):
        return exc  # the cause is known: no question to the cluster (it may be away) first
    missing = _missing_grants(settings, pipeline, skip_list)
    if missing:
        return denied(settings, pipeline.name, missing)
    return FatalKafkaError(said) if said else exc


def _missing_grants(settings: dict[str, str], pipeline: Pipeline, skip_list: bool) -> list[Grant]:
    try:
        return missing_grants(settings, service_grants(pipeline, skip_list=skip_list), timeout_s=10.0)
    except Exception as exc:
        if client_failure(exc) is None:
            raise
        return []  # the cluster cannot say: the original error stands


def warn_about_generated_names(pipeline: Pipeline) -> None:
    """State and repartition topics named after generated step names (``count-4``) move to
    other steps when steps are added in front of them: say so once, at start."""
    generated = [s.name for i, s in enumerate(pipeline.steps.values())
                 if (s.stateful or isinstance(s, S.KeyBy)) and re.fullmatch(rf"[a-z_]+-{i}", s.name)]
    if generated:
        log.warning("steps %s keep state or a repartition topic under a generated name, which changes when "
                    "steps are added before them (their state would then belong to other steps): give them "
                    "name=... (see docs/writing-a-service.md)", generated)


def counters(metrics: dict[str, int]) -> str:
    """``; dead_letters=n, late_records.<step>=n, ...`` (only what was counted)."""
    return "".join(f"; {name}={n}" for name, n in sorted(metrics.items()) if n and name != "records")
