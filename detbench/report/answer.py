"""The report's first section, "The answer": what to set, what it costs, and what stays
irreproducible, in about fifteen lines.

- Per suite, the recommended settings as one line of Python (what they change from torch's
  defaults) and their throughput against the baseline with its 95% interval ("within the noise"
  where the interval contains 1; the baseline itself has no interval: it is 1 by definition). A
  suite no one mode made reproducible gets the mode that made the most of its workloads so.
- The workloads no mode made bitwise reproducible, and what the run knows of why: the op that
  has no deterministic implementation (from the unsupported record's message), the culprit op
  ``run --locate`` found, a setting beyond the four flags that did make it reproducible, a
  seeding recipe that does not seed by design, or nondeterminism beyond the flags' reach.
- Which switches changed the bits and which only the time (``analysis.switches``).
- A run on a CPU, and a run timed on a busy host (``analysis.busy``), say so here.

How the recommendation is chosen is told in the Method section, not here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pandas as pd

from detbench import analysis
from detbench.analysis import busy, switches
from detbench.analysis.recommend import simplicity_key
from detbench.core.modes import DEFAULT_MODE, get_mode
from detbench.report.render import Block, Bullets, Code, Heading, Para, Table, num

#: Names listed in a sentence before "and N more".
SHOWN = 6
_NO_DET = re.compile(r"(\w+) does not have a deterministic implementation")


def one_line(mode: str) -> str:
    """The Python that puts a script in ``mode``, as one line: the lines of its snippet that
    differ from torch's defaults ("" for the default mode)."""
    base = set(DEFAULT_MODE.snippet().splitlines())
    lines = [ln for ln in get_mode(mode).snippet().splitlines()
             if ln not in base and not ln.startswith(("import ", "#"))]  # fmt: skip
    return "; ".join(lines)


def interval_text(point: Any, low: Any, high: Any) -> str:
    """``0.94x [0.91, 0.97]``, with ", within the noise" where the interval contains 1."""
    text = num(point, ".2f") + "x"
    if low is None or high is None or num(low) == "–" or num(high) == "–":
        return text + " (no interval)"
    text += f" [{num(low, '.2f')}, {num(high, '.2f')}]"
    return text + (", within the noise" if float(low) <= 1.0 <= float(high) else "")


def _names(items: list[str]) -> str:
    shown = ", ".join(items[:SHOWN])
    return shown + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def _best_partial(points: pd.DataFrame, suite: str) -> Mapping[str, Any] | None:
    """The mode that made the most of ``suite``'s workloads reproducible (inert modes left out;
    ties: the simplest)."""
    p = points[
        (points["suite"] == suite) & ~points["inert"] & points["relative_throughput"].notna()
    ]
    if p.empty or float(p["reproducible"].max()) <= 0:
        return None
    top = p[p["reproducible"] == p["reproducible"].max()]
    best = min(top.to_dict("records"), key=lambda r: simplicity_key(str(r["mode"])))
    return best


def suite_rows(rec: pd.DataFrame, points: pd.DataFrame, baseline: str) -> list[list[str | Code]]:
    """One row per suite: suite, the one line of Python, the throughput against the baseline."""
    rows: list[list[str | Code]] = []
    for r in rec[rec["workload"] == "*"].to_dict("records"):
        suite = str(r["suite"])
        if r["mode"] is None:
            best = _best_partial(points, suite) if len(points) else None
            if best is None:
                rows.append([suite, "no mode made any workload reproducible", "–"])
                continue
            n = int(best["workloads"])
            k = round(float(best["reproducible"]) * n)
            line = one_line(str(best["mode"]))
            rows.append([
                f"{suite} (no one mode: {best['mode']} makes {k} of {n} reproducible)",
                Code(line) if line else "nothing: torch's defaults",
                _cost(str(best["mode"]), baseline, best["relative_throughput"],
                      best.get("ci_low"), best.get("ci_high")),
            ])  # fmt: skip
            continue
        line = one_line(str(r["mode"]))
        rows.append([
            f"{suite} ({r['mode']})", Code(line) if line else "nothing: torch's defaults",
            _cost(str(r["mode"]), baseline, r["relative_throughput"], r["ci_low"], r["ci_high"]),
        ])  # fmt: skip
    return rows


def _cost(mode: str, baseline: str, point: Any, low: Any, high: Any) -> str:
    if mode == baseline:
        return "1x: the baseline"
    return interval_text(point, low, high)


