"""A service's entry in ``docker-compose.yml``, added without disturbing the rest of the file.

The file is edited with ruamel.yaml in round-trip mode: comments, blank lines, anchors and
merge keys (``<<: *service``), quoting and key order survive, so a person's edits to the
file do too. A new entry looks like the ones already there::

    fraud-alerts:
      <<: *service
      build: {context: ., dockerfile: Dockerfile}
      command: ["fw", "run", "services.fraud_alerts.pipeline:pipeline"]

It goes in alphabetical order among the service entries (the entries that run ``fw``; the
broker and Prometheus stay where they are).
"""

from __future__ import annotations

import copy
import io
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark, YAMLError
from ruamel.yaml.mergevalue import MergeValue
from ruamel.yaml.scalarstring import DoubleQuotedScalarString
from ruamel.yaml.tokens import CommentToken

from framework.errors import ConfigError

TEMPLATE_KEY = "x-service"  # the top-level mapping every service entry merges (`&service`)


def _yaml() -> YAML:
    y = YAML()  # round-trip mode
    y.preserve_quotes = True
    y.width = 4096  # never re-wrap a long line (a healthcheck command) the person wrote
    y.indent(mapping=2, sequence=4, offset=2)
    return y


def parse(text: str, where: str) -> Any:
    """Parse YAML for round-trip editing (an empty text is an empty mapping); invalid YAML
    is a one-line ``ConfigError`` naming ``where``."""
    try:
        return _yaml().load(text) if text.strip() else CommentedMap()
    except YAMLError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"{where} is not valid YAML ({first}); "
                          "fix it, then run the command again") from exc


def load(text: str, where: str = "docker-compose.yml") -> CommentedMap:
    """Parse a compose file for round-trip editing; ``ConfigError`` if it is not a mapping
    with a ``services`` mapping."""
    doc = parse(text, where)
    if not isinstance(doc, CommentedMap):
        raise ConfigError(f"{where} is not a YAML mapping; fix it, then run the command again")
    services = doc.setdefault("services", CommentedMap())
    if not isinstance(services, CommentedMap):
        raise ConfigError(f"`services` in {where} is not a mapping; fix it, then run the command again")
    return doc


def dump(doc: CommentedMap) -> str:
    out = io.StringIO()
    _yaml().dump(doc, out)
    return out.getvalue()


def service_entry(doc: CommentedMap, service: str) -> Any:
    """The entry of ``service`` in a loaded compose file, or None."""
    return doc["services"].get(service)


def with_service(text: str, service: str, target: str, *, replace: bool = False,
                 where: str = "docker-compose.yml") -> str:
    """``text`` with an entry for ``service`` that runs ``fw run <target>``.

    An existing entry is kept as it is unless ``replace``; then it is rebuilt in place.
    Everything else in the file is left byte for byte.
    """
    doc = load(text, where)
    services: CommentedMap = doc["services"]
    if service in services and not replace:
        return text
    entry = _new_entry(doc, target)
    if service in services:
        services[service] = entry  # same position, same surrounding comments
    else:
        _insert_sorted(services, service, entry)
    return dump(doc)


def entry_matches(text: str, service: str, target: str) -> bool:
    """Whether the file's entry for ``service`` is the one ``with_service`` writes (same
    merge, build and command), ignoring formatting."""
    doc = load(text)
    current = service_entry(doc, service)
    if current is None:
        return False
    wanted = _new_entry(doc, target)
    return _plain(current) == _plain(wanted) and _merged(current) == _merged(wanted)


def _new_entry(doc: CommentedMap, target: str) -> CommentedMap:
    """An entry in the style of the file's existing service entries."""
    entry = CommentedMap()
    template = doc.get(TEMPLATE_KEY)
    if isinstance(template, CommentedMap):
        if not template.anchor.value:
            template.yaml_set_anchor("service", always_dump=True)
        merge = MergeValue()
        merge.append(template)
        merge.merge_pos = 0
        entry.add_yaml_merge(merge)
    else:  # no shared part to merge: the entry carries what every service needs itself
        entry["restart"] = "unless-stopped"
        entry["depends_on"] = {"kafka": {"condition": "service_healthy"}}
    entry["build"] = _build_like_others(doc["services"])
    command = CommentedSeq(DoubleQuotedScalarString(s) for s in ("fw", "run", target))
    command.fa.set_flow_style()
    entry["command"] = command
    return entry


def _build_like_others(services: CommentedMap) -> Any:
    for value in services.values():
        if isinstance(value, CommentedMap) and "command" in value and "build" in value:
            return copy.deepcopy(value["build"])  # a plain mapping or string: no anchors to break
    build = CommentedMap([("context", "."), ("dockerfile", "Dockerfile")])
    build.fa.set_flow_style()
    return build


def _insert_sorted(services: CommentedMap, service: str, entry: CommentedMap) -> None:
    """Insert among the service entries (those that run ``fw``; not the broker, not
    Prometheus), before the first that sorts after ``service``, else after the last of
    them, else at the end. Blank lines between entries live as comments before each key,
    except where the previous entry's value carries a comment block; the new key takes a
    blank line, or hands it to the entry it pushes down."""
    keys = list(services)
    ours = [i for i, k in enumerate(keys) if i > 0 and _runs_fw(services[k])]
    pos = next((i for i in ours if str(keys[i]) > service), ours[-1] + 1 if ours else len(keys))
    services.insert(pos, service, entry)
    pushed = keys[pos] if pos < len(keys) else None
    if pos == 0:
        return
    if pushed is not None and pushed not in services.ca.items:
        services.ca.items[pushed] = _blank_line()
    else:
        services.ca.items[service] = _blank_line()


def _runs_fw(entry: Any) -> bool:
    """Whether a compose entry is a service's: its command runs ``fw``."""
    command = entry.get("command") if isinstance(entry, dict) else None
    if isinstance(command, str):
        return command.split()[:1] == ["fw"]
    return isinstance(command, list) and command[:1] == ["fw"]


def _blank_line() -> list[Any]:
    return [None, [CommentToken("\n", CommentMark(0), None)], None, None]


def _plain(value: Any) -> Any:
    """A comparable copy: mappings and sequences as dicts and lists, merged keys included."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _merged(entry: Any) -> list[Any]:
    merge = getattr(entry, "merge", None)
    return [id(m) for m in merge] if merge else []
