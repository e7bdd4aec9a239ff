"""docs/benchmarks.md and docs/benchmarks.png from one results JSON of benchmarks/suite.py.

    benchmarks/.venv-quix/bin/python benchmarks/report.py [--no-plot] benchmarks/results/<run>.json \
        [<latency-run>.json ...] [<replay-run>.json ...]

Further files add their latency runs (a section each), their replay runs (``--phases
...,replay``: the "Replay on Spark" section, next to the live ``fw-1`` run of the same file),
their stream-table join runs (``--workloads j1``) and the table memory of
``table_memory.py`` (``*-table-memory.json``): the "Stream-table join" section.
``--no-plot`` leaves docs/benchmarks.png as it is; the plot is drawn only from a main file that
compares several systems.
(matplotlib comes from the benchmark venv, never from the project's dependencies; without it
only the markdown is written).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
PNG = ROOT / "docs" / "benchmarks.png"
ORDER = ("fw-1", "fw-n", "quix", "kstreams", "flink-1", "flink-2", "pyflink", "raw")
G = {"exactly_once": "EOS", "at_least_once": "ALO"}


def _flink_versions(m: dict) -> str:
    """The Flink releases of a run with Flink systems (older results have none)."""
    return (f", Apache Flink {m['flink']}" if m.get("flink") else "") + (f", PyFlink {m['pyflink']}" if m.get("pyflink") else "")


def _flink_setup(systems: list[str]) -> str:
    if not {"flink-1", "flink-2", "pyflink"} & set(systems):
        return ""
    return (" Flink runs in a local MiniCluster in one JVM (-Xmx1g; PyFlink: the JVM it starts, without a heap "
            "limit, and its Python worker, counted together), heap state backend, checkpoints to local files.")


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "–"
    if isinstance(v, float) and v < 100:
        return f"{v:,.1f}{unit}"
    return f"{int(v):,}{unit}"


def _index(rows: list[dict]) -> dict[tuple[str, str, str], dict]:
    return {(r["workload"], r["guarantee"], r["system"]): r
            for r in _medians(rows, lambda r: (r["workload"], r["guarantee"], r["system"]), "records_per_s")}


def _medians(rows: list[dict], key: Any, metric: str) -> list[dict]:
    """One run per ``key``: of the runs of ``benchmarks/run --repeat N``, the one with the
    median ``metric`` (of an even number, the lower of the middle two), a real run whose
    numbers belong together, with every run's ``metric`` in run order (``rounds``)."""
    groups: dict[Any, list[dict]] = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    out = []
    for runs in groups.values():
        if len(runs) == 1:
            out.append(runs[0])
            continue
        middle = sorted(runs, key=lambda r: r.get(metric) or 0)[(len(runs) - 1) // 2]
        out.append({**middle, "rounds": [r.get(metric) for r in runs]})
    return out


def _spread(r: dict) -> str:
    """`` (median of a / b / c)`` for a run chosen among repeated ones."""
    rounds = r.get("rounds")
    return f" (median of {' / '.join(_fmt(v) for v in rounds)})" if rounds else ""


def _systems(d: dict) -> list[str]:
    return [s for s in ORDER if s in d["systems"]]


def _cases(d: dict) -> list[tuple[str, str]]:
    seen = []
    for r in d["throughput"] + d["latency"]:
        c = (r["workload"], r["guarantee"])
        if c not in seen:
            seen.append(c)
    return seen


def _tp_cell(r: dict | None) -> str:
    if r is None:
        return "–"
    v = r.get("records_per_s")
    cell = _fmt(v)
    if r.get("partial"):
        cell += " (partial†)"
    chk = r.get("check", {}).get("ok")
    cell += "" if chk is None else (" ✓" if chk else " ✗")
    return cell


def _lat_cell(d: dict, r: dict | None) -> str:
    if r is None or r.get("p50_ms") is None:
        return "–"
    cell = f"{r['p50_ms']:,} / {r['p99_ms']:,} / {r['max_ms']:,}"
    tp = _index(d["throughput"]).get((r["workload"], r["guarantee"], r["system"]), {}).get("records_per_s")
    return cell + (" ‡" if tp and tp < r["rate"] else "")


def table(d: dict, title: str, rows: list[dict], cell) -> list[str]:  # noqa: ANN001
    systems, idx = _systems(d), _index(rows)
    out = [f"**{title}**", "", "| workload | guarantee | " + " | ".join(systems) + " |",
           "|---|---|" + "---:|" * len(systems)]
    for w, g in _cases(d):
        if not any((w, g, s) in idx for s in systems):
            continue
        out.append(f"| {w} | {G[g]} | " + " | ".join(cell(idx.get((w, g, s))) for s in systems) + " |")
    return out + [""]


def targets(d: dict) -> list[str]:
    tp, lat = _index(d["throughput"]), _index(d["latency"])
    commit = d["config"]["commit_interval_ms"]
    lines = ["| target | workload | guarantee | where we stand | met? |", "|---|---|---|---|---|"]

    def ours(w: str, g: str, idx: dict, key: str, best: Any = max) -> tuple[Any, str]:  # noqa: ANN401
        vals = [(idx[(w, g, s)].get(key), s) for s in ("fw-1", "fw-n") if (w, g, s) in idx and idx[(w, g, s)].get(key)]
        return best(vals) if vals else (None, "")

    for w, g in _cases(d):
        fw, which = ours(w, g, tp, "records_per_s")
        q = tp.get((w, g, "quix"), {}).get("records_per_s")
        if fw and q:
            ratio = fw / q
            lines.append(f"| ≥ 2× Quix Streams' throughput | {w} | {G[g]} | {which} {fw:,} vs {q:,} rec/s = "
                         f"{ratio:.2f}× | {'yes' if ratio >= 2 else 'no'} |")
    for g in ("exactly_once", "at_least_once"):
        raw = tp.get(("w1", g, "raw"), {}).get("records_per_s")
        fw, which = ours("w1", g, tp, "records_per_s")
        if fw and raw:
            share = fw / raw
            lines.append(f"| W1 ≥ 60% of the raw ceiling | w1 | {G[g]} | {which} {fw:,} vs {raw:,} rec/s = "
                         f"{share:.0%} | {'yes' if share >= 0.6 else 'no'} |")
    for w, g in _cases(d):
        if g != "exactly_once":
            continue
        for s in ("fw-1", "fw-n"):
            r = lat.get((w, g, s))
            if r and r.get("p99_ms") is not None:
                ok = r["p99_ms"] <= commit + 100
                lines.append(f"| EOS p99 ≤ checkpoint interval + 100 ms ({commit + 100} ms), at half our max | {w} | EOS | {s} "
                             f"p99 {r['p99_ms']:,} ms | {'yes' if ok else 'no'} |")
    for w, g in _cases(d):
        r = lat.get((w, g, "fw-1"))
        verdict = _memory_thirds(r.get("rss_mb_series") or []) if r else None
        if verdict:
            lines.append(f"| memory flat (fw-1, latency phase at half our max, {r.get('measured_s', 0):.0f} s; "
                         f"the soak below runs longer) | {w} | {G[g]} | {verdict[0]} | {verdict[1]} |")
    return lines + [""]


def _memory_thirds(series: list) -> tuple[str, str] | None:
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
    return (f"middle third {min(middle):.0f}–{hi1:.0f} MB, last third {min(last):.0f}–{hi2:.0f} MB "
            f"(peak {(hi2 - hi1) / hi1:+.0%})", "yes" if hi2 <= hi1 * 1.1 else "no")


def markdown(d: dict, json_name: str) -> str:
    m, c = d["machine"], d["config"]
    systems = _systems(d)
    lines = [
        "# Benchmarks",
        "",
        "Generated by `benchmarks/run` (see [benchmarks/README.md](../benchmarks/README.md) for the method) from "
        f"`benchmarks/results/{json_name}`: one run on one small machine. Repeats of the same case vary by "
        "about ±10% (see the notes at the end); measure on your own hardware with `benchmarks/run` before "
        "quoting a number.",
        "",
        f"- Run: {d['run']}{' (' + d['label'] + ')' if d.get('label') else ''}; "
        f"{c['records']:,} input records ({c['keys']:,} keys, {c['partitions']} partitions, Avro), "
        f"checkpoint/commit interval {c['commit_interval_ms']} ms, "
        f"latency phase {c['latency_seconds']:g} s after {c['latency_warmup_s']:g} s of warm-up.",
        f"- Machine: {m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB, Python {m['python']}, "
        f"{m['java']}, Kafka {m['kafka']}; confluent-kafka {m['confluent_kafka']}, Quix Streams {m['quixstreams']}"
        f"{_flink_versions(m)}. The broker, the system under test and the load generator share the two cores.",
        f"- Load average at start {', '.join(f'{x:.2f}' for x in d['loadavg_at_start'])}; at end "
        f"{', '.join(f'{x:.2f}' for x in d.get('loadavg_at_end', []))}.",
        f"- Systems: {'; '.join('`' + s + '` = ' + d['systems'][s] for s in systems)}. "
        f"`fw-n` runs {c['fw_processes_n']} processes (`fw run --processes {c['fw_processes_n']}`); Kafka Streams runs "
        f"{c['kstreams_threads']} stream threads in one JVM (-Xmx1g).{_flink_setup(systems)}",
        "",
        "## Throughput over the backlog",
        "",
        "Records/s from the first output (or first commit) to the last output record; ✓ = the output equals the "
        "reference result exactly, ✗ = it does not. † = stopped by the run's time limit: the rate of committed "
        "progress until then, output not checked.",
        "",
        *table(d, "records/s", d["throughput"], _tp_cell),
        *table(d, "CPU seconds per million records (all processes of the system)", d["throughput"],
               lambda r: _fmt(r.get("cpu_s_per_million")) if r else "–"),
        *table(d, "peak RSS, MB (sum of the processes' VmHWM; the JVM included)", d["throughput"],
               lambda r: _fmt(r.get("peak_rss_mb")) if r else "–"),
        "## End-to-end latency at a fixed rate",
        "",
        "Input at half of the framework's best throughput for the workload and guarantee; latency from the "
        "input's produce time (W1, W2) or from the moment a window could close (window end + 2 s bound: W3, W4) "
        "to a read_committed consumer seeing the output.",
        "",
        *table(d, "p50 / p99 / max, ms (‡ = the input rate is above the system's throughput over the backlog: "
               "it falls behind and its latency grows with the run)", d["latency"], lambda r: _lat_cell(d, r)),
        *table(d, "input rate, records/s", d["latency"], lambda r: _fmt(r.get("rate")) if r else "–"),
        "## Targets",
        "",
        *targets(d),
    ]
    if d.get("profile"):
        lines += ["## Profile of the framework's hot loop (py-spy, 1 process)", ""]
        for case, p in d["profile"].items():
            if "self" not in p:
                lines += [f"- {case}: {p.get('error')}", ""]
                continue
            lines += [f"**{case}** ({p['samples']:,} samples; "
                      f"{_fmt(p.get('records_per_s_under_profiler'))} rec/s under the profiler), self time:", "",
                      "| function | self % |", "|---|---:|"]
            lines += [f"| `{f}` | {pct} |" for f, pct in p["self"][:10]] + [""]
    notes = ROOT / "benchmarks" / "NOTES.md"
    if notes.exists():
        lines += [notes.read_text().rstrip(), ""]
    if PNG.exists() or _have_matplotlib():
        lines += ["## Plot", "", "![throughput and latency by system and workload](benchmarks.png)", ""]
    return "\n".join(lines) + "\n"


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
    panels = [("end-to-end latency p99 at half our maximum rate, ms (black tick: p50), log scale", d)]
    panels += [(f"end-to-end latency p99 at a fixed {', '.join(f'{r:,}' for r in sorted({x['rate'] for x in e['latency']}))}"
                " records/s, ms (black tick: p50), log scale", e) for _, e in extra]
    labels = [f"{w} {G[g]}" for w, g in cases]
    fig, axes = plt.subplots(1 + len(panels), 1, figsize=(15, 4.5 * (1 + len(panels))))
    width = 0.8 / max(1, len(systems))
    for i, s in enumerate(systems):
        xs = [j + i * width for j in range(len(cases))]
        axes[0].bar(xs, [(tp.get((w, g, s)) or {}).get("records_per_s") or 0 for w, g in cases], width,
                    label=d["systems"][s])
        for ax, (_, src) in zip(axes[1:], panels):
            lat = _index(src["latency"])
            ax.bar(xs, [(lat.get((w, g, s)) or {}).get("p99_ms") or 0 for w, g in cases], width)
            ax.scatter(xs, [(lat.get((w, g, s)) or {}).get("p50_ms") or 0 for w, g in cases], marker="_",
                       color="black", s=60, zorder=3)
    for ax, title in zip(axes, ["throughput over the backlog, records/s"] + [t for t, _ in panels]):
        ax.set_xticks([j + width * (len(systems) - 1) / 2 for j in range(len(cases))], labels)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    for ax in axes[1:]:
        ax.set_yscale("log")
    axes[0].legend(fontsize=8, ncol=3)
    fig.suptitle(f"benchmarks/run {d['run']}: {d['config']['records']:,} records, {d['machine']['cores']} cores "
                 "(one run; measure on your own hardware before quoting)", fontsize=10)
    fig.tight_layout()
    fig.savefig(PNG, dpi=90)


def supplementary(d: dict, extra: list[tuple[str, dict]]) -> list[str]:
    """Latency-only runs at a fixed rate that the system sustains (``--phases latency
    --latency-rate R``): the latency of the mechanism (checkpoint interval) rather than of a
    backlog."""
    lines: list[str] = []
    commit = d["config"]["commit_interval_ms"]
    for name, e in extra:
        rates = sorted({r["rate"] for r in e["latency"]})
        lines += [f"## Latency at a fixed {', '.join(f'{r:,}' for r in rates)} records/s (run {e['run']})", "",
                  f"From `benchmarks/results/{name}`: the same latency phase at a fixed rate that most systems "
                  "sustain on this machine, so their numbers show the checkpoint/commit mechanism rather than "
                  f"a growing backlog; {e['config']['latency_seconds']:g} s measured after "
                  f"{e['config']['latency_warmup_s']:g} s of warm-up.", ""]
        lines += table(e, "p50 / p99 / max, ms (‡ = the rate is above the system's backlog throughput in the main "
                       "run)", e["latency"], lambda r: _lat_cell(d, r))
        rows = [r for r in e["latency"] if r["guarantee"] == "exactly_once" and r["system"].startswith("fw")
                and r.get("p99_ms") is not None]
        if rows:
            lines += ["| target | workload | where we stand | met? |", "|---|---|---|---|"]
            lines += [f"| EOS p99 ≤ {commit + 100} ms at {r['rate']:,}/s | {r['workload']} | {r['system']} p99 "
                      f"{r['p99_ms']:,} ms | {'yes' if r['p99_ms'] <= commit + 100 else 'no'} |" for r in rows]
            for r in rows:
                verdict = _memory_thirds(r.get("rss_mb_series") or [])
                if verdict and r.get("measured_s", 0) >= 120:  # a soak, not a 20 s latency run
                    lines.append(f"| memory flat at {r['rate']:,}/s over {r.get('measured_s', 0):.0f} s | {r['workload']} | "
                                 f"{r['system']} {verdict[0]} | {verdict[1]} |")
            lines.append("")
    return lines


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


def _join_rounds(e: dict) -> str:
    n = e["config"].get("repeat", 1)
    return (f"{n} rounds, every system once per round: each row is the run with the median records/s, every "
            "run's records/s in parentheses; ") if n > 1 else ""


def join_section(runs: list[tuple[str, dict]], memory: list[tuple[str, dict]]) -> list[str]:
    """j1 per system (the run with the median records/s of each), and the table memory."""
    if not runs and not memory:
        return []
    lines = ["## Stream-table join", "",
             "j1: an orders stream joined with a customers table as of each order's time, left join "
             "(`benchmarks/run --workloads j1`; the data and each system's join in "
             "[benchmarks/README.md](../benchmarks/README.md#the-stream-table-join-j1)). Records/s counts the "
             "records of both topics (orders and customer updates) from the first output (or commit) to the last; "
             "CPU seconds per million and peak RSS as in the tables above; *wrong outputs*: orders joined with "
             "another value than their customer's as of their time.", ""]
    for name, e in runs:
        rows = [r for r in e["throughput"] if r["workload"] in JOINS]
        c, m, data = e["config"], e["machine"], e.get("join_data", {})
        for w in dict.fromkeys(r["workload"] for r in rows):
            dd = data.get(w, {})
            lines += [f"From `benchmarks/results/{name}` (run {e['run']}; {dd.get('orders', 0):,} orders and "
                      f"{dd.get('customer_updates', 0):,} customer updates ({dd.get('customers', 0):,} customers x "
                      f"{c.get('join_versions')} versions, {dd.get('deletes', 0):,} deletes; both counts include one "
                      f"sentinel per partition), {c['partitions']} partitions, commit interval "
                      f"{c['commit_interval_ms']} ms, Kafka Streams' join grace {c.get('kstreams_join_grace_ms')} ms; "
                      f"{m['cores']} cores, Quix Streams {m['quixstreams']}; {_join_rounds(e)}load average "
                      f"{', '.join(f'{x:.2f}' for x in e['loadavg_at_start'])} at the start, "
                      f"{', '.join(f'{x:.2f}' for x in e.get('loadavg_at_end', []))} at the end).", ""]
            idx = _index(rows)
            for g in dict.fromkeys(r["guarantee"] for r in rows if r["workload"] == w):
                lines += [f"**{w}, {G[g]}**", "",
                          "| system | records/s | CPU s per million | peak RSS, MB | wrong outputs | load avg (1 min) before |",
                          "|---|---:|---:|---:|---:|---:|"]
                for s in [s for s in ORDER if (w, g, s) in idx]:
                    r = idx[(w, g, s)]
                    load = r.get("loadavg_before") or [None]
                    lines.append(f"| `{s}` | {_tp_cell(r)}{_spread(r)} | {_fmt(r.get('cpu_s_per_million'))} | "
                                 f"{_fmt(r.get('peak_rss_mb'))} | {_wrong(r)} | "
                                 f"{'–' if load[0] is None else f'{load[0]:.2f}'} |")
                lines.append("")
    for name, mem in memory:
        rebuilt = "rebuild_s" in mem  # since the table's topic is its changelog
        how = "restored from its own topic" if rebuilt else "with its changelog"
        lines += [f"**A table of {mem['keys']:,} keys x {mem['versions']} versions** (`benchmarks/table_memory.py`, "
                  f"`benchmarks/results/{name}`; one `fw run` process, the table in RocksDB {how}; load "
                  f"average {mem['loadavg_before'][0]:.2f} before, {mem['loadavg_after'][0]:.2f} after)", "",
                  "| empty service RSS | RSS with the table | peak RSS while filling | RSS per key | state on disk, "
                  "running | state on disk, stopped | per key on disk | fill |" + (" rebuild from the topic | RSS "
                                                                                    "rebuilt |" if rebuilt else ""),
                  "|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if rebuilt else ""),
                  f"| {_fmt(mem['rss_empty_mb'])} MB | {_fmt(mem['rss_full_mb'])} MB | {_fmt(mem['peak_rss_mb'])} MB | "
                  f"{mem['per_key_rss_bytes']:,} B | {_fmt(mem['disk_running_mb'])} MB | {_fmt(mem['disk_stopped_mb'])} MB | "
                  f"{mem['per_key_disk_bytes']:,} B | {mem['records']:,} records in {_fmt(mem['fill_s'])} s |"
                  + (f" {_fmt(mem['rebuild_s'])} s | {_fmt(mem['rss_rebuilt_mb'])} MB |" if rebuilt else ""), ""]
    return lines


# --- replay on Spark ---------------------------------------------------------------------

SCALING_TARGET = 1.7


def _cores(r: dict) -> int | None:
    return r.get("cores")


def _replay_ok(r: dict | None) -> bool:
    return bool(r) and r.get("status") == "ok" and bool(r.get("job_records_per_s"))


def _busy(r: dict) -> str:
    """A live run's CPU seconds per wall second over its measured span (+ the broker's)."""
    cpu, n, secs = r.get("cpu_s_per_million"), r.get("measured_records"), r.get("measured_s")
    if not (cpu and n and secs):
        return "–"
    broker = r.get("broker_cpu_s_per_million")
    return _plus_broker(round(cpu * n / 1e6 / secs, 2), round(broker * n / 1e6 / secs, 2) if broker else None)


def _plus_broker(busy: float | None, broker: float | None) -> str:
    """Cores busy, + the broker's over the same span where it was measured."""
    return _fmt(busy) + (f" + {_fmt(broker)}" if broker is not None else "")


def _scaling_bound(one: dict, cores: int) -> str:
    """What the machine allows ``local[N]`` over ``local[1]``: its cores over what the
    ``local[1]`` job kept busy, the broker included ('' when the broker was not measured)."""
    busy, broker = one.get("job_cores_busy"), one.get("job_broker_cores_busy")
    if not busy or broker is None:
        return ""
    return f" (at most {cores / (busy + broker):.2f}× on {cores} cores: `{one['master']}` kept {busy + broker:.2f} busy)"


def _check(r: dict | None) -> str:
    ok = (r or {}).get("check", {}).get("ok")
    return "–" if ok is None else ("✓" if ok else "✗")


def _per_core(r: dict, key: str) -> int | None:
    rate, cores = r.get(key), _cores(r)
    return round(rate / cores) if rate and cores else None


def _ratio(two: dict, one: dict, key: str) -> str:
    return f"{two[key] / one[key]:.2f}×" if two.get(key) and one.get(key) else "–"


def _replay_rows(e: dict) -> dict[str, list[dict]]:
    by_w: dict[str, list[dict]] = {}
    for r in e.get("replay") or []:
        by_w.setdefault(r["workload"], []).append(r)
    return by_w


def _reader(r: dict) -> str:
    return r.get("reader", "spark")  # results from before --reader: Spark's Kafka source


def _run_name(r: dict) -> str:
    return f"`{r['master']}`, reader `{_reader(r)}`"


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


PARTS = ("JVM (Spark)", "Python workers (the tasks)", "Python driver (job.py)", "fw replay command")


def _cpu_parts(e: dict) -> list[str]:
    """Where a replay's CPU goes: the Spark JVM, the Python workers running the tasks, ..."""
    rows = [r for r in e["replay"] if r.get("cpu_s_by_part")]
    if not rows:
        return []
    n = e["config"]["records"] / 1e6
    used = {p for r in rows for p, v in r["cpu_s_by_part"].items() if v >= 0.05}
    parts = [p for p in PARTS if p in used] + sorted(used - set(PARTS))
    out = ["**CPU seconds per million records by part of the replay** (the whole command, start-up included; "
           "the JVM's busiest threads in the results file, `cpu_s_by_thread`)", "",
           "| workload | master, reader | " + " | ".join(parts) + " |", "|---|---|" + "---:|" * len(parts)]
    for r in rows:
        out.append(f"| {r['workload']} | {_run_name(r)} | "
                   + " | ".join(_fmt(r["cpu_s_by_part"].get(p, 0) / n) for p in parts) + " |")
    return out + [""]


def _replay_profiles(e: dict) -> list[str]:
    out: list[str] = []
    for case, p in (e.get("replay_profile") or {}).items():
        if "self" not in p:
            out += [f"- replay profile {case}: {p.get('error')}", ""]
            continue
        out += [f"**Profile of the replay's Python processes, {case}** (py-spy `--subprocesses`, {p['samples']:,} "
                f"samples; {_fmt(p.get('job_records_per_s_under_profiler'))} records/s under the profiler; the JVM "
                "is not sampled), self time:", "", "| function | self % |", "|---|---:|"]
        out += [f"| `{f}` | {pct} |" for f, pct in [x for x in p["self"] if not x[0].startswith("process ")][:12]]
        out.append("")
    return out


def _rounds(e: dict) -> str:
    n = e["config"].get("repeat", 1)
    return (f"{n} rounds, a workload's live runs and replays alternating: each row is the run with the median "
            "records/s, every run's records/s in parentheses; ") if n > 1 else ""


def _stage_counts(e: dict) -> str:
    counts = sorted({len(r.get("stages") or []) for r in e["replay"] if r.get("stages")})
    if counts == [1]:
        return "one stage: no workload repartitions"
    return "stages: " + ", ".join(f"{r['workload']} {len(r.get('stages') or [])}" for r in e["replay"])


def replay_section(sources: list[tuple[str, dict]]) -> list[str]:
    """``fw replay`` of W1–W4 on Spark next to the live ``fw-1`` exactly-once run of the same
    results file (same input topic, same machine state), and where the replay targets stand."""
    if not sources:
        return []
    lines = [
        "## Replay on Spark", "",
        "`fw replay benchmarks.apps.fw_app:pipeline --master <master> --reader <reader> --output topic "
        "--output-suffix <unique>`, "
        "Spark in local mode on the same machine as the broker, over the input topic the throughput phase of the "
        "same run read (same records, same sentinels), next to that run's live `fw-1` exactly-once. Each Kafka "
        "partition is a Spark task running the live service's task runner; its outputs are written exactly once "
        "(a transactional producer per task) to a new topic, read back read_committed and compared with the "
        "reference like the live runs' (✓ / ✗).",
        "",
        "- *records/s*: live, from the first output (or commit) to the last; replay, the job's own `records/s` "
        "(`[replay] done:` line: input records ÷ seconds from the Spark session being up to the job's end, "
        "reading Kafka included).",
        "- *while processing*: the replay's input records ÷ the seconds from its first task's start to its last "
        "task's end (`records/s while processing` of the `done` line): the job without Spark's start of the job, "
        "its Python workers and its task launches, as the live rate leaves out the service's start.",
        "- *per core*: replay records/s ÷ the master's cores (job; while processing); live `fw-1` is one process, "
        "its records/s is its per-core rate.",
        "- *wall s*: launch to end, start-up included (live: until the group had committed every input "
        "offset; replay: the whole `fw replay` command, the JVM and the Spark session included; the job's own "
        "seconds in parentheses).",
        "- *CPU s/M*: CPU seconds (user + system) per million input records of every process of the run, "
        "sampled from /proc (live: the measured span; replay: the whole command, in parentheses the job "
        "alone, from the Spark session being up to the `done` line).",
        "- *cores busy*: CPU seconds per wall second over the same span (live: the measured span; replay: the "
        "job alone), + the local broker's over the same span when it was measured: it shares the cores, so "
        "`local[2]` can be at most the cores ÷ what `local[1]` kept busy, the broker included, times "
        "`local[1]`. A `local[1]` replay is more than one core: with reader `spark` the JVM reads Kafka and "
        "converts to Arrow while a Python worker runs the task, and Spark compiles and schedules on further "
        "threads; with reader `librdkafka` the task reads its partitions itself (the framework's Kafka client, "
        "librdkafka's fetch threads beside the task) and the JVM only schedules.",
        "",
    ]
    for name, e in sources:
        e = {**e, "replay": _medians(e["replay"], lambda r: (r["workload"], r["master"], _reader(r)),
                                     "job_records_per_s")}
        live = _index(e["throughput"])
        masters = list(dict.fromkeys(r["master"] for r in e["replay"]))
        m = e["machine"]
        lines += [
            f"From `benchmarks/results/{name}` (run {e['run']}{', ' + e['label'] if e.get('label') else ''}; "
            f"{e['config']['records']:,} records plus one sentinel per partition, {e['config']['partitions']} "
            f"partitions = {e['config']['partitions']} Spark tasks per stage, {_stage_counts(e)}; pyspark "
            f"{m.get('pyspark', '?')}, {m['cores']} cores; {_rounds(e)}load average {', '.join(f'{x:.2f}' for x in e['loadavg_at_start'])} "
            f"at the start, {', '.join(f'{x:.2f}' for x in e.get('loadavg_at_end', []))} at the end).",
            "",
        ]
        for w, rows in _replay_rows(e).items():
            lv = live.get((w, "exactly_once", "fw-1"))
            lines += [f"**{w}** ({e['workloads'].get(w, '')})", "",
                      "| run | records/s | while processing | per core | per core while processing | wall s | "
                      "CPU s/M | cores busy | check |",
                      "|---|---:|---:|---:|---:|---:|---:|---:|:-:|"]
            if lv:
                rate = _fmt(lv.get('records_per_s'))
                lines.append(f"| live `fw-1`, exactly-once | {rate}{_spread(lv)} | {rate} | {rate} | {rate} | "
                             f"{_fmt(lv.get('lag_zero_s'))} | {_fmt(lv.get('cpu_s_per_million'))} | {_busy(lv)} | "
                             f"{_check(lv)} |")
            for r in sorted(rows, key=lambda r: (_reader(r), masters.index(r["master"]))):
                status = "" if r.get("status") == "ok" else f" ({r.get('status')})"
                job_cpu = f" ({_fmt(r['job_cpu_s_per_million'])})" if r.get("job_cpu_s_per_million") else ""
                lines.append(f"| replay {_run_name(r)}{status} | {_fmt(r.get('job_records_per_s'))}{_spread(r)} | "
                             f"{_fmt(r.get('processing_records_per_s'))} | {_fmt(r.get('records_per_s_per_core'))} | "
                             f"{_fmt(_per_core(r, 'processing_records_per_s'))} | {_fmt(r.get('wall_s'))} "
                             f"({_fmt(r.get('job_s'))}) | {_fmt(r.get('cpu_s_per_million'))}{job_cpu} | "
                             f"{_plus_broker(r.get('job_cores_busy'), r.get('job_broker_cores_busy'))} | "
                             f"{_check(r)} |")
            for one, two in _scalings(rows):
                if _replay_ok(one) and _replay_ok(two):
                    lines += ["", f"Reader `{_reader(one)}`: `{two['master']}` / `{one['master']}` = "
                                  f"{_ratio(two, one, 'job_records_per_s')} (job records/s), "
                                  f"{_ratio(two, one, 'processing_records_per_s')} (while processing)."]
            lines.append("")
        lines += _cpu_parts(e)
        lines += ["**Targets of the replay**", "", "| target | workload | where we stand | met? |", "|---|---|---|---|"]
        for w, rows in _replay_rows(e).items():
            lv = (live.get((w, "exactly_once", "fw-1")) or {}).get("records_per_s")
            for r in rows:
                if not _replay_ok(r) or not lv:
                    lines.append(f"| replay records/s per core ≥ live `fw-1`'s | {w} | {_run_name(r)}: not measured "
                                 f"({r.get('status') if r.get('status') != 'ok' else 'no live fw-1 exactly-once run'}) "
                                 "| – |")
                    continue
                ok = r.get("check", {}).get("ok") is True
                stands, verdicts = [], []
                for label, rate in (("job", r["records_per_s_per_core"]),
                                    ("while processing", _per_core(r, "processing_records_per_s"))):
                    if rate:
                        stands.append(f"{label} {rate:,} = {rate / lv:.0%}")
                        verdicts.append(f"{'met' if rate >= lv and ok else 'not met'} ({label})")
                lines.append(f"| replay records/s per core ≥ live `fw-1`'s | {w} | {_run_name(r)}: "
                             f"{'; '.join(stands)} of live {lv:,}{'' if ok else ', output ✗'} | "
                             f"{', '.join(verdicts)} |")
            for one, two in _scalings(rows):
                name = f"`{two['master']}` ≥ {SCALING_TARGET}× `{one['master']}`, reader `{_reader(one)}`"
                if _replay_ok(one) and _replay_ok(two):
                    stands, verdicts = [], []
                    for label, key in (("job", "job_records_per_s"), ("while processing", "processing_records_per_s")):
                        if one.get(key) and two.get(key):
                            ratio = two[key] / one[key]
                            bound = _scaling_bound(one, e["machine"]["cores"]) if label == "job" else ""
                            stands.append(f"{label} {two[key]:,} vs {one[key]:,} = {ratio:.2f}×{bound}")
                            verdicts.append(f"{'met' if ratio >= SCALING_TARGET else 'not met'} ({label})")
                    lines.append(f"| {name} | {w} | {'; '.join(stands)} | {', '.join(verdicts)} |")
                else:
                    lines.append(f"| {name} | {w} | not measured (a replay did not finish) | – |")
        lines.append("")
        lines += _replay_profiles(e)
    return lines


def main() -> None:
    args = sys.argv[1:]
    keep_plot = "--no-plot" in args  # docs/benchmarks.png stays as it is
    files = [a for a in args if a != "--no-plot"]
    path = Path(files[0])
    d = json.loads(path.read_text())
    extra = [(Path(p).name, json.loads(Path(p).read_text())) for p in files[1:]]
    memory = [(n, e) for n, e in extra if "rss_full_mb" in e]
    extra = [(n, e) for n, e in extra if "rss_full_mb" not in e]
    joins = [(n, e) for n, e in [(path.name, d)] + extra if any(r["workload"] in JOINS for r in e["throughput"])]
    latency_extra = [(n, e) for n, e in extra if e.get("latency")]
    replays = [(path.name, d)] if d.get("replay") else []
    replays += [(n, e) for n, e in extra if e.get("replay")]
    # a plot compares systems: not drawn from a run of one system (a replay run, a soak)
    if not keep_plot and len(d["systems"]) > 1 and _have_matplotlib():
        plot(d, [(n, e) for n, e in latency_extra if len(e["systems"]) > 1])  # comparisons only, not soaks
    text = markdown(d, path.name)
    inserted = supplementary(d, latency_extra) + replay_section(replays) + join_section(joins, memory)
    if inserted:
        marker = "## Targets"
        text = text.replace(marker, "\n".join(inserted) + "\n" + marker, 1)
    DOC.write_text(text)
    print(DOC)


if __name__ == "__main__":
    main()
