"""``fw replay TARGET``: run a service's pipeline over history on Spark (backfill, bootstrap);
``fw archive``: a topic range as Parquet. Both build a ``spark-submit`` command and run it."""

from __future__ import annotations

import shlex
import shutil
import sys
import time
import uuid
from dataclasses import asdict
from pathlib import Path

import click

from framework.classdata import remove_unused
from framework.config import Config, is_secret
from framework.errors import ConfigError
from framework.kafka.admin import (
    InternalTopics,
    TopicSpec,
    admin_client,
    ensure_topics,
    topic_partitions,
)
from framework.kafka.groups import held_records
from framework.kafka.java import java_security
from framework.kafka.offsets import resolve_ranges
from framework.logs import debugging
from framework.pipeline.loading import load_pipeline
from framework.replay import launch, ledger
from framework.replay.order import order_checks
from framework.replay.plan import (
    SMALL_RANGE,
    ReplayPlan,
    check_contract,
    choose_reader,
    definition_of,
    output_topics,
    range_records,
    stage_topics,
    store_stages,
)
from framework.replay.submit import (
    cache_dir,
    class_archive,
    command,
    connector_jars,
    environment,
    package,
    spark_launch_home,
)
from framework.runtime.topics import (
    ensure_service_topics,
    internal_topics,
    producer_max_bytes,
    size_config,
    written_limits,
)

_RANGE_HELP = ("earliest, latest, committed (the service group's offsets), a time (ISO 8601 or ms since the epoch) "
               "or topic:partition:offset[,...]")


def _spark_options(f):  # type: ignore[no-untyped-def]
    f = click.option("--verbose", is_flag=True,
                     help="Show Spark's own log lines (INFO and up) too; without it only its errors (FW_DEBUG=1 too).")(f)
    f = click.option("--dry-run", is_flag=True, help="Print the spark-submit command instead of running it.")(f)
    f = click.option("--conf", "confs", multiple=True, metavar="K=V", help="A Spark setting (repeatable).")(f)
    f = click.option("--master", default="local[*]", show_default=True, help="Any Spark master URL.")(f)
    f = click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
                     help="A TOML configuration file (else FW_CONFIG).")(f)
    return f


def _run(plan: ReplayPlan, target: str, mode: str, master: str, confs: tuple[str, ...], dry_run: bool,
         config_file: str | None, verbose: bool) -> None:
    code = run_job(plan, target, mode, master, confs, dry_run, config_file, verbose=verbose)
    if code is not None:
        sys.exit(code)


def run_job(plan: ReplayPlan, target: str, mode: str, master: str, confs: tuple[str, ...], dry_run: bool,
            config_file: str | None, *, to_stderr: bool = False, verbose: bool = False) -> int | None:
    """Run ``plan``'s Spark job (``mode``: replay, archive or savepoint) through spark-submit on
    ``master``; its exit code, or None for a dry run (the command printed). ``to_stderr``: what
    the job and this function print goes to stderr. ``verbose`` (or ``FW_DEBUG``): Spark's own
    INFO and WARN lines are shown too (``submit.LOG_CONFIG``)."""
    verbose = verbose or debugging()
    for conf in confs:
        if "=" not in conf:
            raise click.BadParameter(f"{conf!r} is not K=V", param_hint="--conf")
    runs = cache_dir() / "replay" / "runs"
    workdir = runs / plan.run_id
    workdir.mkdir(parents=True, exist_ok=True)
    plan_path = workdir / "plan.json"
    plan.save(plan_path)
    deps = package(target)
    jars = connector_jars()
    spark = spark_launch_home()
    archive = class_archive(jars, spark)
    cmd = command(plan_path, deps, jars, master=master, confs=list(confs), name=f"fw {mode} {plan.service}",
                  mode=mode, archive=archive, spark=spark, verbose=verbose)
    if dry_run:
        click.echo(shlex.join(cmd))
        return None
    env = environment(spark)
    if config_file:  # the job's driver and (in local mode) executors read the same file as this command
        env["FW_CONFIG"] = str(Path(config_file).resolve())
    click.echo(f"[replay] {mode} of {plan.records:,} records on {master} (run {plan.run_id})", err=to_stderr)
    if archive is not None and archive.written_by(cmd):
        click.echo(f"[replay] Spark's JVM writes its class archive as it exits, once, after this command has ended: "
                   f"later runs start from it sooner ({archive.path.parent})", err=to_stderr)
    try:
        code = launch.run(cmd, env, archive, to_stderr=to_stderr, verbose=verbose)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)  # a dry run's stays: its command names the plan
        remove_unused(runs, days=1)
        remove_unused(runs.parent, days=1, named="[0-9a-f]{10}")  # where earlier versions kept each run's
    return code