def _why(suite: str, workload: str, g: pd.DataFrame, params: Any,
         located: list[Mapping[str, Any]]) -> str:  # fmt: skip
    """What the run knows of why no mode made (suite, workload) reproducible."""
    if isinstance(params, Mapping) and "recipe" in params:
        return f"seeding recipe {params['recipe']}/{params.get('variant', workload)}, by design"
    culprits = sorted({str(c["op"]) for loc in located if loc.get("workload") == workload
                       for c in loc.get("culprits") or []})  # fmt: skip
    if culprits:
        return "culprit " + ", ".join(culprits) + " (located)"
    plain = g[g["mode"].map(lambda m: not (analysis.mode_of(str(m)) or DEFAULT_MODE).settings)]
    with_settings = g[(g["verdict"] == "reproducible") & ~g.index.isin(plain.index)]
    if len(with_settings):
        return "reproducible only with a setting beyond the four flags: " + ", ".join(
            map(str, with_settings["mode"])
        )
    ops = sorted({m.group(1) for x in g["message"].dropna() if (m := _NO_DET.search(str(x)))})
    if ops:
        return f"{', '.join(ops)} has no deterministic implementation (unsupported under " \
               "deterministic algorithms, nondeterministic without them)"  # fmt: skip
    det = g[g["mode"].map(lambda m: bool((x := analysis.mode_of(str(m))) and
                                         x.deterministic_algorithms))]  # fmt: skip
    if (det["verdict"] == "nondeterministic").any():
        return "nondeterministic even under deterministic algorithms: beyond the flags' reach " \
               "(seeding, threads, data order, the workload itself)"  # fmt: skip
    return ", ".join(sorted(set(map(str, g["verdict"]))))


def irreproducible(df: pd.DataFrame, v: pd.DataFrame, env: Mapping[str, Any]) -> list[str]:
    """Per reason, the workloads that ran somewhere and were reproducible in no mode."""
    located = list(env.get("located") or [])
    params = df.drop_duplicates(["suite", "workload"]).set_index(["suite", "workload"])["params"]
    by_reason: dict[str, list[str]] = {}
    for (suite, workload), g in v.groupby(["suite", "workload"], sort=False):
        if not g["verdict"].isin(analysis.RAN).any() or (g["verdict"] == "reproducible").any():
            continue
        p = params.get((suite, workload))
        why = _why(str(suite), str(workload), g, p, located)
        key = "seeding recipes that do not seed, by design" if why.startswith("seeding") else why
        by_reason.setdefault(key, []).append(f"{suite}/{workload}")
    return [f"{_names(names)}: {why}" for why, names in by_reason.items()]


def switch_line(effects: list[switches.SwitchEffect], device: str | None) -> str:
    changed = [e for e in effects if e.changed_bits]
    same = [e for e in effects if not e.changed_bits and e.workloads]
    parts = []
    if changed:
        parts.append("changed the bits: " + "; ".join(
            f"{e.words} ({len(e.bits_changed)} of {e.workloads} workloads"
            + (f", {len(e.made_reproducible)} made reproducible" if e.made_reproducible else "")
            + ")" for e in changed))  # fmt: skip
    if same:
        inert = " (they act on nothing on a CPU)" if device == "cpu" else ""
        parts.append("changed no bits, only the time: " + "; ".join(
            f"{e.words} {interval_text(e.ratio.point, e.ratio.low, e.ratio.high)}"
            if e.ratio is not None else e.words for e in same) + inert)  # fmt: skip
    return "Switches, " + "; ".join(parts) + "." if parts else ""


CPU_LINE = (
    "This run was on a CPU: the cuDNN flags act on nothing there (the modes that differ only in "
    "them are the same computation, and never recommended), and the costs are a CPU's; run on "
    "a GPU for the costs that matter."
)


def blocks(df: pd.DataFrame, env: Mapping[str, Any], rec: pd.DataFrame, points: pd.DataFrame,
           v: pd.DataFrame, baseline: str, device: str | None) -> list[Block]:  # fmt: skip
    """The section; ``points``: ``analysis.tradeoff.points``; ``device``: ``run_device``."""
    out: list[Block] = [Heading(2, "The answer")]
    load = busy.host_load(df)
    if load is not None and load.is_busy:
        out.append(Para(load.sentence(), alert=True))
    out.append(Table([
        "suite (recommended mode)", "set this before any CUDA work (Python)",
        f"throughput vs {baseline} (95% interval)",
    ], suite_rows(rec, points, baseline)))  # fmt: skip
    items = []
    stuck = irreproducible(df, v, env)
    if stuck:
        items.append("Reproducible in no mode: " + "; ".join(stuck) + ".")
    line = switch_line(switches.effects(df, v=v), device)
    if line:
        items.append(line)
    if device == "cpu":
        items.append(CPU_LINE)
    if load is not None and not load.is_busy:
        items.append(load.sentence())
    if items:
        out.append(Bullets(items))
    return out
