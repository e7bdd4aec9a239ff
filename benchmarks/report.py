"""docs/benchmarks.md and docs/benchmarks.png from results JSON files of benchmarks/suite.py.

    benchmarks/.venv-quix/bin/python benchmarks/report.py [--no-plot] benchmarks/results/<run>.json \
        [<latency-run>.json ...] [<replay-run>.json ...] [<100ms-run>.json] [<join-run>.json ...]

The first file is the main run: its throughput, latency and profile make the report's tables,
and the targets are judged against it. Further files add, each by what it holds:

- a latency run at a fixed rate (``--phases latency --latency-rate R``, also the soak): a
  "Latency at a fixed rate" section;
- a run whose checkpoint/commit interval is 100 ms: "Exactly-once at a 100 ms checkpoint" and
  the low-latency targets (without one they are "not measured");
- replay runs (``--phases ...,replay``): one table each in "Replay on Spark", next to the live
  ``fw-1`` run of the same file;
- stream-table join runs (``--workloads j1``) and ``table_memory.py``'s
  ``*-table-memory.json``: "Stream-table join";
- ``async_calls.py``'s ``*-async-calls.json``: "Async steps" (and its target), and the figures
  between the ``<!-- async:begin -->`` and ``<!-- async:end -->`` markers of docs/async.md;
- a throughput-only run of other systems on the same data size and interval (a slow system run
  once, say, while the main run repeats the others): its rows join the main run's tables, and
  the report's head names the file and its number of runs.

It also rewrites the table between the ``<!-- benchmarks:begin -->`` and
``<!-- benchmarks:end -->`` markers of the README (``fw-1``, exactly-once, against each peer).

A file with repeats (``--repeat N``: one row per run, with its ``round``) shows each figure as
the median of the runs with their min–max beside it. The report is results only: the lab notes
(A/Bs, profiles, what was tried) stay in benchmarks/NOTES.md, which the report links to.
``--no-plot`` leaves docs/benchmarks.png as it is; the plot is drawn only from a main file that
compares several systems (matplotlib comes from the benchmark venv, never from the project's
dependencies; without it only the markdown is written).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
ASYNC_DOC = ROOT / "docs" / "async.md"
README = ROOT / "README.md"
PNG = ROOT / "docs" / "benchmarks.png"
ORDER = ("fw-1", "fw-n", "quix", "kstreams", "flink-1", "flink-2", "pyflink", "raw")
G = {"exactly_once": "EOS", "at_least_once": "ALO"}
# the figures a repeated case shows as median (min–max)
METRICS = ("records_per_s", "cpu_s_per_million", "peak_rss_mb", "p50_ms", "p99_ms", "max_ms", "job_records_per_s",
           "processing_records_per_s", "records_per_s_per_core", "job_cpu_s_per_million")
LOW_COMMIT_MS = 100  # the low-latency exactly-once setting the project aims at
TARGET_HEAD = ["| target | workload | guarantee | where we stand | met? |", "|---|---|---|---|---|"]


# --- figures: one row per case, the median of its repeats -----------------------------------

def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "–"
    if isinstance(v, float) and v < 100:
        return f"{v:,.1f}{unit}"
    return f"{int(v):,}{unit}"


def _medians(rows: list[dict], key: Callable[[dict], Any], metric: str) -> list[dict]:
    """One row per ``key``. Of the runs of ``benchmarks/run --repeat N`` the row is the run
    with the median ``metric`` (of an even number, the lower of the middle two), so its check
    and status belong to a real run; ``runs`` keeps every run's figures, for the median and
    min–max of each (``_med``, ``_cell``)."""
    groups: dict[Any, list[dict]] = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    out = []
    for runs in groups.values():
        if len(runs) == 1:
            out.append(runs[0])
            continue
        middle = sorted(runs, key=lambda r: r.get(metric) or 0)[(len(runs) - 1) // 2]
        out.append({**middle, "runs": {m: [r[m] for r in runs if r.get(m) is not None] for m in METRICS}})
    return out


def _med(r: dict | None, key: str) -> Any:
    """``key`` of a case: the median over its runs when repeated, else the one run's."""
    values = sorted(((r or {}).get("runs") or {}).get(key) or [])
    return values[(len(values) - 1) // 2] if values else (r or {}).get(key)


def _cell(r: dict | None, key: str) -> str:
    """The median, with `` (min–max)`` of the runs when the case was repeated."""
    values = sorted(((r or {}).get("runs") or {}).get(key) or [])
    spread = f" ({_fmt(values[0])}–{_fmt(values[-1])})" if len(values) > 1 else ""
    return _fmt(_med(r, key)) + spread


def _repeats(e: dict) -> str:
    """What a table's figures are, for its title: said only when the file has repeats."""
    n = e["config"].get("repeat", 1)
    return f" (median of {n} runs, min–max in parentheses)" if n > 1 else ""


def _index(rows: list[dict], metric: str = "records_per_s") -> dict[tuple[str, str, str], dict]:
    return {(r["workload"], r["guarantee"], r["system"]): r
            for r in _medians(rows, lambda r: (r["workload"], r["guarantee"], r["system"]), metric)}


def _systems(d: dict) -> list[str]:
    return [s for s in ORDER if s in d["systems"]]


def _cases(d: dict) -> list[tuple[str, str]]:
    seen = []
    for r in d["throughput"] + d["latency"]:
        c = (r["workload"], r["guarantee"])
        if c not in seen:
            seen.append(c)
    return seen


def _load(e: dict) -> str:
    """The load average (1, 5, 15 min) at a run's start and end: how busy the shared machine was."""
    def three(xs: list) -> str:
        return ", ".join(f"{x:.2f}" for x in xs)
    return f"load average {three(e['loadavg_at_start'])} at the start, {three(e.get('loadavg_at_end', []))} at the end"


def _on(e: dict) -> str:
    """The processor a further file ran on: the machine of one run is not always another's."""
    return f"on {e.get('machine', {}).get('cpu', 'an unrecorded processor')}"


def _check(r: dict | None) -> str:
    ok = (r or {}).get("check", {}).get("ok")
    return "–" if ok is None else ("✓" if ok else "✗")


def _tp_cell(r: dict | None) -> str:
    if r is None:
        return "–"
    cell = _cell(r, "records_per_s") + (" (partial†)" if r.get("partial") else "")
    chk = _check(r)
    return cell + ("" if chk == "–" else " " + chk)


def _lat_cell(d: dict, r: dict | None) -> str:
    """p50 / p99 / max, ‡ when the input rate is above the system's backlog throughput in ``d``."""
    if r is None or r.get("p50_ms") is None:
        return "–"
    cell = " / ".join(_cell(r, k) for k in ("p50_ms", "p99_ms", "max_ms"))
    tp = _med(_index(d["throughput"]).get((r["workload"], r["guarantee"], r["system"])), "records_per_s")
    return cell + (" ‡" if tp and tp < r["rate"] else "")


def table(d: dict, title: str, rows: list[dict], cell: Callable[[dict | None], str], metric: str = "records_per_s",
          rate: bool = False) -> list[str]:
    """One row per workload and guarantee, one column per system of ``d``; with ``rate``, first
    the input rate of the case (a latency phase feeds every system of a case at one rate)."""
    systems, idx = _systems(d), _index(rows, metric)
    out = [f"**{title}**", "", "| workload | guarantee | " + ("input, records/s | " if rate else "")
           + " | ".join(systems) + " |", "|---|---|" + "---:|" * (len(systems) + rate)]
    for w, g in _cases(d):
        mine = [idx[(w, g, s)] for s in systems if (w, g, s) in idx]
        if mine:
            out.append(f"| {w} | {G[g]} | " + (f"{_fmt(mine[0].get('rate'))} | " if rate else "")
                       + " | ".join(cell(idx.get((w, g, s))) for s in systems) + " |")
    return out + [""]


# --- the report's head and the main run's tables --------------------------------------------

def _flink_versions(m: dict) -> str:
    """The Flink releases of a run with Flink systems (older results have none)."""
    return (f", Apache Flink {m['flink']}" if m.get("flink") else "") + (f", PyFlink {m['pyflink']}" if m.get("pyflink") else "")


def _flink_setup(systems: list[str]) -> str:
    if not {"flink-1", "flink-2", "pyflink"} & set(systems):
        return ""
    return (" Flink runs in a local MiniCluster in one JVM (-Xmx1g; PyFlink: the JVM it starts, without a heap "
            "limit, and its Python worker, counted together), heap state backend, checkpoints to local files.")


def _system_notes(d: dict) -> str:
    """How the compared systems are set up where it changes what their figures mean."""
    systems, c = _systems(d), d["config"]
    notes = []
    if "fw-n" in systems:
        notes.append(f"`fw-n` runs {c['fw_processes_n']} processes (`fw run --processes {c['fw_processes_n']}`).")
    if "kstreams" in systems:
        notes.append(f"Kafka Streams runs {c['kstreams_threads']} stream threads in one JVM (-Xmx1g), its record "
                     "cache off (one output per input in W2, as every other system).")
    if "quix" in systems:
        notes.append("Quix Streams closes session windows per partition (`closing_strategy=\"partition\"`), "
                     "which W4 needs to emit every key's last session.")
    if "raw" in systems:
        notes.append("`raw` is a plain confluent-kafka consume-produce loop with the same serde, client settings "
                     "and transactions and its state in Python dicts (no changelog, no RocksDB): the ceiling.")
    return (" ".join(notes) + _flink_setup(systems)).strip()


def head(d: dict, json_name: str) -> list[str]:
    """Title, where the figures come from, the run and the machine, the systems."""
    m, c = d["machine"], d["config"]
    return [
        "# Benchmarks",
        "",
        ("Generated by `benchmarks/report.py` from the results files each section names; the main run is "
        f"`benchmarks/results/{json_name}`. Method and commands: "
        "[benchmarks/README.md](../benchmarks/README.md). Lab notes: "
        "[benchmarks/NOTES.md](../benchmarks/NOTES.md) (A/B comparisons, profiles, what was tried and dropped). "
        "One small machine: single runs of one case vary (the lab notes say by how much), so measure on your "
        "own hardware with `benchmarks/run` before quoting a number."),
        "",
        f"- Run: {d['run']}{' (' + d['label'] + ')' if d.get('label') else ''}; "
        f"{c['records']:,} input records ({c['keys']:,} keys, {c['partitions']} partitions, Avro), "
        f"checkpoint/commit interval {c['commit_interval_ms']} ms, "
        + (f"latency phase {c['latency_seconds']:g} s after {c['latency_warmup_s']:g} s of warm-up; "
           if d["latency"] else "throughput only; ")
        + ("one run per case" if c.get("repeat", 1) == 1 else f"{c['repeat']} runs per case: medians, min–max beside")
        + "".join(f"; {', '.join(f'`{s}`' for s in m['systems'])} from `benchmarks/results/{m['name']}` (run "
                  f"{m['run']}, {m['repeat']} run{'s' if m['repeat'] > 1 else ''} per case, {m['load']})"
                  for m in d.get("merged", [])) + ".",
        (f"- Machine: {m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB, Python {m['python']}, "
        f"{m['java']}, Kafka {m['kafka']}; confluent-kafka {m['confluent_kafka']}, Quix Streams {m['quixstreams']}"
        f"{_flink_versions(m)}. The broker, the system under test and the load generator share the "
        f"{m['cores']} cores; {_load(d)}."),
        f"- Systems: {'; '.join('`' + s + '` = ' + d['systems'][s] for s in _systems(d))}. {_system_notes(d)}",
        (f"- Workloads: {'; '.join(f'{w.upper()} {desc}' for w, desc in d['workloads'].items())}. Every output is "
        "read back (read_committed) and compared with a reference computed in plain Python."),
        "",
    ]


def throughput_section(d: dict) -> list[str]:
    return [
        "## Throughput over the backlog",
        "",
        ("Each system reads the whole input backlog with its own group. Records/s from the first output (or first "
        "commit) to the last output record; ✓ = the output equals the reference exactly, ✗ = it does not. † = "
        "stopped by the run's time limit: the rate of committed progress until then, output not checked. CPU "
        "time (user + system) and memory are sampled from /proc for every process of the system."),
        "",
        *table(d, f"records/s{_repeats(d)}", d["throughput"], _tp_cell),
        *table(d, f"CPU seconds per million records (all processes of the system){_repeats(d)}", d["throughput"],
               lambda r: _cell(r, "cpu_s_per_million") if r else "–"),
        *table(d, f"peak RSS, MB (sum of the processes' VmHWM; the JVM included){_repeats(d)}", d["throughput"],
               lambda r: _cell(r, "peak_rss_mb") if r else "–"),
    ]


def latency_section(d: dict) -> list[str]:
    if not d["latency"]:
        return []
    return [
        "## End-to-end latency at a fixed rate",
        "",
        ("A fresh input topic fed at half of the framework's best throughput for the workload and guarantee; "
        "latency from the input's produce time (W1, W2) or from the moment a window could close (window end + "
        f"{d['config']['watermark_bound_ms'] / 1000:g} s bound: W3, W4) to a separate read_committed consumer "
        "seeing the output. Under exactly-once an output "
        "becomes visible when its transaction commits, once per checkpoint interval, so a record waits up to one "
        "interval and then for the commit."),
        "",
        *table(d, "p50 / p99 / max, ms (‡ = the input rate is above the system's throughput over the backlog: "
               "it falls behind and its latency grows with the run)", d["latency"], lambda r: _lat_cell(d, r), "p99_ms",
               rate=True),
    ]


def supplementary(d: dict, extra: list[tuple[str, dict]]) -> list[str]:
    """Latency-only runs at a fixed rate that the system sustains (``--phases latency
    --latency-rate R``): the latency of the mechanism (checkpoint interval) rather than of a
    backlog."""
    lines: list[str] = []
    for name, e in extra:
        rates = sorted({r["rate"] for r in e["latency"]})
        lines += [f"## Latency at a fixed {', '.join(f'{r:,}' for r in rates)} records/s (run {e['run']})", "",
                  (f"From `benchmarks/results/{name}` ({_on(e)}): the same latency phase at a fixed rate that "
                  "most systems sustain on that machine, so their numbers show the checkpoint/commit mechanism rather than "
                  f"a growing backlog; {e['config']['latency_seconds']:g} s measured after "
                  f"{e['config']['latency_warmup_s']:g} s of warm-up."), ""]
        same = e.get("machine", {}).get("cpu") == d["machine"].get("cpu")
        ref = d if same else {"throughput": []}  # another processor's rates say nothing of the main run's
        lines += table(e, "p50 / p99 / max, ms (" + ("‡ = the rate is above the system's backlog throughput in the "
                       "main run)" if same else "another processor than the main run's: no backlog throughput to "
                       "set the rate against)"), e["latency"], functools.partial(_lat_cell, ref), "p99_ms")
    return lines


def plot_section() -> list[str]:
    if not (PNG.exists() or _have_matplotlib()):
        return []
    return ["## Plot", "", "![throughput and latency by system and workload](benchmarks.png)", ""]


def profile_section(d: dict) -> list[str]:
    """The main run's profile, the top 8 functions by self time per case: where a speed-up
    must come from. The full lists and the inclusive times stay in the results file."""
    if not d.get("profile"):
        return []
    lines = ["## Profile of the framework's hot loop", "",
             ("`fw-1` once more per case under `py-spy record` (250 Hz, 1 process; its rate is not a result): the "
             "share of samples whose innermost frame is the function, top 8 per case."), "",
             "| case | samples | records/s under the profiler | self time, top 8 |", "|---|---:|---:|---|"]
    for case, p in d["profile"].items():
        w, g = case.split("/", 1)
        if "self" not in p:
            lines.append(f"| {w} {G.get(g, g)} | – | – | {p.get('error')} |")
            continue
        top = "; ".join(f"`{f}` {pct}%" for f, pct in p["self"][:8])
        lines.append(f"| {w} {G.get(g, g)} | {p['samples']:,} | {_fmt(p.get('records_per_s_under_profiler'))} | {top} |")
    return lines + [""]


# --- cases of the main run measured again on later code -------------------------------------

def _remeasures(d: dict, e: dict) -> bool:
    """``e`` measures again some of the main run's cases: throughput only, systems of the main
    run (so not a complement), the same keys, partitions and interval, and the same data size
    or a larger one (on a faster machine the raw loop's W3 is through 500,000 records within
    about one commit interval, too soon to measure a rate)."""
    if "config" not in e or not e.get("throughput") or e.get("latency") or e.get("replay"):
        return False
    same = all(e["config"].get(k) == d["config"].get(k) for k in ("keys", "partitions", "commit_interval_ms"))
    return same and e["config"]["records"] >= d["config"]["records"] and set(e["systems"]) <= set(d["systems"]) \
        and all(r["workload"] in d["workloads"] for r in e["throughput"])


def latest(d: dict, remeasured: list[tuple[str, dict]]) -> dict:
    """The main run with every case a re-measure ran replaced by that file's runs (a later file's
    over an earlier one's); each replaced row names its file in ``from``."""
    cases: dict[tuple[str, str, str], list[dict]] = {}
    for r in d["throughput"]:
        cases.setdefault((r["workload"], r["guarantee"], r["system"]), []).append(r)
    for name, e in sorted(remeasured, key=lambda ne: ne[1]["run"]):
        mine: dict[tuple[str, str, str], list[dict]] = {}
        for r in e["throughput"]:
            mine.setdefault((r["workload"], r["guarantee"], r["system"]), []).append(
                {**r, "from": name, "cpu": e.get("machine", {}).get("cpu")})
        cases.update(mine)
    return {**d, "throughput": [r for rows in cases.values() for r in rows]}


def _from(r: dict | None) -> str:
    """`` (`file`)`` for a row of a re-measure, nothing for the main run's."""
    return f" (`{r['from']}`)" if r and r.get("from") else ""


def remeasured_section(d: dict, remeasured: list[tuple[str, dict]]) -> list[str]:
    """Each re-measure beside the main run's figures of the same cases, with ``fw-1`` ÷ the raw
    loop where the file ran both."""
    if not remeasured:
        return []
    lines = ["## Cases measured again on later code", "",
             ("Some cases of the main run, run again after later changes of the framework, one after another on the "
              "same data size or a larger one (each file says); the targets below use these figures where a file "
              "has them (the row names the file). "
              "The main run's figures stand beside them: the same code measured at another time differs by the "
              "spreads shown.")]
    main = _index(d["throughput"])
    for name, e in remeasured:
        tp = _index(e["throughput"])
        lines += ["", (f"From `benchmarks/results/{name}` (run {e['run']} {_on(e)}; {e['config']['records']:,} records; "
                       f"{_load(e)}), exactly-once"
                       f"{_repeats(e)}:"), "",
                  "| workload | system | records/s | CPU s per million | main run's records/s | `fw-1` ÷ raw here |",
                  "|---|---|---:|---:|---:|---:|"]
        for (w, g, s), r in sorted(tp.items(), key=lambda kv: (kv[0][0], kv[0][1], ORDER.index(kv[0][2]))):
            fw, raw = _fw_and_raw(tp, w, g)
            share = f"{fw / raw:.0%}" if s == "fw-1" and fw and raw else ""
            lines.append(f"| {w} {G[g]} | `{s}` | {_tp_cell(r)} | {_cell(r, 'cpu_s_per_million')} | "
                         f"{_cell(main.get((w, g, s)), 'records_per_s')} | {share} |")
    return lines + [""]


# --- exactly-once at a 100 ms checkpoint ----------------------------------------------------

LOW_SYSTEMS = ("fw-1", "kstreams")
LOW_WORKLOADS = ("w1", "w2")


def _share_of_main(d: dict, e: dict, w: str, s: str) -> float | None:
    """``s``'s exactly-once records/s in ``e`` ÷ the same in ``d`` (its 1 s figure: the main
    run's, or a re-measure's, ``latest``); None when the two ran on different processors."""
    low = _med(_index(e["throughput"]).get((w, "exactly_once", s)), "records_per_s")
    row = _index(d["throughput"]).get((w, "exactly_once", s))
    main = _med(row, "records_per_s")
    same_cpu = (row or {}).get("cpu", d.get("machine", {}).get("cpu")) == e.get("machine", {}).get("cpu")
    return low / main if low and main and same_cpu else None


def low_latency_section(d: dict, low: tuple[str, dict] | None, fixed: list[tuple[str, dict]]) -> list[str]:
    """``fw-1`` and Kafka Streams exactly-once with a 100 ms checkpoint, W1 and W2: the
    latency the shorter interval buys and the throughput it costs against the main run; then
    the latency at a rate fixed by hand (``fixed``: files of a 100 ms latency phase alone)."""
    if not low:
        return []
    return _low_table(d, low) + [line for f in fixed for line in _low_fixed_table(d, f)] + checkpoint_phases(
        d, [e for _, e in [low, *fixed]])


def _low_fixed_table(d: dict, run: tuple[str, dict]) -> list[str]:
    name, e = run
    lat = _index(e["latency"], "p99_ms")
    lines = [(f"At a fixed rate, from `benchmarks/results/{name}` (run {e['run']} {_on(e)}; latency phase alone, "
              f"{e['config']['latency_seconds']:g} s after {e['config']['latency_warmup_s']:g} s of warm-up; "
              f"{_load(e)}): a rate both systems sustain beside the load generator and the watcher, so the "
              "figures show the checkpoint mechanism rather than a growing backlog."), "",
             "| workload | system | p50 / p99 / max, ms | input rate |", "|---|---|---:|---:|"]
    for w in LOW_WORKLOADS:
        for s in LOW_SYSTEMS:
            r = lat.get((w, "exactly_once", s))
            if r:
                lines.append(f"| {w} | `{s}` | {_lat_cell(d, r)} | {_fmt(r.get('rate'))} |")
    return lines + [""]


def _low_table(d: dict, low: tuple[str, dict]) -> list[str]:
    name, e = low
    lat, tp = _index(e["latency"], "p99_ms"), _index(e["throughput"])
    lines = ["## Exactly-once at a 100 ms checkpoint", "",
             (f"From `benchmarks/results/{name}` (run {e['run']} {_on(e)}; {e['config']['records']:,} records, checkpoint/commit "
             f"interval {e['config']['commit_interval_ms']} ms; {_load(e)}). Latency as above, at the rate given; "
             "% of the 1 s figure = exactly-once records/s here ÷ the same system's at "
             f"{d['config']['commit_interval_ms']} ms: in the main run, or in the later re-measure of the case "
             "when there is one (the section above)."), "",
             f"| workload | system | p50 / p99 / max, ms | input rate | records/s{_repeats(e)} | % of the 1 s figure |",
             "|---|---|---:|---:|---:|---:|"]
    for w in LOW_WORKLOADS:
        for s in LOW_SYSTEMS:
            r, t = lat.get((w, "exactly_once", s)), tp.get((w, "exactly_once", s))
            if not (r or t):
                continue
            share = _share_of_main(d, e, w, s)
            lines.append(f"| {w} | `{s}` | {_lat_cell(e, r)} | {_fmt((r or {}).get('rate'))} | {_tp_cell(t)} | "
                         f"{'–' if share is None else f'{share:.0%}'} |")
    return lines + [""]


PHASES = ("state", "flush", "offsets", "commit")  # a checkpoint's parts, as fw-1's /status times them


def _phase_rows(e: dict, phase: str, rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        c = r.get("checkpoints") or {}
        ms = c.get("phases_ms") or {}
        if r["system"] != "fw-1" or r["guarantee"] != "exactly_once" or r["workload"] not in LOW_WORKLOADS or not ms:
            continue
        out.append(f"| {r['workload']} | {e['config']['commit_interval_ms']} ms | {phase}"
                   f"{' at ' + _fmt(r['rate']) + '/s' if r.get('rate') else ''}"
                   f"{'' if r.get('round') is None else ', run ' + str(r['round'] + 1)} | {c.get('completed', 0):,} | "
                   + " | ".join(f"{ms.get(k, 0):.1f}" for k in PHASES) + f" | {sum(ms.values()):.1f} |")
    return out



def checkpoint_phases(d: dict, lows: list[dict]) -> list[str]:
    """Where an exactly-once checkpoint of ``fw-1`` spends its time, at 100 ms and at the main
    run's interval: the means its ``/status`` showed at the end of each run."""
    rows = [row for e in [*lows, d] for row in _phase_rows(e, "backlog", e["throughput"])
            + _phase_rows(e, "latency", e["latency"])]
    if not rows:
        return []
    return [("**Where a checkpoint's time goes** (`fw-1`, exactly-once: the mean milliseconds of each part of its "
            "completed checkpoints, from its `/status` at the end of the run. state = the write caches to the "
            "changelogs and to RocksDB; flush = waiting for every delivery report; offsets = "
            "`send_offsets_to_transaction`; commit = `commit_transaction`. The broker round trips are the last two.)"),
            "", "| workload | interval | run | checkpoints | state | flush | offsets | commit | total |",
            "|---|---:|---|---:|---:|---:|---:|---:|---:|", *rows, ""]


# --- targets ---------------------------------------------------------------------------------

def _verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else ("met" if ok else "not met")


def _row(target: str, w: str, g: str, stands: str, ok: bool | None) -> str:
    return f"| {target} | {w} | {g} | {stands} | {_verdict(ok)} |"


def _fw_and_raw(tp: dict, w: str, g: str) -> tuple[Any, Any]:
    """``fw-1``'s and the raw loop's records/s for a case, when both rows come from one file (a
    share of the raw loop compares one run's figures); else ``(None, None)``."""
    fw, raw = tp.get((w, g, "fw-1")), tp.get((w, g, "raw"))
    if not (fw and raw) or fw.get("from") != raw.get("from"):
        return None, None
    return _med(fw, "records_per_s"), _med(raw, "records_per_s")


def _ours(tp: dict, w: str, g: str, beside: dict | None = None) -> tuple[Any, str]:
    """The framework's best records/s for a case (``fw-1`` or ``fw-n``) and which one it is;
    with ``beside``, only from the file that row is from (a share compares one run's figures)."""
    vals = [(_med(tp[(w, g, s)], "records_per_s"), s) for s in ("fw-1", "fw-n") if (w, g, s) in tp
            and (beside is None or tp[(w, g, s)].get("from") == beside.get("from"))]
    vals = [v for v in vals if v[0]]
    return max(vals) if vals else (None, "")


def _absent(d: dict, system: str, json_name: str, target: str, workloads: str) -> list[str]:
    """One "not measured" row per guarantee when the main run has no ``system``."""
    guarantees = dict.fromkeys(g for _, g in _cases(d))
    return [_row(target, workloads, G[g], f"no `{system}` run in `{json_name}`", None) for g in guarantees]


def _ahead_targets(d: dict, json_name: str, rival: str, target: str, factor: float) -> list[str]:
    """Our best records/s ≥ ``factor`` × ``rival``'s, per workload and guarantee."""
    if rival not in d["systems"]:
        return _absent(d, rival, json_name, target, "all")
    tp, lines = _index(d["throughput"]), []
    for w, g in _cases(d):
        fw, which = _ours(tp, w, g)
        other = tp.get((w, g, rival))
        theirs = _med(other, "records_per_s")
        if not (fw and theirs):
            lines.append(_row(target, w, G[g], f"no `fw-1`/`fw-n` and `{rival}` run of it", None))
            continue
        assert other is not None  # theirs is its figure
        partial = " (partial†)" if other.get("partial") else ""
        lines.append(_row(target, w, G[g], f"{which} {fw:,} vs {theirs:,}{partial} rec/s = {fw / theirs:.2f}×",
                          fw / theirs >= factor))
    return lines


def _flink_core_targets(d: dict, json_name: str) -> list[str]:
    """Within 2× of Flink Java per core: ``fw-1``'s CPU seconds per million records at most
    twice ``flink-1``'s, W2–W4 (the stateful workloads), each guarantee."""
    target = "within 2× of Flink Java per core: `fw-1` CPU s/M ≤ 2 × `flink-1`'s"
    if "flink-1" not in d["systems"]:
        return _absent(d, "flink-1", json_name, target, "w2–w4")
    tp, lines = _index(d["throughput"]), []
    for w, g in [c for c in _cases(d) if c[0] in ("w2", "w3", "w4")]:
        ours, theirs = (_med(tp.get((w, g, s)), "cpu_s_per_million") for s in ("fw-1", "flink-1"))
        stands = f"{_fmt(ours)} vs {_fmt(theirs)} CPU s/M = {ours / theirs:.2f}×" if ours and theirs else \
            "no `fw-1` and `flink-1` run of it"
        lines.append(_row(target, w, G[g], stands, ours <= 2 * theirs if ours and theirs else None))
    return lines


RAW_SHARES = {"w3": 0.75, "w4": 0.70}


def _raw_targets(d: dict) -> list[str]:
    """Against the raw loop: W1 (our best) ≥ 60% each guarantee; W3 ≥ 75% and W4 ≥ 70%
    (``fw-1``, exactly-once)."""
    tp, lines = _index(d["throughput"]), []
    for g in ("exactly_once", "at_least_once"):
        raw = _med(tp.get(("w1", g, "raw")), "records_per_s")
        fw, which = _ours(tp, "w1", g, tp.get(("w1", g, "raw")) or {})
        if fw and raw:
            lines.append(_row("W1 ≥ 60% of the raw ceiling", "w1", G[g],
                              f"{which} {fw:,} vs {raw:,} rec/s = {fw / raw:.0%}", fw / raw >= 0.6))
    for w, share in RAW_SHARES.items():
        fw, raw = _fw_and_raw(tp, w, "exactly_once")
        target = f"{w.upper()} ≥ {share:.0%} of the raw loop (`fw-1`)"
        stands = (f"fw-1 {fw:,} vs {raw:,} rec/s = {fw / raw:.0%}{_from(tp.get((w, 'exactly_once', 'fw-1')))}"
                  if fw and raw else "no `fw-1` and `raw` run of it")
        lines.append(_row(target, w, "EOS", stands, fw / raw >= share if fw and raw else None))
    return lines


def _latency_targets(d: dict) -> list[str]:
    """EOS p99 at most one checkpoint interval + 100 ms, at half our maximum."""
    lat, commit, lines = _index(d["latency"], "p99_ms"), d["config"]["commit_interval_ms"], []
    for w, g in _cases(d):
        for s in ("fw-1", "fw-n") if g == "exactly_once" else ():
            p99 = _med(lat.get((w, g, s)), "p99_ms")
            if p99 is not None:
                lines.append(_row(f"EOS p99 ≤ checkpoint interval + 100 ms ({commit + 100} ms), at half our max",
                                  w, "EOS", f"{s} p99 {p99:,} ms", p99 <= commit + 100))
    return lines


def _memory_thirds(series: list) -> tuple[str, bool] | None:
    """RSS is flat when the last third of the run peaks no more than 10% above the middle
    third (the first third is warm-up: state and client buffers filling). RocksDB's memtables
    make RSS a sawtooth (fill, flush), so floors and end values depend on the phase; growth
    with records processed shows as rising peaks."""
    samples = [v for _, v in series[1:]]  # the first sample is the process starting
    if len(samples) < 6:
        return None
    n = len(samples) // 3
    middle, last = samples[n:2 * n], samples[2 * n:]
    hi1, hi2 = max(middle), max(last)
    return ((f"middle third {min(middle):.0f}–{hi1:.0f} MB, last third {min(last):.0f}–{hi2:.0f} MB "
            f"(peak {(hi2 - hi1) / hi1:+.0%})"), hi2 <= hi1 * 1.1)


def _memory_targets(d: dict) -> list[str]:
    lat, lines = _index(d["latency"], "p99_ms"), []
    for w, g in _cases(d):
        r = lat.get((w, g, "fw-1"))
        verdict = _memory_thirds(r.get("rss_mb_series") or []) if r else None
        if verdict:
            assert r is not None  # the verdict is its series'
            lines.append(_row(f"memory flat (fw-1, latency phase at half our max, {r.get('measured_s', 0):.0f} s; "
                              "the soak runs longer)", w, G[g], *verdict))
    return lines


def _fixed_rate_targets(d: dict, extra: list[tuple[str, dict]]) -> list[str]:
    """The latency runs at a fixed rate: EOS p99 of the framework, and memory over a soak."""
    commit, lines = d["config"]["commit_interval_ms"], []
    for _, e in extra:
        rows = [r for r in e["latency"] if r["guarantee"] == "exactly_once" and r["system"].startswith("fw")
                and r.get("p99_ms") is not None]
        lines += [_row(f"EOS p99 ≤ {commit + 100} ms at {r['rate']:,}/s (run {e['run']})", r["workload"], "EOS",
                       f"{r['system']} p99 {r['p99_ms']:,} ms", r["p99_ms"] <= commit + 100) for r in rows]
        for r in rows:
            verdict = _memory_thirds(r.get("rss_mb_series") or [])
            if verdict and r.get("measured_s", 0) >= 120:  # a soak, not a 20 s latency run
                lines.append(_row(f"memory flat at {r['rate']:,}/s over {r.get('measured_s', 0):.0f} s (run {e['run']})",
                                  r["workload"], "EOS", f"{r['system']} {verdict[0]}", verdict[1]))
    return lines


LOW_P99_MS, LOW_SHARE = 250, 0.8


def _low_row(d: dict, e: dict, w: str) -> list[str]:
    """The two low-latency targets of one workload, Kafka Streams' figures beside ours."""
    lat, tp = _index(e["latency"], "p99_ms"), _index(e["throughput"])
    r, ks = lat.get((w, "exactly_once", "fw-1")), lat.get((w, "exactly_once", "kstreams"))
    best = max((_med(tp.get((w, "exactly_once", s)), "records_per_s") or 0) for s in ("fw-1", "fw-n"))
    ks_tp = _med(tp.get((w, "exactly_once", "kstreams")), "records_per_s")
    beside = (f"; Kafka Streams p50/p99 {_fmt(_med(ks, 'p50_ms'))}/{_fmt(_med(ks, 'p99_ms'))} ms, "
              f"{_fmt(ks_tp)} rec/s" if ks or ks_tp else "")
    p99 = _med(r, "p99_ms")
    if p99 is None or not best:
        stands, ok = "no `fw-1` exactly-once latency and throughput run of it", None
    else:
        assert r is not None  # p99 is its figure
        if r["rate"] * 2 < best - 1:  # the suite's rate is int(best / 2)
            stands, ok = f"input at {r['rate']:,}/s, below half of {best:,}", None
        else:
            stands, ok = f"fw-1 p50/p99 {_fmt(_med(r, 'p50_ms'))}/{p99:,} ms at {r['rate']:,}/s", p99 <= LOW_P99_MS
    share = _share_of_main(d, e, w, "fw-1")
    rate = _med(tp.get((w, "exactly_once", "fw-1")), "records_per_s")
    return [_row(f"EOS p99 ≤ {LOW_P99_MS} ms at a 100 ms checkpoint, at half our max", w, "EOS", stands + beside, ok),
            _row(f"throughput at a 100 ms checkpoint ≥ {LOW_SHARE:.0%} of the 1 s figure", w, "EOS",
                 f"fw-1 {_fmt(rate)} rec/s = {share:.0%} of the 1 s figure"
                 f"{_from(_index(d['throughput']).get((w, 'exactly_once', 'fw-1')))}" + beside if share else
                 "no `fw-1` exactly-once throughput at 1 s and at 100 ms on one processor", share >= LOW_SHARE if share else None)]


def _low_fixed_targets(fixed: list[tuple[str, dict]]) -> list[str]:
    """The 100 ms p99 target at a rate fixed by hand, not at half of our maximum (the row says
    which rate)."""
    lines = []
    for _, e in fixed:
        lat = _index(e["latency"], "p99_ms")
        for w in LOW_WORKLOADS:
            r, ks = lat.get((w, "exactly_once", "fw-1")), lat.get((w, "exactly_once", "kstreams"))
            if r and r.get("p99_ms") is not None:
                beside = f"; Kafka Streams p50/p99 {_fmt(_med(ks, 'p50_ms'))}/{_fmt(_med(ks, 'p99_ms'))} ms" if ks else ""
                lines.append(_row(f"EOS p99 ≤ {LOW_P99_MS} ms at a 100 ms checkpoint, at a fixed {r['rate']:,}/s "
                                  f"(run {e['run']})", w, "EOS",
                                  f"fw-1 p50/p99 {_fmt(_med(r, 'p50_ms'))}/{_fmt(_med(r, 'p99_ms'))} ms{beside}",
                                  r["p99_ms"] <= LOW_P99_MS))
    return lines


def _low_targets(d: dict, low: tuple[str, dict] | None) -> list[str]:
    if not low:
        return [_row(t, "w1, w2", "EOS", "no results file with a 100 ms checkpoint given", None)
                for t in (f"EOS p99 ≤ {LOW_P99_MS} ms at a 100 ms checkpoint, at half our max",
                          f"throughput at a 100 ms checkpoint ≥ {LOW_SHARE:.0%} of the 1 s figure")]
    return [line for w in LOW_WORKLOADS for line in _low_row(d, low[1], w)]


def targets_section(d: dict, json_name: str, extra: list[tuple[str, dict]], low: tuple[str, dict] | None,
                    replays: list[tuple[str, dict]], low_fixed: list[tuple[str, dict]], now: dict,
                    calls: list[tuple[str, dict]] | None = None) -> list[str]:
    """Every target with its figure and met / not met / not measured, grouped by what it
    is about; the figures are the main run's unless the row names another run. Shares of the
    raw loop and of the 1 s figure compare ``now`` (``latest``): a case measured again on later
    code counts with its latest figures, both sides from one file."""
    groups = [
        ("Throughput", _ahead_targets(d, json_name, "quix", "≥ 2× Quix Streams' throughput", 2)
         + _ahead_targets(d, json_name, "pyflink", "ahead of PyFlink's throughput", 1)
         + _flink_core_targets(d, json_name) + _raw_targets(now)),
        ("Latency and memory", _latency_targets(d) + _memory_targets(d) + _fixed_rate_targets(d, extra)),
        ("Low-latency exactly-once (100 ms checkpoint" + (f", `{low[0]}`)" if low else ")"),
         _low_targets(now, low) + _low_fixed_targets(low_fixed)),
    ] + [(f"Replay on Spark, `{name}`", replay_targets(e)) for name, e in replays] \
      + [(f"Async steps, `{name}`", async_targets(e)) for name, e in calls or []]
    lines = ["## Targets", "", (f"Figures of the main run (`{json_name}`) unless the row or the heading names another "
             "run; *not measured*: the given files have no run of it. Memory is flat when the last third of a run "
             "peaks at most 10% above the middle third (the first third is warm-up: state and buffers filling), so "
             "a 20 s latency phase is a weak test and the soak the real one."), ""]
    for title, rows in groups:
        if rows:
            lines += [f"**{title}**", "", *TARGET_HEAD, *rows, ""]
    return lines


# --- async steps (benchmarks/async_calls.py) --------------------------------------------------

ASYNC_SHARE = 0.4  # the async step's target: at least this share of capacity / latency


def async_table(name: str, e: dict) -> list[str]:
    """One ``async_calls.py`` file: the async step against its ideal, at a fixed rate, and a
    plain ``map`` making the same calls."""
    c, b, lat, sync = e["config"], e["backlog"], e["latency"], e["sync"]
    ms = lat["latency_ms"]
    server = "a minimal asyncio server" if c.get("service") == "asyncio" else "an aiohttp server"

    def cpu(v: float | None) -> str:
        return "–" if v is None else f"{v:.2f}"

    return [
        (f"A step calling a local HTTP service ({server}) that answers in {_fmt(c['latency_ms'])} ms "
         f"(`benchmarks/results/{name}`, {_on(e)}): one member, one partition, exactly-once, "
         f"{c['checkpoint_interval_ms']:,} ms checkpoints; ideal = capacity ÷ latency."), "",
        "| step | records/s | share of the ideal | member's CPU s per 1,000 | the service's | peak RSS |",
        "|---|---:|---:|---:|---:|---:|",
        (f"| `map_async`, capacity {c['capacity']} (backlog of {b['records']:,}) | {b['records_per_s']:,} | "
         f"{b['records_per_s'] / e['ideal_records_per_s']:.0%} of {e['ideal_records_per_s']:,} | "
         f"{cpu(b.get('cpu_s_per_1000'))} | {cpu(b.get('service_cpu_s_per_1000'))} | "
         f"{_fmt(b['peak_rss_mb'], ' MB')} |"),
        (f"| plain `map`, one call at a time (backlog of {sync['records']:,}) | {sync['records_per_s']:,} | – | "
         f"{cpu(sync.get('cpu_s_per_1000'))} | {cpu(sync.get('service_cpu_s_per_1000'))} | "
         f"{_fmt(sync['peak_rss_mb'], ' MB')} |"), "",
        (f"At a fixed {lat['rate']:,} records/s (half the backlog's rate), from an input's produce time to its "
         f"output visible read_committed: p50 {_fmt(ms['p50'])} ms, p95 {_fmt(ms['p95'])} ms, p99 {_fmt(ms['p99'])} "
         f"ms, max {_fmt(ms['max'])} ms; peak RSS {_fmt(lat['peak_rss_mb'], ' MB')} (a transactional output is "
         "visible when the checkpoint after it commits: about half a checkpoint interval on average)."), ""]


def async_section(calls: list[tuple[str, dict]]) -> list[str]:
    if not calls:
        return []
    lines = ["## Async steps", "",
             ("`benchmarks/async_calls.py` (docs/async.md): a step that calls another service, as `map_async` "
              "(aiohttp, many calls at once) and as a plain `map` (one call at a time)."), ""]
    for name, e in calls:
        lines += async_table(name, e)
    return lines


def async_targets(e: dict) -> list[str]:
    share = e["backlog"]["records_per_s"] / e["ideal_records_per_s"]
    return [_row(f"≥ {ASYNC_SHARE:.0%} of capacity ÷ latency ({e['ideal_records_per_s']:,}/s)", "async", "EOS",
                 f"{e['backlog']['records_per_s']:,}/s ({share:.0%})", share >= ASYNC_SHARE)]


def write_async_doc(name: str, e: dict) -> None:
    """docs/async.md's figures, between its markers, from one ``async_calls.py`` file."""
    begin, end = "<!-- async:begin -->", "<!-- async:end -->"
    text = ASYNC_DOC.read_text()
    if begin not in text or end not in text:
        return
    head, rest = text.split(begin, 1)
    ASYNC_DOC.write_text(head + begin + "\n" + "\n".join(async_table(name, e)).rstrip() + "\n" + end
                         + rest.split(end, 1)[1])


# --- the stream-table join ----------------------------------------------------------------

JOINS = ("j1",)


def _wrong(r: dict | None) -> str:
    """Outputs that differ from the reference: an order joined with another value than its
    customer's as of its time (one missing and one extra tuple each), or none at all."""
    chk = (r or {}).get("check") or {}
    if chk.get("ok") is None:
        return "–"
    wrong, missing = chk.get("extra", 0), chk.get("missing", 0)
    return f"{wrong:,} of {chk.get('expected', 0):,}" + (f" (+{missing - wrong:,} missing)" if missing > wrong else "")


def _join_run(name: str, e: dict) -> list[str]:
    """One join results file: its data, then one table per workload and guarantee."""
    rows = [r for r in e["throughput"] if r["workload"] in JOINS]
    c, data, idx, lines = e["config"], e.get("join_data", {}), _index(rows), []
    for w in dict.fromkeys(r["workload"] for r in rows):
        dd = data.get(w, {})
        lines += [(f"From `benchmarks/results/{name}` (run {e['run']} {_on(e)}; {dd.get('orders', 0):,} orders and "
                  f"{dd.get('customer_updates', 0):,} customer updates ({dd.get('customers', 0):,} customers x "
                  f"{c.get('join_versions')} versions, {dd.get('deletes', 0):,} deletes; both counts include one "
                  f"sentinel per partition), commit interval {c['commit_interval_ms']} ms, Kafka Streams' join "
                  f"grace {c.get('kstreams_join_grace_ms')} ms; {_load(e)})."), ""]
        for g in dict.fromkeys(r["guarantee"] for r in rows if r["workload"] == w):
            lines += [f"**{w}, {G[g]}**{_repeats(e)}", "",
                      "| system | records/s | CPU s per million | peak RSS, MB | wrong outputs |",
                      "|---|---:|---:|---:|---:|"]
            lines += [f"| `{s}` | {_tp_cell(idx[(w, g, s)])} | {_cell(idx[(w, g, s)], 'cpu_s_per_million')} | "
                      f"{_cell(idx[(w, g, s)], 'peak_rss_mb')} | {_wrong(idx[(w, g, s)])} |"
                      for s in ORDER if (w, g, s) in idx]
            lines.append("")
    return lines


def _table_memory(name: str, mem: dict) -> list[str]:
    """The memory and disk of one table of ``table_memory.py``."""
    rebuilt = "rebuild_s" in mem  # since the table's topic is its changelog
    how = "restored from its own topic" if rebuilt else "with its changelog"
    return [(f"**A table of {mem['keys']:,} keys x {mem['versions']} versions** (`benchmarks/table_memory.py`, "
            f"`benchmarks/results/{name}`; one `fw run` process, the table in RocksDB {how}; load "
            f"average {mem['loadavg_before'][0]:.2f} before, {mem['loadavg_after'][0]:.2f} after)"), "",
            "| empty service RSS | RSS with the table | peak RSS while filling | RSS per key | state on disk, "
            "running | state on disk, stopped | per key on disk | fill |" + (" rebuild from the topic | RSS "
                                                                              "rebuilt |" if rebuilt else ""),
            "|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if rebuilt else ""),
            f"| {_fmt(mem['rss_empty_mb'])} MB | {_fmt(mem['rss_full_mb'])} MB | {_fmt(mem['peak_rss_mb'])} MB | "
            f"{mem['per_key_rss_bytes']:,} B | {_fmt(mem['disk_running_mb'])} MB | {_fmt(mem['disk_stopped_mb'])} MB | "
            f"{mem['per_key_disk_bytes']:,} B | {mem['records']:,} records in {_fmt(mem['fill_s'])} s |"
            + (f" {_fmt(mem['rebuild_s'])} s | {_fmt(mem['rss_rebuilt_mb'])} MB |" if rebuilt else ""), ""]


def join_section(runs: list[tuple[str, dict]], memory: list[tuple[str, dict]]) -> list[str]:
    """j1 per system, and the memory of a large table."""
    if not runs and not memory:
        return []
    lines = ["## Stream-table join", "",
             ("j1: an orders stream joined with a customers table as of each order's time, left join "
             "(`benchmarks/run --workloads j1`; the data and each system's join in "
             "[benchmarks/README.md](../benchmarks/README.md#the-stream-table-join-j1)). Records/s counts the "
             "records of both topics from the first output (or commit) to the last; *wrong outputs*: orders joined "
             "with another value than their customer's as of their time."), ""]
    for name, e in runs:
        lines += _join_run(name, e)
    for name, mem in memory:
        lines += _table_memory(name, mem)
    return lines


# --- replay on Spark ---------------------------------------------------------------------

SCALING_TARGET = 1.7


def _cores(r: dict) -> int | None:
    return r.get("cores")


def _replay_ok(r: dict | None) -> bool:
    return r is not None and r.get("status") == "ok" and bool(r.get("job_records_per_s"))


def _scaling_bound(one: dict, cores: int) -> str:
    """What the machine allows ``local[N]`` over ``local[1]``: its cores over what the
    ``local[1]`` job kept busy, the broker included ('' when the broker was not measured)."""
    busy, broker = one.get("job_cores_busy"), one.get("job_broker_cores_busy")
    if not busy or broker is None:
        return ""
    return f" (at most {cores / (busy + broker):.2f}× on {cores} cores: `{one['master']}` kept {busy + broker:.2f} busy)"


def _per_core(r: dict, key: str) -> int | None:
    rate, cores = _med(r, key), _cores(r)
    return round(rate / cores) if rate and cores else None


def _reader(r: dict) -> str:
    return r.get("reader", "spark")  # results from before --reader: Spark's Kafka source


def _run_name(r: dict) -> str:
    return f"`{r['master']}`, reader `{_reader(r)}`"


def _replay_medians(e: dict) -> dict:
    """``e`` with one replay row per workload, master and reader: the median of its rounds."""
    return {**e, "replay": _medians(e["replay"], lambda r: (r["workload"], r["master"], _reader(r)),
                                    "job_records_per_s")}


def _replay_rows(e: dict) -> dict[str, list[dict]]:
    by_w: dict[str, list[dict]] = {}
    for r in e.get("replay") or []:
        by_w.setdefault(r["workload"], []).append(r)
    return by_w


def _scalings(rows: list[dict]) -> list[tuple[dict, dict]]:
    """Per reader, the one-core and the two-core replay of a workload (local[1] and local[2]
    by default)."""
    pairs = []
    for reader in dict.fromkeys(map(_reader, rows)):
        mine = [r for r in rows if _reader(r) == reader]
        one = next((r for r in mine if _cores(r) == 1), None)
        two = next((r for r in mine if _cores(r) == 2), None)
        if one and two:
            pairs.append((one, two))
    return pairs


def _replay_table(e: dict) -> list[str]:
    """Every workload of one replay file: the live ``fw-1`` exactly-once run, then each replay."""
    live, masters = _index(e["throughput"]), list(dict.fromkeys(r["master"] for r in e["replay"]))
    lines = [f"| workload | run | records/s{_repeats(e)} | per core | CPU s/M | check |", "|---|---|---:|---:|---:|:-:|"]
    for w, rows in _replay_rows(e).items():
        lv = live.get((w, "exactly_once", "fw-1"))
        if lv:
            lines.append(f"| {w} | live `fw-1`, EOS | {_cell(lv, 'records_per_s')} | {_fmt(_med(lv, 'records_per_s'))} | "
                         f"{_cell(lv, 'cpu_s_per_million')} | {_check(lv)} |")
        for r in sorted(rows, key=lambda r: (_reader(r), masters.index(r["master"]))):
            status = "" if r.get("status") == "ok" else f" ({r.get('status')})"
            cpu = "job_cpu_s_per_million" if r.get("job_cpu_s_per_million") else "cpu_s_per_million"
            lines.append(f"| {w} | replay {_run_name(r)}{status} | {_cell(r, 'job_records_per_s')} | "
                         f"{_cell(r, 'records_per_s_per_core')} | {_cell(r, cpu)} | {_check(r)} |")
    return lines + [""]


def replay_section(sources: list[tuple[str, dict]]) -> list[str]:
    """``fw replay`` of W1–W4 on Spark next to the live ``fw-1`` exactly-once run of the same
    results file (same input topic, same machine state): one table per file."""
    if not sources:
        return []
    lines = [
        "## Replay on Spark", "",
        ("`fw replay benchmarks.apps.fw_app:pipeline --master <master> --reader <reader> --output topic`: Spark in "
        "local mode on the same machine as the broker, over the input topic the same run's live `fw-1` read, "
        "its outputs written exactly once and checked like the live runs' (✓ / ✗). *records/s*: live as above; "
        "replay, the job's own (input records ÷ seconds from the Spark session being up to the job's end, "
        "reading Kafka included). *per core*: ÷ the master's cores (live `fw-1` is one process). *CPU s/M*: CPU "
        "seconds per million records of every process, over the measured span (replay: the job, without the "
        "command's start-up). The targets also judge the rate while processing (first task's start to last "
        "task's end); the start-up, the CPU by part and the replay's profiles are in the results files and the "
        "lab notes."), ""]
    for name, e in sources:
        e = _replay_medians(e)
        counts = "/".join(str(n) for n in sorted({len(r.get("stages") or []) for r in e["replay"]}))
        lines += [(f"From `benchmarks/results/{name}` (run {e['run']}{', ' + e['label'] if e.get('label') else ''} "
                  f"{_on(e)}; {e['config']['records']:,} records, {e['config']['partitions']} partitions = Spark tasks per "
                  f"stage, stages per job: {counts}; pyspark {e['machine'].get('pyspark', '?')}, "
                  f"{e['machine']['cores']} cores; {_load(e)})."), ""]
        lines += _replay_table(e)
    return lines


def _replay_core_target(w: str, r: dict, lv: Any) -> str:
    """Replay records/s per core ≥ live ``fw-1``'s, judged by the job's rate and while processing."""
    target = "replay records/s per core ≥ live `fw-1`'s"
    if not _replay_ok(r) or not lv:
        why = r.get("status") if r.get("status") != "ok" else "no live fw-1 exactly-once run"
        return _row(target, w, "EOS", f"{_run_name(r)}: {why}", None)
    ok = r.get("check", {}).get("ok") is True
    stands, verdicts = [], []
    for label, rate in (("job", _med(r, "records_per_s_per_core")), ("while processing", _per_core(r, "processing_records_per_s"))):
        if rate:
            stands.append(f"{label} {rate:,} = {rate / lv:.0%}")
            verdicts.append(f"{_verdict(rate >= lv and ok)} ({label})")
    return (f"| {target} | {w} | EOS | {_run_name(r)}: {'; '.join(stands)} of live {lv:,}"
            f"{'' if ok else ', output ✗'} | {', '.join(verdicts)} |")


def _replay_scaling_target(w: str, one: dict, two: dict, cores: int) -> str:
    """``local[2]`` ≥ 1.7× ``local[1]``, by the job's rate and while processing."""
    name = f"`{two['master']}` ≥ {SCALING_TARGET}× `{one['master']}`, reader `{_reader(one)}`"
    if not (_replay_ok(one) and _replay_ok(two)):
        return _row(name, w, "EOS", "a replay did not finish", None)
    stands, verdicts = [], []
    for label, key in (("job", "job_records_per_s"), ("while processing", "processing_records_per_s")):
        a, b = _med(one, key), _med(two, key)
        if a and b:
            bound = _scaling_bound(one, cores) if label == "job" else ""
            stands.append(f"{label} {b:,} vs {a:,} = {b / a:.2f}×{bound}")
            verdicts.append(f"{_verdict(b / a >= SCALING_TARGET)} ({label})")
    return f"| {name} | {w} | EOS | {'; '.join(stands)} | {', '.join(verdicts)} |"


def replay_targets(e: dict) -> list[str]:
    """Per workload, master and reader of one replay file: the per-core and the scaling targets."""
    e, lines = _replay_medians(e), []
    live = _index(e["throughput"])
    for w, rows in _replay_rows(e).items():
        lv = _med(live.get((w, "exactly_once", "fw-1")), "records_per_s")
        lines += [_replay_core_target(w, r, lv) for r in rows]
        lines += [_replay_scaling_target(w, one, two, e["machine"]["cores"]) for one, two in _scalings(rows)]
    return lines


# --- the plot, and putting it together -----------------------------------------------------

def _have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def plot(d: dict, extra: list[tuple[str, dict]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems, cases = _systems(d), _cases(d)
    tp = _index(d["throughput"])
    panels = [("end-to-end latency p99 at half our maximum rate, ms (black tick: p50), log scale", d)] if d["latency"] else []
    panels += [((f"end-to-end latency p99 at a fixed {', '.join(f'{r:,}' for r in sorted({x['rate'] for x in e['latency']}))}"
                f" records/s, ms (black tick: p50), log scale (run {e['run']}, {e['machine'].get('cpu', '?')})"), e)
               for _, e in extra]
    labels = [f"{w} {G[g]}" for w, g in cases]
    fig, grid = plt.subplots(1 + len(panels), 1, figsize=(15, 4.5 * (1 + len(panels))), squeeze=False)
    axes = list(grid[:, 0])
    width = 0.8 / max(1, len(systems))
    for i, s in enumerate(systems):
        xs = [j + i * width for j in range(len(cases))]
        axes[0].bar(xs, [_med(tp.get((w, g, s)), "records_per_s") or 0 for w, g in cases], width,
                    label=d["systems"][s])
        for ax, (_, src) in zip(axes[1:], panels):
            lat = _index(src["latency"], "p99_ms")
            ax.bar(xs, [_med(lat.get((w, g, s)), "p99_ms") or 0 for w, g in cases], width)
            ax.scatter(xs, [_med(lat.get((w, g, s)), "p50_ms") or 0 for w, g in cases], marker="_",
                       color="black", s=60, zorder=3)
    for ax, title in zip(axes, ["throughput over the backlog, records/s"] + [t for t, _ in panels]):
        ax.set_xticks([j + width * (len(systems) - 1) / 2 for j in range(len(cases))], labels)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    for ax in axes[1:]:
        ax.set_yscale("log")
    axes[0].legend(fontsize=8, ncol=3)
    fig.suptitle(f"benchmarks/run {d['run']}: {d['config']['records']:,} records, {d['machine']['cores']} cores "
                 "(measure on your own hardware before quoting)", fontsize=10)
    fig.tight_layout()
    fig.savefig(PNG, dpi=90)


def markdown(d: dict, json_name: str, extra: list[tuple[str, dict]]) -> str:
    """The whole report: the main run's tables, then each further file's section, the plot,
    the targets, the profile. ``extra`` holds every further file but the main one."""
    memory = [(n, e) for n, e in extra if "rss_full_mb" in e]
    calls = [(n, e) for n, e in extra if "ideal_records_per_s" in e]
    runs = [(n, e) for n, e in extra if "rss_full_mb" not in e and "ideal_records_per_s" not in e]
    lows = [(n, e) for n, e in runs if e["config"]["commit_interval_ms"] == LOW_COMMIT_MS]
    low = next(((n, e) for n, e in lows if e["throughput"]), lows[0] if lows else None)
    low_fixed = [(n, e) for n, e in lows if (n, e) != low and e.get("latency")]  # at a rate fixed by hand
    runs = [(n, e) for n, e in runs if (n, e) not in lows]
    remeasured = [(n, e) for n, e in runs if _remeasures(d, e)]
    runs = [(n, e) for n, e in runs if (n, e) not in remeasured]
    now = latest(d, remeasured)  # the figures the targets compare: the main run's, or a later re-measure's
    joins = [(n, e) for n, e in [(json_name, d)] + runs if any(r["workload"] in JOINS for r in e["throughput"])]
    fixed_rate = [(n, e) for n, e in runs if e.get("latency")]
    replays = [(n, e) for n, e in [(json_name, d)] + runs if e.get("replay")]
    lines = (head(d, json_name) + throughput_section(d) + latency_section(d) + supplementary(d, fixed_rate)
             + remeasured_section(d, remeasured) + low_latency_section(now, low, low_fixed) + replay_section(replays)
             + join_section(joins, memory) + async_section(calls) + plot_section()
             + targets_section(d, json_name, fixed_rate, low, replays, low_fixed, now, calls) + profile_section(d))
    return "\n".join(lines).rstrip() + "\n"


def _complements(d: dict, e: dict) -> bool:
    """``e`` is more systems of the main run ``d``: throughput only, other systems, the same
    data size, keys and interval."""
    if "config" not in e or "throughput" not in e:  # table_memory.py's files
        return False
    same = all(e["config"].get(k) == d["config"].get(k) for k in ("records", "keys", "partitions", "commit_interval_ms"))
    return (same and bool(e["throughput"]) and not e.get("latency") and not e.get("replay")
            and not set(e["systems"]) & set(d["systems"])
            and all(r["workload"] in d["workloads"] for r in e["throughput"]))


def merge(d: dict, extra: list[tuple[str, dict]]) -> tuple[dict, list[tuple[str, dict]]]:
    """The main run with the rows of every file that complements it (``_complements``), and
    the files left over."""
    d = {**d, "throughput": list(d["throughput"]), "systems": dict(d["systems"]), "machine": dict(d["machine"]),
         "merged": []}
    rest = []
    for name, e in extra:
        if not _complements(d, e):
            rest.append((name, e))
            continue
        d["throughput"] += e["throughput"]
        d["systems"].update(e["systems"])
        d["machine"] = {**{k: v for k, v in e["machine"].items() if v}, **{k: v for k, v in d["machine"].items() if v}}
        d["merged"].append({"name": name, "run": e["run"], "systems": [s for s in ORDER if s in e["systems"]],
                            "repeat": e["config"].get("repeat", 1), "load": _load(e)})
    return d, rest


PEERS = (("kstreams", "Kafka Streams"), ("flink-1", "Flink (Java, 1 slot)"), ("pyflink", "PyFlink"),
         ("quix", "Quix Streams"))
README_ROWS = (("w1", "stateless filter → map"), ("w2", "keyed count + sum, 10,000 keys"),
               ("w3", "10 s tumbling windows"), ("w4", "session windows"))


def readme_table(d: dict, json_name: str) -> list[str]:
    """The README's table: ``fw-1`` exactly-once records/s (median) and its ratio to each
    peer of the run, and its share of the raw loop."""
    tp = _index(d["throughput"])
    peers = [(s, name) for s, name in PEERS if s in d["systems"]]
    c = d["config"]
    medians = f", medians of {c['repeat']} runs" if c.get("repeat", 1) > 1 else ""
    lines = [(f"One process, exactly-once, {c['records']:,} Avro records on {d['machine']['cores']} cores "
              f"(`benchmarks/results/{json_name}`{medians}; ×: our records/s ÷ theirs; † = stopped by the run's "
              "time limit, its rate of committed progress):"), "",
             "| workload | records/s | " + " | ".join(f"vs {name}" for _, name in peers) + " | vs the raw loop |",
             "|---|---:|" + "---:|" * (len(peers) + 1)]
    for w, what in README_ROWS:
        ours = _med(tp.get((w, "exactly_once", "fw-1")), "records_per_s")
        if not ours:
            continue
        cells = []
        for s, _ in peers + [("raw", "")]:
            r = tp.get((w, "exactly_once", s))
            theirs = _med(r, "records_per_s")
            mark = "†" if (r or {}).get("partial") else ""
            cells.append("–" if not theirs else (f"{ours / theirs:.0%}" if s == "raw" else f"{ours / theirs:.2f}×{mark}"))
        lines.append(f"| {what} | {round(ours, -3):,} | " + " | ".join(cells) + " |")
    return lines


def readme_remeasures(remeasured: list[tuple[str, dict]]) -> list[str]:
    """Below the README's table: ``fw-1`` ÷ the raw loop in each re-measure that ran both."""
    lines = []
    for name, e in remeasured:
        tp = _index(e["throughput"])
        shares = []
        for w, what in README_ROWS:
            fw, raw = _fw_and_raw(tp, w, "exactly_once")
            if fw and raw:
                shares.append(f"{what} {fw / raw:.0%}")
        if shares:
            n = e["config"].get("repeat", 1)
            medians = f", medians of {n} runs" if n > 1 else ""
            lines += ["", (f"Measured again on later code (`benchmarks/results/{name}`, {e['config']['records']:,} records "
                           f"{_on(e)}{medians}), `fw-1` ÷ the raw loop: " + ", ".join(shares) + ".")]
    return lines


def write_readme(d: dict, json_name: str, remeasured: list[tuple[str, dict]]) -> None:
    begin, end = "<!-- benchmarks:begin -->", "<!-- benchmarks:end -->"
    text = README.read_text()
    if begin not in text or end not in text:
        return
    head, rest = text.split(begin, 1)
    table = readme_table(d, json_name) + readme_remeasures(remeasured)
    README.write_text(head + begin + "\n" + "\n".join(table) + "\n" + end + rest.split(end, 1)[1])


def main() -> None:
    args = sys.argv[1:]
    keep_plot = "--no-plot" in args  # docs/benchmarks.png stays as it is
    files = [a for a in args if a != "--no-plot"]
    path = Path(files[0])
    d, extra = merge(json.loads(path.read_text()), [(Path(p).name, json.loads(Path(p).read_text())) for p in files[1:]])
    # a plot compares systems: not drawn from a run of one system (a replay run, a soak)
    if not keep_plot and len(d["systems"]) > 1 and _have_matplotlib():
        plot(d, [(n, e) for n, e in extra if e.get("latency") and len(e["systems"]) > 1
                 and e["config"]["commit_interval_ms"] == d["config"]["commit_interval_ms"]])
    DOC.write_text(markdown(d, path.name, extra))
    for name, e in extra:
        if "ideal_records_per_s" in e:  # the latest given: the figures docs/async.md shows
            write_async_doc(name, e)
    write_readme(d, path.name, [(n, e) for n, e in extra if _remeasures(d, e)])
    print(DOC)


if __name__ == "__main__":
    main()