@click.command()
@click.argument("target")
@click.option("--from", "start", default="earliest", show_default=True, help=f"Where to start: {_RANGE_HELP}.")
@click.option("--to", "end", default="latest", show_default=True, help=f"Where to stop (exclusive): {_RANGE_HELP}.")
@click.option("--archive", type=click.Path(exists=True), default=None,
              help="Replay a Parquet archive (fw archive) instead of the topics; --from/--to do not apply.")
@click.option("--output", default="none", show_default=True, metavar="topic|parquet:PATH|none",
              help="Backfill: write the outputs to their topics (exactly once), or to Parquet files.")
@click.option("--output-suffix", default="", help="Append this to the name of every topic the backfill writes.")
@click.option("--bootstrap", is_flag=True,
              help="Write the final state into the service's changelogs and commit its group's offsets at the end "
                   "of the range: the live service continues from there.")
@click.option("--commit-every", default=1_000_000, show_default=True,
              help="Backfill and bootstrap: commit each task's writes after this many records...")
@click.option("--commit-interval", default=30.0, show_default=True, type=click.FloatRange(min=0.1, max=300),
              help="...or after this many seconds, whichever comes first.")
@click.option("--batch-size", default=5_000, show_default=True,
              help="Records a task processes between looks at its outputs (and commits).")
@click.option("--allow-nondeterministic", is_flag=True,
              help="Replay a pipeline with steps whose results replay cannot reproduce, or whose input the data "
                   "shows live processing could interleave otherwise (docs/replay.md).")
@click.option("--allow-calls", is_flag=True,
              help="Replay a pipeline whose async steps call other services: every record of the range is "
                   "called again, answered as the services answer now (docs/replay.md).")
@click.option("--reader", type=click.Choice(["auto", "spark", "librdkafka"]), default="auto", show_default=True,
              help="How the topics are read: Spark's Kafka source, or each Spark task reads its partitions "
                   f"with the framework's own Kafka client (librdkafka; less CPU); auto: librdkafka for at most "
                   f"{SMALL_RANGE:,} records, else spark (docs/replay.md).")
@click.option("--again", is_flag=True,
              help="Write a backfill that completed before once more, into topics or a path that hold nothing yet.")
@click.option("--clean", is_flag=True,
              help="Forget every backfill of the service: delete its ledger topic and its replays' marker groups "
                   "(a backfill run afterwards writes everything again).")
