"""``fw produce``: a console producer that encodes with a service's or a schema's serdes.

The logic is in ``framework.ops.produce`` (encoding) and ``framework.kafka.io.deliver``
(writing); this module parses options and prints (``framework.cli.output``).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from framework.cli import output as out
from framework.errors import ConfigError
from framework.kafka.io import Delivered, deliver
from framework.ops import produce as P
from framework.ops.targets import client_settings, load_config, load_service


@click.command("produce")
@click.argument("topic")
@click.option("--key", "-k", default=None, help="The key of the one record to write (else none).")
@click.option("--value", "-v", default=None, help="The value of the one record to write.")
@click.option("--delete", "delete", default=None, metavar="KEY", help="Write a tombstone (no value) for KEY.")
@click.option("--file", "-f", "file", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="JSON lines to write: {\"key\", \"value\", \"headers\", \"timestamp\"} (- or none: stdin).")
@click.option("--header", "-H", "headers", multiple=True, metavar="NAME=VALUE",
              help="A header of every record (repeatable).")
@click.option("--timestamp", type=int, default=None, metavar="MS",
              help="The timestamp (ms since the epoch) of records without one (else: now).")
@click.option("--service", default=None, metavar="MODULE:PIPELINE",
              help="Encode with the serdes this service gives the topic.")
@click.option("--schema", default=None, metavar="NAME", help="Encode values with this Avro schema (single-object).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON (for scripts).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="A TOML configuration file (else FW_CONFIG).")
def produce(topic: str, key: str | None, value: str | None, delete: str | None, file: str | None,
            headers: tuple[str, ...], timestamp: int | None, service: str | None, schema: str | None,
            as_json: bool, config_file: str | None) -> None:
    """Write records to TOPIC: one from --key/--value (or --delete KEY), else JSON lines from
    --file or stdin. Every record is encoded before the first is written (a bad line: nothing
    written), and every one is acknowledged before the summary line."""
    if service and schema:
        raise click.UsageError("--service and --schema both encode: give one")
    if timestamp is not None and timestamp < 0:
        raise ConfigError(f"--timestamp {timestamp} is not milliseconds since the epoch (0 or more)")
    encoder = (P.service_encoder(load_service(service), topic) if service
               else P.schema_encoder(schema) if schema else P.RAW)
    try:
        records = _records(encoder, key, value, delete, file, headers, timestamp)
    except P.BadInput as exc:
        for problem in exc.problems:
            click.echo(f"error: {problem}", err=True)
        raise
    done = deliver(client_settings(load_config(config_file)), topic, records, require_topic=True)
    _summary(topic, done, as_json)


def _records(encoder: P.Encoder, key: str | None, value: str | None, delete: str | None, file: str | None,
             headers: tuple[str, ...], timestamp: int | None) -> list[P.Encoded]:
    if delete is not None:
        if value is not None or key is not None or file is not None:
            raise click.UsageError("--delete KEY writes one tombstone: give it without --key, --value and --file")
        return [P.argument_record(encoder, delete, None, headers, timestamp)]
    if value is not None:
        if file is not None:
            raise click.UsageError("--value writes one record: give it without --file")
        return [P.argument_record(encoder, key, value, headers, timestamp)]
    if key is not None:
        raise click.UsageError("--key needs --value (or --delete KEY for a tombstone)")
    if file is None and sys.stdin.isatty():
        raise click.UsageError("nothing to write: give --value, --file, or JSON lines on stdin")
    name = "stdin" if file is None or file == "-" else file
    try:
        if name == "stdin":
            return P.read_lines(encoder, sys.stdin, name, headers=headers, timestamp=timestamp)
        with open(name, encoding="utf-8") as lines:
            return P.read_lines(encoder, lines, name, headers=headers, timestamp=timestamp)
    except OSError as exc:
        raise ConfigError(f"--file {name}: cannot read it: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{name} is not UTF-8 text ({exc.reason} at byte {exc.start}): give JSON lines") from None


def _summary(topic: str, done: Delivered, as_json: bool) -> None:
    if as_json:
        document: dict[str, Any] = {"topic": topic, "records": done.records,
                                    "partitions": {str(p): n for p, n in done.partitions.items()},
                                    "topic_partitions": done.topic_partitions}
        out.emit_json(document, lines=True)
        return
    which = ", ".join(str(p) for p in done.partitions) or "none"
    plural = "" if done.records == 1 else "s"
    parts = "partition" if len(done.partitions) == 1 else "partitions"
    out.lines([f"wrote {done.records} record{plural} to {topic}: {parts} {which} (of {done.topic_partitions})"])
