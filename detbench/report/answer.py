"""The report's first section, "The answer": per suite what to set and what it costs, then what
stays irreproducible and why, in about fifteen lines. How the mode is chosen is told in Method."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pandas as pd

from detbench import analysis
from detbench.analysis import cause, engines, price, runstate, stats, suite_answer, switches
from detbench.analysis.matrix import unjudged
from detbench.core.modes import DEFAULT_MODE, DETERMINISTIC_MODE, get_mode
from detbench.report.aa_check import MARK, assumed_words, one_replicate
from detbench.report.render import Block, Bullets, Code, Heading, Para, Table, num

#: Names listed in a sentence before "and N more".
SHOWN = 6


def one_line(mode: str) -> str:
    """The lines of ``mode``'s snippet that differ from torch's defaults, as one line."""
    base = set(DEFAULT_MODE.snippet().splitlines())
    lines = [
        ln
        for ln in get_mode(mode).snippet().splitlines()
        if ln not in base and not ln.startswith(("import ", "#"))
    ]
    return "; ".join(lines)


def interval_text(point: Any, low: Any, high: Any) -> str:
    """``0.94x [0.91, 0.97]``, with ``stats.noise_words`` where the interval contains 1."""
    text = num(point, ".2f") + "x"
    if low is None or high is None or num(low) == "–" or num(high) == "–":
        return text + " (no interval)"
    text += f" [{num(low, '.2f')}, {num(high, '.2f')}]"
    noise = stats.noise_words(low, high)
    return text + (f", {noise}" if noise else "")


def suite_rows(
    df: pd.DataFrame,
    rec: pd.DataFrame,
    v: pd.DataFrame,
    points: pd.DataFrame,
    baseline: str,
    full: Mapping[str, price.Price] | None = None,
) -> list[list[str | Code]]:
    """One row per suite of ``suite_answer.answers``; ``full``: ``analysis.price`` by suite."""
    by_suite = {r["suite"]: r for r in rec[rec["workload"] == "*"].to_dict("records")}
    rows: list[list[str | Code]] = []
    for a in suite_answer.answers(df, rec, v):
        row: list[str | Code] = [f"{a.suite} ({a.text})", "–", "–"]
        if a.mode is not None:
            line = one_line(a.mode)
            row[1] = Code(line) if line else "nothing: torch's defaults"
            q: Any = None
            if a.complete:
                row[0], q = f"{a.suite} ({a.mode})", by_suite[a.suite]
            elif len(points):
                p = points[(points["suite"] == a.suite) & (points["mode"] == a.mode)]
                q = p.iloc[0] if len(p) else None
            if q is not None:
                row[2] = _cost(
                    a.mode, baseline, q["relative_throughput"], q.get("ci_low"), q.get("ci_high")
                )
        if full is not None:
            p_full = full.get(a.suite)
            row.append("–" if p_full is None else price_cell(p_full, baseline))
        rows.append(row)
    return rows


def price_cell(p: price.Price, baseline: str) -> str:
    """A suite's price of full determinism, with how many workloads ran where some did not."""
    cell = _cost(p.mode, baseline, p.point, p.low, p.high)
    if p.ran < p.workloads:
        cell += f" ({p.ran} of {p.workloads} workloads ran)"
    return cell


def _cost(mode: str, baseline: str, point: Any, low: Any, high: Any) -> str:
    if mode == baseline:
        return "1x: the baseline"
    return interval_text(point, low, high)


def _why(
    suite: str, workload: str, g: pd.DataFrame, params: Any, located: list[Mapping[str, Any]]
) -> str:
    """What the run knows of why no mode made (suite, workload) reproducible."""
    if isinstance(params, Mapping) and "recipe" in params:
        return f"seeding recipe {params['recipe']}/{params.get('variant', workload)}, by design"
    mine = [loc for loc in located if loc.get("workload") == workload]
    if culprits := sorted({str(c["op"]) for loc in mine for c in loc.get("culprits") or []}):
        return "culprit " + ", ".join(culprits) + " (located)"
    plain = g[g["mode"].map(lambda m: not (analysis.mode_of(str(m)) or DEFAULT_MODE).settings)]
    if len(with_settings := g[(g["verdict"] == "reproducible") & ~g.index.isin(plain.index)]):
        return "reproducible only with a setting beyond the four flags: " + ", ".join(
            map(str, with_settings["mode"])
        )
    ops = sorted(
        {m.group(1) for x in g["message"].dropna() if (m := suite_answer.NO_DET.search(str(x)))}
    )
    if ops:
        return (
            f"{', '.join(ops)} has no deterministic implementation (unsupported under "
            "deterministic algorithms, nondeterministic without them)"
        )
    det = g[
        g["mode"].map(
            lambda m: bool((x := analysis.mode_of(str(m))) and x.deterministic_algorithms)
        )
    ]
    if (det["verdict"] == "nondeterministic").any():
        return (
            "nondeterministic even under deterministic algorithms: beyond the flags' reach "
            "(seeding, threads, data order, the workload itself)"
        )
    return ", ".join(sorted(set(map(str, g["verdict"]))))