@_spark_options
def replay(target: str, start: str, end: str, archive: str | None, output: str, output_suffix: str, bootstrap: bool,
           commit_every: int, commit_interval: float, batch_size: int, allow_nondeterministic: bool,
           allow_calls: bool, reader: str, again: bool, clean: bool, master: str, confs: tuple[str, ...], dry_run: bool,
           config_file: str | None, verbose: bool) -> None:
    """Run the pipeline TARGET (module:pipeline) over history on Spark, as the live service
    would: backfill its outputs, and/or bootstrap its state for the live service. A backfill
    (--output topic or parquet:PATH) is exactly once across runs: run again, it continues
    what a failed run committed, or writes nothing when it completed (docs/replay.md)."""
    began = time.time()
    pipeline = load_pipeline(target)
    config = Config.load(Path(config_file) if config_file else None)
    if clean:
        removed = ledger.clean(config.kafka.client_settings(), pipeline.name)
        click.echo("\n".join(f"removed {r}" for r in removed) or f"nothing to remove for {pipeline.name}")
        return
    if output != "none" and output != "topic" and not output.startswith("parquet:"):
        raise click.BadParameter(f"{output!r}: use topic, parquet:PATH or none", param_hint="--output")
    if output.startswith("parquet:") and "://" not in output:
        output = f"parquet:{Path(output.removeprefix('parquet:')).resolve()}"
    if again and output == "none":
        raise click.BadParameter("--again writes a backfill again: give --output topic or parquet:PATH",
                                 param_hint="--again")
    if archive and reader == "librdkafka":
        raise click.BadParameter("an archive is read by Spark: leave --reader out with --archive",
                                 param_hint="--reader")
    issues = check_contract(pipeline)
    if issues and not allow_nondeterministic:
        lines = "\n".join(f"  {i}" for i in issues)
        raise click.UsageError(f"replay cannot reproduce what {target} computes:\n{lines}\nPass "
                               "--allow-nondeterministic to replay it anyway (what it reproduces: docs/replay.md)")
    calls = [s.name for s in pipeline.async_steps()]
    if calls and not allow_calls:
        raise click.UsageError(
            f"{target} calls other services in its async steps ({', '.join(calls)}): a replay calls them again for "
            "every record of the range, as fast as Spark's tasks go (each at most its step's capacity at once), "
            "and its results are what the services answer now, not what they answered then. Pass --allow-calls "
            "to replay it (docs/replay.md, \"Pipelines that call other services\")")
    store_stages(pipeline)  # refuses a step fed by several stages
    if not dry_run:
        environment()  # Java and Spark: a missing one is said before any work on the cluster
    settings = config.kafka.client_settings()
    sources = [s.topic.name for s in pipeline.sources()]
    ranges = {} if archive else resolve_ranges(settings, sources, start, end, group=pipeline.name)
    if not archive and not bootstrap and not dry_run and range_records(ranges) == 0:
        click.echo(f"[replay] nothing to replay: {empty_range(ranges, start, end, pipeline.name)}; Spark was not "
                   "started")
        return
    reader = choose_reader(reader, ranges, bool(archive))
    if reader == "spark":  # the Java client must be able to take the security settings
        java_security(config.kafka.security, "fw replay --reader spark")
    tables = [g.topic.name for g in pipeline.global_tables()]
    if tables and archive:
        raise click.UsageError(f"{target} joins global tables ({', '.join(tables)}), which an archive does not "
                               "hold: replay it from Kafka (leave --archive out)")
    # a global table is read whole: from its start to where --to ends the range
    global_ranges = resolve_ranges(settings, tables, "earliest", end, group=pipeline.name) if tables else {}
    max_bytes = producer_max_bytes(config.kafka.producer)
    # its internal topics (markers, changelogs), made as the live service makes them
    partitions = ensure_service_topics(pipeline, settings, max_message_bytes=max_bytes,
                                       internal=internal_topics(config.kafka))
    if bootstrap:
        from framework.replay.handover import refuse_if_running

        refuse_if_running(settings, pipeline.name)
    if output == "topic" and output_suffix:
        admin = admin_client(settings)
        counts = topic_partitions(admin, output_topics(pipeline))
        ensure_topics(admin, [TopicSpec(f"{t}{output_suffix}", n, size_config(max_bytes)) for t, n in counts.items()])
    outputs = [f"{t}{output_suffix}" for t in output_topics(pipeline)] if output == "topic" else []
    written = outputs + ([pipeline.changelog_topic(s) for s in pipeline.changelogged_stores()] if bootstrap else [])
    limits = {t: [lim.before_ms, lim.after_ms] for t, lim in written_limits(written, settings, max_bytes).items()
              if (lim.before_ms, lim.after_ms) != (None, None)}
    archive = str(Path(archive).resolve()) if archive else None
    backfill: ledger.Backfill | None = None
    resumed = False
    if output != "none":  # a backfill: the ledger decides what it writes
        destination = outputs or [output]
        definition = definition_of(pipeline)
        decided = _backfill(settings, pipeline.name, ledger.Backfill(
            id=ledger.backfill_id(definition, ranges, archive, destination, partitions, bootstrap), target=target,
            pipeline=ledger.pipeline_hash(definition), destination=destination, ranges=ranges, asked=[start, end],
            archive=archive, started=ledger.now_text()), again=again, dry_run=dry_run,
            internal=internal_topics(config.kafka))
        if decided is None:
            return
        backfill, resumed = decided
        ranges = backfill.ranges
    plan = ReplayPlan(target=target, service=pipeline.name, run_id=uuid.uuid4().hex[:10],
                      bootstrap_servers=config.kafka.bootstrap_servers, partitions=partitions, ranges=ranges,
                      stages=stage_topics(pipeline), output=output, output_suffix=output_suffix, bootstrap=bootstrap,
                      global_ranges=global_ranges,
                      archive=archive, allow_nondeterministic=allow_nondeterministic, commit_every=commit_every,
                      order_checks=[] if allow_nondeterministic else [asdict(c) for c in order_checks(pipeline)],
                      commit_interval_s=commit_interval, batch_size=batch_size,
                      changelogs=[pipeline.changelog_topic(s) for s in pipeline.changelogged_stores()],
                      definition=definition_of(pipeline), reader=reader, limits=limits,
                      producer={k: v for k, v in config.kafka.producer.items() if not is_secret(k)},
                      backfill=backfill.to_dict() if backfill else None, resumed=resumed, command_started=began)
    _run(plan, target, "replay", master, confs, dry_run, config_file, verbose)


