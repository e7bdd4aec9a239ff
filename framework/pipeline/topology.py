"""A pipeline's topology as plain data (``Pipeline.describe()``), and that data drawn as an
indented text tree (``text``) or a Mermaid ``flowchart LR`` (``mermaid``).

The data is read from the pipeline's own structures (its steps, the ``children`` that wire
them, its stores and the topic names of ``framework.pipeline.internal``) and holds only
JSON values: names, numbers, booleans, None. Step parameters are the step's own fields
(``framework.pipeline.steps``): a topic is shown by its name, a serde by the name errors
give it, a function by its qualified name, a window spec by its class and parameters. What
is code (a timestamp assigner, a retry's predicates) is named, not described.

``fw describe`` prints any of the three; the member's status page shows the text tree and
the Mermaid source, and serves the data at ``/topology`` (docs/observability.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol

from framework.pipeline import steps as S
from framework.pipeline.calls import Retry
from framework.pipeline.functions import CoProcessFunction, ProcessFunction
from framework.pipeline.internal import CHANGELOG, REPARTITION, TIME_STORE
from framework.time.watermarks import WatermarkStrategy
from framework.windows.functions import WindowFunction

Topology = dict[str, Any]


class Described(Protocol):
    """What ``describe`` reads of a ``Pipeline`` (this module does not import it: the
    pipeline calls this one)."""

    name: str
    default_partitions: int
    steps: dict[str, S.Step]
    children: dict[str, list[str]]
    dead_letter: Any

    def sources(self) -> list[S.Source]: ...
    def global_tables(self) -> list[S.GlobalTable]: ...
    def uses_event_time(self) -> bool: ...
    def store_names(self) -> list[str]: ...
    def table_source(self, store: str) -> S.Source | None: ...
    def changelog_topic(self, store: str) -> str: ...
    def repartition_topic(self, step: str) -> str: ...
    def sink_topics(self) -> list[Any]: ...


# -- the data ------------------------------------------------------------------------------


def describe(pipeline: Described) -> Topology:
    """The topology of ``pipeline`` (see ``Pipeline.describe``)."""
    steps = list(pipeline.steps.values())
    return {
        "service": pipeline.name,
        "partitions": pipeline.default_partitions,
        "event_time": pipeline.uses_event_time(),
        "sources": [{"step": s.name, **topic_data(s.topic), "watermarks": watermarks_data(s.watermarks)}
                    for s in pipeline.sources()],
        "global_tables": [{"step": g.name, **topic_data(g.topic), "watermarks": watermarks_data(g.watermarks),
                           "history_ms": g.history_ms} for g in pipeline.global_tables()],
        "steps": [_step(pipeline, s) for s in steps],
        "edges": [[s.name, child] for s in steps for child in pipeline.children[s.name]],
        "stores": [_store(pipeline, name) for name in pipeline.store_names()],
        "internal_topics": _internal_topics(pipeline),
        "sinks": [{"step": s.name, **topic_data(s.topic)} for s in steps if isinstance(s, S.Sink)],
        "late_outputs": [{"step": s.name, **topic_data(s.late)} for s in steps
                         if isinstance(s, S.WindowStep) and s.late is not None],
        "dead_letter": topic_data(pipeline.dead_letter),
    }


def topic_data(topic: Any) -> dict[str, Any]:
    """A ``Topic``: its name, serdes, the partitions it is created with (None: the
    pipeline's) and whether watermarks are written to it in band."""
    return {"topic": topic.name, "key_serde": serde_name(topic.key_serde),
            "value_serde": serde_name(topic.value_serde), "partitions": topic.partitions,
            "watermarks_in_band": topic.watermarks}


def serde_name(serde: Any) -> str | None:
    """A serde as errors name it: its ``describe()`` (Avro), else its ``repr`` when the class
    gives one, else ``ClassName()``."""
    if serde is None:
        return None
    describe_ = getattr(serde, "describe", None)
    if callable(describe_):
        return str(describe_())
    return f"{type(serde).__name__}()" if type(serde).__repr__ is object.__repr__ else repr(serde)


def watermarks_data(strategy: Any) -> dict[str, Any] | None:
    """A ``WatermarkStrategy``: which generator, its bound, where timestamps come from and
    the idle timeout; None for a source without event time."""
    if strategy is None:
        return None
    kind = ("from_upstream" if strategy.upstream else "punctuated" if strategy.punctuation is not None
            else "bounded_out_of_orderness")
    stamp = strategy.timestamp
    timestamp = ("kafka" if stamp is None else f"field {stamp}" if isinstance(stamp, str)
                 else f"function {function_name(stamp)}")
    out: dict[str, Any] = {"strategy": kind, "timestamp": timestamp, "idle_timeout_ms": strategy.idle_timeout_ms}
    if kind == "bounded_out_of_orderness":
        out["bound_ms"] = strategy.bound_ms
    elif kind == "punctuated":
        out["function"] = function_name(strategy.punctuation)
    return out


def function_name(fn: Any) -> str:
    """A function's qualified name (``<lambda>`` for a lambda); an object's class name."""
    name = getattr(fn, "__qualname__", None)
    return str(name) if isinstance(name, str) else type(fn).__qualname__


_HIDDEN = {"name", "parents", "key_serde"}  # shown elsewhere, or the stream's key serde (its source's)


def _step(pipeline: Described, step: S.Step) -> dict[str, Any]:
    params = {f.name: _param(getattr(step, f.name)) for f in dataclasses.fields(step) if f.name not in _HIDDEN}
    if isinstance(step, S.KeyBy):
        params["key_serde"] = serde_name(step.key_serde)
        params["repartition_topic"] = pipeline.repartition_topic(step.name)
    if isinstance(step, (S.Process, S.CoProcess)):
        params["on_timer"] = _overrides_on_timer(step.function)
    if isinstance(step, S.Table) and (source := pipeline.table_source(step.name)) is not None:
        params["restored_from"] = source.topic.name
    return {"name": step.name, "kind": step.kind, "parents": list(step.parents),
            "children": list(pipeline.children[step.name]), "stateful": step.stateful,
            "event_time": bool(step.event_time), "store": step.name if step.stateful else None, "params": params}


def _param(value: Any) -> Any:
    """A step's field as plain data."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, WatermarkStrategy):
        return watermarks_data(value)
    if isinstance(value, WindowFunction):
        return "full" if value.keeps_elements else "incremental"
    if isinstance(value, Retry):
        return value.describe()
    if hasattr(value, "value_serde") and hasattr(value, "partitions"):  # a Topic (definition imports this module)
        return value.name
    if hasattr(value, "serialize") and hasattr(value, "deserialize"):  # a serde, a dataclass or not
        return serde_name(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # a window spec
        return {"type": type(value).__name__, **dataclasses.asdict(value)}
    if isinstance(value, (ProcessFunction, CoProcessFunction)) or callable(value):
        return function_name(value)
    return serde_name(value)  # anything else: its own describe() or repr, else its class


def _overrides_on_timer(function: Any) -> bool:
    """Whether a process function can act on timers: it defines ``on_timer`` of its own."""
    for base in (ProcessFunction, CoProcessFunction):
        if isinstance(function, base):
            return type(function).on_timer is not base.on_timer
    return False


def _store(pipeline: Described, name: str) -> dict[str, Any]:
    source = pipeline.table_source(name)
    changelog = pipeline.changelog_topic(name) if source is None else None
    return {"name": name, "step": None if name == TIME_STORE else name, "changelogged": changelog is not None,
            "changelog": changelog, "restored_from": changelog if source is None else source.topic.name}


def _internal_topics(pipeline: Described) -> list[dict[str, Any]]:
    """The topics the service makes for itself: a repartition topic per ``key_by``, a
    changelog per changelogged store."""
    out = [{"topic": pipeline.repartition_topic(s.name), "kind": REPARTITION, "of": s.name}
           for s in pipeline.steps.values() if isinstance(s, S.KeyBy)]
    for name in pipeline.store_names():
        if pipeline.table_source(name) is None:
            out.append({"topic": pipeline.changelog_topic(name), "kind": CHANGELOG, "of": name})
    return out


def topic_names(topology: Mapping[str, Any]) -> list[str]:
    """Every topic a topology names, once each, in order of appearance."""
    names = [t["topic"] for key in ("sources", "global_tables", "internal_topics", "sinks", "late_outputs")
             for t in topology[key]]
    return list(dict.fromkeys([*names, topology["dead_letter"]["topic"]]))


# -- as text ---------------------------------------------------------------------------------


def text(topology: Mapping[str, Any]) -> str:
    """An indented tree: each step under its parent (a step with several parents under the
    first, and named at the others), then the stores, the internal topics and the outputs."""
    steps = {s["name"]: s for s in topology["steps"]}
    clock = ", event time" if topology["event_time"] else ""
    lines = [f"service {topology['service']} ({topology['partitions']} partitions{clock})"]
    roots = [s for s in topology["steps"] if not s["parents"]]
    shown: set[str] = set()

    def walk(name: str, depth: int, via: str | None) -> None:
        step, pad = steps[name], "  " * depth
        if name in shown or (via is not None and step["parents"][0] != via):
            lines.append(f"{pad}-> {step['kind']} {name} (below)" if name not in shown
                         else f"{pad}-> {step['kind']} {name} (above)")
            return
        shown.add(name)
        lines.append(f"{pad}{step['kind']} {name}{_summary(step)}")
        for child in step["children"]:
            walk(child, depth + 1, name)

    lines.append("sources")
    lines += [f"  {t['topic']} -> {t['step']} ({_serdes(t)}; {_watermarks(t['watermarks'])})"
              for t in topology["sources"]]
    if topology["global_tables"]:
        lines.append("global tables (every partition, in every process)")
        lines += [f"  {t['topic']} -> {t['step']} ({_serdes(t)}; {_watermarks(t['watermarks'])})"
                  for t in topology["global_tables"]]
    lines.append("steps")
    for root in roots:
        walk(root["name"], 1, None)
    lines.append("stores" if topology["stores"] else "stores: none")
    for store in topology["stores"]:
        whose = "the task clock's watermarks" if store["step"] is None else f"of step {store['step']}"
        where = (f"changelog {store['changelog']}" if store["changelogged"]
                 else f"no changelog: restored from {store['restored_from']}")
        lines.append(f"  {store['name']} ({whose}): {where}")
    lines.append("internal topics" if topology["internal_topics"] else "internal topics: none")
    lines += [f"  {t['topic']} ({t['kind']} of {t['of']})" for t in topology["internal_topics"]]
    lines.append("outputs")
    lines += [f"  {t['topic']} (from {t['step']}, {_serdes(t)})" for t in topology["sinks"]]
    lines += [f"  {t['topic']} (late records of {t['step']}, {_serdes(t)})" for t in topology["late_outputs"]]
    lines.append(f"  {topology['dead_letter']['topic']} (dead letters)")
    return "\n".join(lines)


def _serdes(topic: Mapping[str, Any]) -> str:
    parts = f"key {topic['key_serde']}, value {topic['value_serde']}"
    return parts if topic.get("partitions") is None else f"{parts}, {topic['partitions']} partitions"


def _watermarks(strategy: Mapping[str, Any] | None) -> str:
    if strategy is None:
        return "no watermarks"
    bound = f" {strategy['bound_ms']} ms" if "bound_ms" in strategy else ""
    idle = f", idle after {strategy['idle_timeout_ms']} ms" if strategy["idle_timeout_ms"] is not None else ""
    return f"watermarks {strategy['strategy']}{bound}, timestamp {strategy['timestamp']}{idle}"


def _summary(step: Mapping[str, Any]) -> str:
    """A step's parameters on its line: ``: topic in [key ..., value ...]; watermarks ...``."""
    params = {k: v for k, v in step["params"].items() if k != "watermarks"}  # a source's: under sources
    parts = [f"{k}={_short(v)}" for k, v in params.items() if v is not None and v is not False]
    store = f" [store {step['store']}]" if step["store"] else ""
    return (": " + ", ".join(parts) if parts else "") + store


def _short(value: Any) -> str:
    if isinstance(value, dict):
        return "(" + ", ".join(f"{k}={_short(v)}" for k, v in value.items() if v is not None) + ")"
    return str(value)


# -- as Mermaid ------------------------------------------------------------------------------


def mermaid(topology: Mapping[str, Any]) -> str:
    """A ``flowchart LR``: topics as stadiums, steps as boxes, stores as cylinders joined to
    their step (and to their changelog) by dotted lines. Node ids are ``t<n>``, ``s<n>`` and
    ``d<n>``; every label is quoted, with Mermaid's entity codes for what would end it."""
    out = ["flowchart LR"]
    topics: dict[str, str] = {}
    step_ids = {s["name"]: f"s{i}" for i, s in enumerate(topology["steps"])}

    def topic(name: str, note: str = "") -> str:
        if name not in topics:
            topics[name] = f"t{len(topics)}"
            out.append(f'  {topics[name]}(["{_label(name, note)}"])')
        return topics[name]

    for s in topology["steps"]:
        out.append(f'  {step_ids[s["name"]]}["{_label(s["name"], s["kind"])}"]')
    for src in [*topology["sources"], *topology["global_tables"]]:
        out.append(f"  {topic(src['topic'])} --> {step_ids[src['step']]}")
    for s in topology["steps"]:
        here = step_ids[s["name"]]
        via = s["params"].get("repartition_topic") if s["kind"] == "key_by" else None
        if via is not None:
            out.append(f"  {here} --> {topic(via, 'repartition')}")
            here = topics[via]
        for child in s["children"]:
            out.append(f"  {here} --> {step_ids[child]}")
        if s["kind"] == "global_join":
            out.append(f"  {step_ids[s['params']['table']]} -.-> {step_ids[s['name']]}")
    for sink in topology["sinks"]:
        out.append(f"  {step_ids[sink['step']]} --> {topic(sink['topic'])}")
    for late in topology["late_outputs"]:
        out.append(f"  {step_ids[late['step']]} -- late --> {topic(late['topic'])}")
    for i, store in enumerate(topology["stores"]):
        out.append(f'  d{i}[("{_label(store["name"], "store")}")]')
        if store["step"] is not None:
            out.append(f"  {step_ids[store['step']]} -.- d{i}")
        if store["changelogged"]:
            out.append(f"  d{i} -.-> {topic(store['changelog'], 'changelog')}")
    topic(topology["dead_letter"]["topic"], "dead letters")
    return "\n".join(out)


_ENTITIES: tuple[tuple[str, str], ...] = (("#", "#35;"), ('"', "#quot;"), ("<", "#lt;"), (">", "#gt;"))


def _label(name: str, note: str = "") -> str:
    """``name`` (and ``note`` on a second line) as the inside of a quoted Mermaid label."""
    return _escape(name) + (f"<br/>{_escape(note)}" if note else "")


def _escape(text_: str) -> str:
    for raw, code in _ENTITIES:
        text_ = text_.replace(raw, code)
    return text_