def irreproducible(df: pd.DataFrame, v: pd.DataFrame, env: Mapping[str, Any]) -> list[str]:
    """Per reason, the workloads that ran somewhere and were reproducible in no mode."""
    located = list(env.get("located") or [])
    params = df.drop_duplicates(["suite", "workload"]).set_index(["suite", "workload"])["params"]
    by_reason: dict[str, list[str]] = {}
    for (suite, workload), g in v.groupby(["suite", "workload"], sort=False):
        if not g["verdict"].isin(analysis.RAN).any() or (g["verdict"] == "reproducible").any():
            continue
        if unjudged(g):  # one replicate only: nothing known run to run (``open_lines``)
            continue
        p = params.get((suite, workload))
        why = _why(str(suite), str(workload), g, p, located)
        if (g["verdict"] == "single").any():  # not yet judged in every mode
            why += "; some modes have one replicate only"
        key = "seeding recipes that do not seed, by design" if why.startswith("seeding") else why
        by_reason.setdefault(key, []).append(f"{suite}/{workload}")
    return [f"{suite_answer.names(names, SHOWN)}: {why}" for why, names in by_reason.items()]


def open_lines(v: pd.DataFrame) -> list[str]:
    """The workloads with one replicate only in every mode: no verdict run to run yet."""
    names = [f"{suite}/{w}" for suite, g in v.groupby("suite", sort=False) for w in unjudged(g)]
    if not names:
        return []
    return [
        f"No run-to-run verdict yet for {suite_answer.names(names, SHOWN)}: "
        + ("it has" if len(names) == 1 else "each has")
        + " one replicate only in every mode that ran it, and a verdict needs two."
    ]


def switch_line(effects: list[switches.SwitchEffect], device: str | None) -> str:
    """Which switches changed the bits, which only the time, and which act on nothing."""
    effects = [replace(e, device=device) if e.device != device else e for e in effects]
    changed = [e for e in effects if e.changed_bits]
    inert = [e for e in effects if not e.changed_bits and e.workloads and e.inert]
    same = [e for e in effects if not e.changed_bits and e.workloads and not e.inert]
    parts = []
    if changed:
        parts.append(
            "changed the bits: "
            + "; ".join(
                f"{e.words} ({len(e.bits_changed)} of {e.workloads} workloads"
                + (f", {len(e.made_reproducible)} made reproducible" if e.made_reproducible else "")
                + ")"
                for e in changed
            )
        )
    if same:
        words = [
            f"{e.words} {interval_text(e.ratio.point, e.ratio.low, e.ratio.high)}"
            if e.ratio is not None
            else e.words
            for e in same
        ]
        parts.append("changed no bits, only the time: " + "; ".join(words))
    if inert and device:
        verb, it, which = (
            ("acts", "it", "it") if len(inert) == 1 else ("act", "them", "one of them")
        )
        parts.append(
            f"{', '.join(e.words for e in inert)} {verb} on nothing on a {device.upper()}: "
            f"no cost is put on {it} (the modes that differ in {which} alone are the same "
            "computation)"
        )
    return "Switches, " + "; ".join(parts) + "." if parts else ""


def engine_lines(df: pd.DataFrame) -> list[str]:
    """Where one (workload, mode)'s processes chose different cuDNN engines (``--cudnn-log``)."""
    out = []
    for (workload, mode), reps in engines.engine_choices(df).items():
        for conv, chosen in engines.differs(reps).items():
            out.append(
                f"cuDNN's log: in {workload} under {mode}, the processes chose different "
                f"engines: {engines.describe(conv, chosen)}"
            )
    return out[:SHOWN]


def _full_words(mode: str, stands_for: str | None, device: str | None) -> str:
    if stands_for is None:
        return mode
    return f"{stands_for} ({mode}, the same computation on a {str(device).upper()})"


def price_line(
    prices: list[price.Price], full: tuple[str, str | None] | None, baseline: str
) -> str:
    """That no mode of full determinism was timed, or that its price is ``Price.too_wide``."""
    if full is None:
        return (
            f"The price of full determinism is not known from this run: it timed no mode with "
            f"every determinism switch on ({DETERMINISTIC_MODE})."
        )
    wide = [p for p in prices if p.too_wide]
    if not wide:
        return ""
    where = "; ".join(f"{p.suite}: {num(p.low, '.2f')}x to {num(p.high, '.2f')}x" for p in wide)
    return (
        f"The price of full determinism is too uncertain here to say anything "
        f"({where}): its 95% interval holds both half and twice {baseline}'s throughput, so this "
        "run cannot tell whether it slows the work down or speeds it up; more replicates, or a "
        "quieter machine, narrow it."
    )