def empty_range(ranges: dict[str, dict[int, list[int]]], start: str, end: str, group: str) -> str:
    """Why ``ranges`` (from ``--from start --to end``) holds no records, in one line."""
    where = ", ".join(f"{t}[{p}] at {s}" for t, parts in sorted(ranges.items()) for p, (s, _e) in sorted(parts.items()))
    if end == "committed":
        why = (f"--to committed ends where the group {group} has committed, and it has committed nothing past the "
               "start (run the service first, or choose --to latest)")
    else:
        why = f"--from {start} and --to {end} meet in every partition"
    return f"{why}: {where or 'the sources have no partitions'}"


def _backfill(settings: dict[str, str], service: str, mine: ledger.Backfill, *, again: bool,
              dry_run: bool, internal: InternalTopics) -> tuple[ledger.Backfill, bool] | None:
    """What the ledger says of backfill ``mine``: the backfill to run (``mine``, recorded as
    running, or the failed run it continues) and whether it continues one; None when it
    completed before (said)."""
    if dry_run:  # nothing on the cluster changes: the printed command, run, records itself when it ends
        return mine, False
    occupied = _occupied(settings, mine.destination) if again else []
    decision = ledger.decide(ledger.read_ledger(settings, service), mine, again=again, occupied=occupied)
    found = decision.backfill
    if decision.action == "done":
        click.echo(f"[replay] backfill {found.id} ({found.range_text()} to {found.where()}) completed at "
                   f"{found.completed}: nothing written. To write it again: --again, into new topics "
                   "(--output-suffix) or a new path")
        return None
    ledger.forget(settings, service, decision.forget)
    if decision.action == "continue":
        click.echo(f"[replay] backfill {found.id} started at {found.started} did not complete: each task continues "
                   f"from what it committed ({found.range_text()} to {found.where()})")
    else:
        ledger.record(settings, service, found, internal)
        click.echo(f"[replay] backfill {found.id}: {found.range_text()} to {found.where()}")
    return found, decision.action == "continue"


def _occupied(settings: dict[str, str], destination: list[str]) -> list[str]:
    """What of a backfill's destination holds something already: its topics that hold
    records, its path (a local one) when it has Parquet files. A path another filesystem
    serves (``scheme://``) is taken as new."""
    paths = [d for d in destination if d.startswith("parquet:")]
    if paths:
        return [d for d in paths if "://" not in (p := d.removeprefix("parquet:")) and Path(p).exists()
                and any(Path(p).rglob("*.parquet"))]
    held = held_records(settings, destination)
    return [t for t in destination if held.get(t)]


@click.command()
@click.argument("topics", nargs=-1, required=True)
@click.option("--path", "path", required=True, type=click.Path(), help="Where the Parquet files go (must not exist).")
@click.option("--from", "start", default="earliest", show_default=True, help=f"Where to start: {_RANGE_HELP}.")
@click.option("--to", "end", default="latest", show_default=True, help=f"Where to stop (exclusive): {_RANGE_HELP}.")
@_spark_options
def archive(topics: tuple[str, ...], path: str, start: str, end: str, master: str, confs: tuple[str, ...],
            dry_run: bool, config_file: str | None, verbose: bool) -> None:
    """Write a range of TOPICS (committed records) as Parquet with Kafka's columns: topic,
    partition, offset, key, value, timestamp, headers. ``fw replay --archive`` replays it."""
    if Path(path).exists():
        raise ConfigError(f"--path {path} exists already: choose a new directory")
    config = Config.load(Path(config_file) if config_file else None)
    java_security(config.kafka.security, "fw archive")
    settings = config.kafka.client_settings()
    ranges = resolve_ranges(settings, topics, start, end, group="fw-archive")
    plan = ReplayPlan(target="", service="archive", run_id=uuid.uuid4().hex[:10],
                      bootstrap_servers=config.kafka.bootstrap_servers, partitions=0, ranges=ranges, stages=[],
                      output=f"parquet:{Path(path).resolve()}")
    _run(plan, "framework", "archive", master, confs, dry_run, config_file, verbose)