def price_text(
    v: pd.DataFrame, points: pd.DataFrame, env: Mapping[str, Any], baseline: str, device: str | None
) -> str:
    """The price of full determinism for the console, in the answer table's words."""
    full = price.full_mode(v["mode"], device, env.get("study"), price.costed_modes(points))
    if full is None:
        return price_line([], None, baseline)
    found = price.prices(points, full[0])
    if not found:
        return ""
    head = f"The price of full determinism ({_full_words(*full, device)} vs {baseline}): "
    text = head + "; ".join(f"{p.suite} {price_cell(p, baseline)}" for p in found) + "."
    wide = price_line(found, full, baseline)
    return text + (f"\n{wide}" if wide else "")


CPU_LINE = (
    "This run was on a CPU: the cuDNN flags act on nothing there (the modes that differ only in "
    "them are the same computation, and never recommended), and the costs are a CPU's; run on "
    "a GPU for the costs that matter."
)


def one_replicate_marks(
    df: pd.DataFrame,
    rec: pd.DataFrame,
    v: pd.DataFrame,
    rows: list[list[str | Code]],
    costs: pd.DataFrame,
    baseline: str,
    full: str | None,
) -> str:
    """Marks the intervals of ``rows`` that rest on one replicate; returns the legend, or ""."""
    if costs.empty:
        return ""
    c = costs[costs["mode"] != baseline]
    one = c[one_replicate(c)].groupby(["suite", "mode"]).size()
    if one.empty:
        return ""
    every = c.groupby(["suite", "mode"]).size()
    where: dict[tuple[str, str], str] = {}
    for a, row in zip(suite_answer.answers(df, rec, v), rows, strict=True):
        for col, mode in ((2, a.mode), (3, full)):  # ``suite_rows``' throughput and price
            cell = row[col] if col < len(row) else None
            if mode is None or mode == baseline or not isinstance(cell, str) or "]" not in cell:
                continue
            k = int(one.get((a.suite, mode), 0))
            if k:  # the mark right after the interval, before any words on it
                row[col] = cell.replace("]", f"] {MARK}", 1)
                where[(a.suite, mode)] = f"{k} of {int(every[(a.suite, mode)])}"
    if not where:
        return ""
    by_suite = len({s for s, _ in where}) == len(where)
    said = ", ".join(f"{s} {n}" if by_suite else f"{s} ({m}) {n}" for (s, m), n in where.items())
    return (
        f"{MARK} The interval rests on one replicate in some or all of the suite's workloads "
        f"({said}), whose costs assume {assumed_words()}."
    )


def blocks(
    df: pd.DataFrame,
    env: Mapping[str, Any],
    rec: pd.DataFrame,
    points: pd.DataFrame,
    v: pd.DataFrame,
    baseline: str,
    device: str | None,
    costs: pd.DataFrame | None = None,
) -> list[Block]:
    """The section; ``costs`` None: no mark of the intervals that rest on one replicate."""
    out: list[Block] = [Heading(2, "The answer")]
    state = runstate.run_state(df, env)
    alert = state.partial or bool(state.throttle) or bool(state.set_aside)
    out.append(Para(state.line(), alert=alert))
    load = state.load
    if load is not None and load.is_busy:
        out.append(Para(load.sentence(), alert=True))
    where = "before any CUDA work " if device != "cpu" else ""
    full = price.full_mode(v["mode"], device, env.get("study"), price.costed_modes(points))
    by_suite = {p.suite: p for p in price.prices(points, full[0])} if full else None
    header = [
        "suite (recommended mode)",
        f"set this {where}(Python)",
        f"throughput vs {baseline} (95% interval)",
    ]
    if full is not None:
        header.append(f"full determinism: {_full_words(*full, device)} vs {baseline}")
    rows = suite_rows(df, rec, v, points, baseline, by_suite)
    marks = ""
    if costs is not None:
        marks = one_replicate_marks(df, rec, v, rows, costs, baseline, full[0] if full else None)
    out.append(Table(header, rows))
    stuck = irreproducible(df, v, env)
    items = [
        marks,
        price_line(list((by_suite or {}).values()), full, baseline),
        "Reproducible in no mode: " + "; ".join(stuck) + "." if stuck else "",
        *open_lines(v),
        *cause.sentences(cause.causes(df, v)),
        *engine_lines(df),
        switch_line(switches.effects(df, v=v), device),
        CPU_LINE if device == "cpu" else "",
        load.sentence() if load is not None and not load.is_busy else "",
    ]
    items = [x for x in items if x]
    if items:
        out.append(Bullets(items))
    return out
