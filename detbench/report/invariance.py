"""The ``Batch invariance`` section and plane, for workloads that declare ``batch_sizes``. An
invariant reference (params ``"invariant_reference_of": "<base>"``) is the price of invariance."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from detbench import analysis
from detbench.analysis import tradeoff
from detbench.analysis.invariance_table import table
from detbench.report.matrices import grouped_rows, key_para, split, symbol_matrix
from detbench.report.plots import Plot, save_figure, subplots
from detbench.report.render import Block, Bullets, Code, Details, Figure, Heading, Para, Table, num
from detbench.report.tradeoff import draw_panel, drawn, finish, key_parts


def verdict_cell(r: Mapping[Any, Any]) -> str:
    if not r.get("ran", True):
        return str(r["note"])  # "unsupported: <why>": it did not run
    if r["invariant"] is True:
        return "invariant"
    if r["invariant"] is False:
        first = r["first_variant_size"]
        return f"varies from batch {first}" if first is not None else "varies"
    return f"no verdict: {r['note']}"


def price_text(r: Mapping[Any, Any], key: str = "price") -> str:
    """``0.35x [0.30, 0.40]``: ``key`` (``price`` or ``setting_price``) with its interval."""
    if r.get(key) is None:
        return "no throughput to compare"
    text = num(r[key], ".2f") + "x"
    low, high = r.get(f"{key}_low"), r.get(f"{key}_high")
    if low is not None and high is not None:
        text += f" [{num(low, '.2f')}, {num(high, '.2f')}]"
    return text


def _yes_no(x: Any) -> str:
    return ("yes" if x else "NO") if isinstance(x, (bool, np.bool_)) else "–"


def _distinct(r: Mapping[Any, Any]) -> str:
    if r["distinct_results"] is None:
        return "–"
    d = int(r["distinct_results"])
    what = (" completion" + ("s" if d != 1 else "")) if r["completion"] else ""
    return f"{d}{what} of {len(r['batch_sizes'])}"


def _name(r: Mapping[Any, Any]) -> str:
    """The workload, with the SDPA backend it ran where its name does not say it."""
    name, backend = str(r["workload"]), r.get("sdpa_backend")
    return name + (f" (sdpa {backend})" if backend and str(backend) not in name else "")


def speed_text(r: Mapping[Any, Any]) -> str:
    return num(r["items_per_second"], ".4g") + (
        " tokens/s" if r["completion"] and r["items_per_second"] is not None else ""
    )


def suite_table(t: pd.DataFrame, suite: str) -> Table:
    refs = bool(t["reference_of"].notna().any())
    variants = bool(t["base_mode"].notna().any())
    rows: list[list[Any]] = []
    for r in t.to_dict("records"):
        ref = r["reference_of"]
        row = [
            _name(r),
            r["mode"],
            "/".join(str(b) for b in r["batch_sizes"]) or "–",
            verdict_cell(r),
            _distinct(r),
            num(r["max_abs_diff"], ".3g"),
            speed_text(r),
        ]
        if refs:
            row += [
                f"{price_text(r)} vs {ref}" if ref else "–",
                _yes_no(r["reference_invariant"]) if ref else "–",
            ]
        if variants:
            row.append(
                f"{price_text(r, 'setting_price')} vs {r['base_mode']}" if r["base_mode"] else "–"
            )
        rows.append(row)
    header = ["workload", "mode", "batch sizes", "row 0 across batch sizes"]
    header += ["distinct row-0 results (of K sizes)", "max abs diff", "items/s (median)"]
    if refs:
        header += ["price of invariance (throughput vs base)", "reference invariant"]
    if variants:
        header.append("price of the setting (throughput vs base mode)")
    return Table(header, rows, caption=f"{suite}: batch invariance per workload and mode")


def matrix_symbol(r: Mapping[Any, Any]) -> str:
    if not r.get("ran", True):
        return "u"
    if r["invariant"] is True:
        return "="
    if r["invariant"] is False:
        first = r["first_variant_size"]
        return f"≠{first}" if first is not None else "≠"
    return "?"


def _short(x: float, fmt: str) -> str:
    return num(x, fmt).replace("e+0", "e").replace("e-0", "e-").replace("e+", "e")


def value_range(values: list[Any], fmt: str, unit: str = "") -> str:
    """``lo–hi`` (one value where they are equal) in ``fmt``, exponents without padding."""
    xs = sorted(float(x) for x in values if num(x) != "–")
    if not xs:
        return "–"
    lo, hi = _short(xs[0], fmt), _short(xs[-1], fmt)
    return f"{lo}{unit}" if lo == hi else f"{lo}–{hi}{unit}"


def _sizes_text(sizes: Any) -> str:
    sizes = [str(b) for b in sizes]
    if len(sizes) > 5:
        return f"{sizes[0]}–{sizes[-1]} ({len(sizes)} sizes)"
    return "/".join(sizes) or "–"


def compact_table(t: pd.DataFrame, suite: str, baseline: str) -> Table:
    """One row per workload and batch verdict; the price in the baseline mode where it can."""
    refs = bool(t["reference_of"].notna().any())
    groups = t.assign(_v=[verdict_cell(r) for r in t.to_dict("records")])

    def row(first: Mapping[Any, Any], where: str) -> list[str | Code]:
        g = groups[(groups["workload"] == first["workload"]) & (groups["_v"] == first["_v"])]
        base = g[g["mode"] == baseline]
        r = (base if len(base) else g).to_dict("records")[0]
        cells: list[str | Code] = [
            _name(r),
            where,
            _sizes_text(r["batch_sizes"]),
            str(first["_v"]),
            _distinct(r),
            value_range(list(g["max_abs_diff"]), ".3g"),
            value_range(list(g["items_per_second"]), ".3g"),
        ]
        if refs:
            ref = r["reference_of"]
            price = f"{price_text(r)} vs {ref} ({r['mode']})" if ref else "–"
            cells += [price, _yes_no(r["reference_invariant"]) if ref else "–"]
        return cells

    rows = grouped_rows(groups, int(t["mode"].nunique()), lambda r: str(r["_v"]), row)
    header = ["workload", "modes", "batch sizes", "row 0 across batch sizes"]
    header += ["distinct row-0 results", "max abs diff", "items/s"]
    if refs:
        header += ["price of invariance", "reference invariant"]
    return Table(header, rows, caption=f"{suite}: batch invariance, one row per verdict")


# --- The sentences ------------------------------------------------------------------------------


def _join(modes: list[str]) -> str:
    """Mode names, or "all N modes" past three (the modes are listed in the tables)."""
    return f"all {len(modes)} modes" if len(modes) > 3 else ", ".join(modes)


def _workload_words(w: str, m: pd.DataFrame) -> str:
    ran = m[m["ran"] == True]  # noqa: E712
    if ran.empty:
        return f"{w} ran in no mode ({'; '.join(dict.fromkeys(str(x) for x in m['note']))})"
    modes = list(m["mode"])
    inv = list(ran.loc[ran["invariant"] == True, "mode"])  # noqa: E712
    var = ran[ran["invariant"] == False]  # noqa: E712
    if len(inv) == len(modes):
        every = "every" if len(modes) > 1 else "the"
        return f"{w} is batch invariant in {every} mode ({_join(modes)})"
    if len(var) == len(modes):
        first = sorted({int(x) for x in var["first_variant_size"] if x is not None})
        det = bool(var["deterministic_algorithms"].map(lambda x: x is True).any())
        text = f"{w} is not batch invariant in any mode ({_join(modes)})"
        text += ", deterministic algorithms included" if det else ""
        return text + (f"; row 0 varies from batch {'/'.join(map(str, first))}" if first else "")
    text = f"{w} is batch invariant in {_join(inv) or 'no mode'}"
    if len(var):
        text += f" and not in {_join(list(var['mode']))}"
    if rest := len(ran) - len(inv) - len(var):
        text += f" (no verdict in {rest} mode(s))"
    for note, nm in m[m["ran"] != True].groupby("note", sort=False):  # noqa: E712
        text += f" (did not run in {_join(list(nm['mode']))}: {note})"
    return text


def completion_words(w: str, m: pd.DataFrame) -> str:
    """A decoder's distinct completions over K batch compositions, per mode that ran."""
    said = []
    for r in m[(m["ran"] == True) & m["distinct_results"].notna()].to_dict("records"):  # noqa: E712
        d = int(r["distinct_results"])
        said.append(
            f"in {r['mode']}, {d} distinct completion{'s' if d != 1 else ''} of the same "
            f"request over {len(r['batch_sizes'])} batch compositions, at {speed_text(r)}"
        )
    return f"{w}: " + "; ".join(said) if said else ""


def _added(mode: str, base: str) -> str:
    """The settings ``mode`` has beyond ``base``, as ``name=level``."""
    m, b = analysis.mode_of(mode), analysis.mode_of(base)
    if m is None or b is None:
        return mode.partition("[")[2].rstrip("]") or mode
    extra = [f"{n}={v}" for n, v in m.settings if (n, v) not in set(b.settings)]
    return ",".join(extra) or mode


def setting_words(mode: str, m: pd.DataFrame) -> str:
    """What a mode's settings do to batch invariance against its base mode, and at what price."""
    base = str(m["base_mode"].iloc[0])
    setting = _added(mode, base)
    head = f"The setting {setting} ({mode} against {base})"
    parts: list[str] = []
    was = m["base_mode_invariant"] == True  # noqa: E712
    now = m["invariant"] == True  # noqa: E712
    for r in m[~was & now].to_dict("records"):
        parts.append(
            f"makes {r['workload']} batch invariant, at {price_text(r, 'setting_price')}"
            f" the throughput of {base}"
        )
    for r in m[~was & ~now].to_dict("records"):
        if r["ran"]:
            what = "the setting does not make it invariant on this device"
            price = f"; {price_text(r, 'setting_price')} the throughput of {base}"
        else:
            what, price = f"it did not run with the setting ({r['note']})", ""
        parts.append(f"{r['workload']}: {what} ({verdict_cell(r)}{price})")
    for r in m[was & ~now].to_dict("records"):
        parts.append(f"{r['workload']} is invariant in {base} but not with it ({verdict_cell(r)})")
    if kept := int((was & now).sum()):
        parts.append(f"{kept} workload(s) invariant in {base} stay invariant (prices in the table)")
    return head + ": " + "; ".join(parts)


def conclusions(t: pd.DataFrame) -> dict[str, list[str]]:
    """Per suite, the section's sentences, from the numbers only."""
    out: dict[str, list[str]] = {}
    for suite, g in t.groupby("suite", sort=False):
        parts: list[str] = []
        ran = set(g.loc[g["ran"] == True, "workload"])  # noqa: E712
        refs = g[g["reference_of"].notna() & g["workload"].isin(ran)]
        bases = g[g["reference_of"].isna() & g["workload"].isin(ran)]
        for w, m in bases.groupby("workload", sort=False):
            text = _workload_words(str(w), m)
            for rw, rm in refs[refs["reference_of"] == w].groupby("workload", sort=False):
                rs = rm[rm["ran"].eq(True)].to_dict("records")
                prices = "; ".join(f"{price_text(r)} in {r['mode']}" for r in rs[:1])
                if len(rs) > 1:
                    spread = value_range([r["price"] for r in rs], ".2f", "x")
                    prices += f" ({spread} over the {len(rs)} modes it ran in)"
                text += f"; its invariant reference {rw} costs {prices}"
                if bad := [r["mode"] for r in rs if r["invariant"] is not True]:
                    text += (
                        f", but {rw} is NOT batch invariant itself in {_join(bad)}, "
                        "so that is not the price of invariance"
                    )
            parts.append(text)
        orphans = refs[~refs["reference_of"].isin(ran)]
        for rw, rm in orphans.groupby("workload", sort=False):
            parts.append(
                f"{_workload_words(str(rw), rm)}; it is the invariant reference of "
                f"{rm['reference_of'].iloc[0]}, which ran in no mode with a batch verdict: no price"
            )
        idle = g[~g["workload"].isin(ran)]
        for note, m in idle.groupby(idle["note"].astype(str), sort=False):
            parts.append(f"Ran in no mode: {', '.join(dict.fromkeys(m['workload']))} ({note})")
        for w, m in g[g["completion"] == True].groupby("workload", sort=False):  # noqa: E712
            parts.append(completion_words(str(w), m))
        for mode, m in g[g["base_mode"].notna()].groupby("mode", sort=False):
            parts.append(setting_words(str(mode), m))
        out[str(suite)] = [p + "." for p in parts if p]
    return out


# --- The plane ----------------------------------------------------------------------------------

KIND = "invariance-plane"
#: The plane's axis, and the words for what it leaves out.
PLANE_AXIS = "workloads batch invariant\n(invariant references left out)"


def plane(df: pd.DataFrame, baseline: str | None = None) -> pd.DataFrame:
    """As ``analysis.plane``, ``reproducible`` the share of workloads batch invariant in a mode.
    Invariant references are a price, not a mode's behaviour: they are left out."""
    t = table(df, n_boot=1)
    if t.empty:
        return pd.DataFrame()
    ran = set(t.loc[t["ran"] == True, "workload"])  # noqa: E712
    t = t[t["reference_of"].isna() & t["workload"].isin(ran)]
    if t.empty:
        return pd.DataFrame()
    baseline = analysis.baseline_mode(df["mode"]) if baseline is None else baseline
    v = analysis.verdicts(df[df["workload"].isin(set(t["workload"]))])
    v = v.assign(rel=analysis.relative_throughput(v, str(baseline)))
    rows: list[dict[str, Any]] = []
    for suite, g in t.groupby("suite", sort=False):
        n = int(g["workload"].nunique())
        for mode, m in g.groupby("mode", sort=False):
            if m["workload"].nunique() < n:
                continue
            vm = v[(v["suite"] == suite) & (v["mode"] == mode) & v["verdict"].isin(analysis.RAN)]
            rel = pd.to_numeric(vm["rel"], errors="coerce").dropna()
            rel = rel[rel > 0]
            inv = int((m["invariant"] == True).sum())  # noqa: E712
            rows.append(
                {
                    "suite": suite,
                    "mode": mode,
                    "workloads": n,
                    "invariant": inv,
                    "relative_throughput": float(np.exp(np.log(rel).mean())) if len(rel) else None,
                    "reproducible": inv / n,
                }
            )
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    analysis.mark_frontier(out)
    out.attrs["workloads"] = sorted(set(t["workload"]))  # those the points are over
    return out


def write_plots(df: pd.DataFrame, directory: Path) -> list[Plot]:
    """Per suite, its speed-versus-batch-invariance plane (PNG and SVG) under ``directory``."""
    points = plane(df)
    if points.empty or points["relative_throughput"].isna().all():
        return []
    baseline = str(analysis.baseline_mode(df["mode"]))
    # The intervals of the same geometric means, over the same workloads.
    sub = df[df["workload"].isin(set(points.attrs.get("workloads", ())))]
    ci = tradeoff.points(sub, pd.DataFrame(columns=["suite", "workload", "mode"]), baseline)
    if len(ci):
        points = points.merge(
            ci[["suite", "mode", "ci_low", "ci_high"]], how="left", on=["suite", "mode"]
        )
    directory.mkdir(parents=True, exist_ok=True)
    plots = []
    for s in map(str, dict.fromkeys(points["suite"])):
        p = points[points["suite"] == s]
        if p["relative_throughput"].isna().all():
            continue
        fig, ax = subplots(figsize=(8, 4.6))
        title = (
            f"{s}: speed versus batch invariance, per mode ({int(p['workloads'].iloc[0])} workloads"
            " with batch sizes;\ntheir invariant references are the price, not counted)"
        )
        missing = draw_panel(ax, p, title, PLANE_AXIS, baseline)
        if key := [k.split(" (")[0] for k in key_parts(drawn(fig))]:  # short: the title is long
            ax.set_title(title + "; " + "; ".join(key), fontsize=10)
        if missing:
            fig.text(0.01, 0.0, "Not placed: " + "; ".join(missing), fontsize=8, va="bottom")
        finish(fig)
        title = f"{s}: speed versus batch invariance (invariant references left out)"
        plots.append(Plot(KIND, s, title, *save_figure(fig, directory, f"{s}-invariance-plane")))
    return plots


# --- The section --------------------------------------------------------------------------------


def _method(t: pd.DataFrame) -> Para:
    text = (
        "What was compared: in a fresh worker under each mode, every workload that declares "
        "batch sizes was built at each declared size (freshly seeded) and ran one step; row 0 "
        "(index 0 of dim 0) of every batch-first output at each size was compared bitwise with "
        "row 0 at the smallest size. The workload makes row 0 the same request at every size, "
        "so a difference means the kernels computed the same request differently because of "
        "what shared its batch. A mode's verdict is 'invariant' only when every replicate found "
        "the same bits at every size; 'varies from batch N' names the smallest size whose row 0 "
        "differed in any replicate, and the max abs diff is the largest difference seen. "
        "'Distinct row-0 results' counts the different row-0 results of the first output over "
        "the K sizes (the most in any replicate): for a decoder, distinct completions of the "
        "same request over K batch compositions, the study's measure, and its items/s are "
        "tokens/s. Timing stays at the workload's own batch size."
    )
    if t["reference_of"].notna().any():
        text += (
            " The price of invariance: an invariant reference (a workload that computes the same "
            "thing in a batch-invariant way) against its base in the same mode, throughput "
            "relative to the base (ratio of the medians over replicates of each replicate's "
            "median, 95% interval from a two-level bootstrap over replicates and samples). A "
            "reference that is not itself invariant is marked NO: its speed is then no price."
        )
    if t["base_mode"].notna().any():
        text += (
            " The price of a setting: a mode with settings (name[setting=level]) against its "
            "base mode, same workload, throughput relative to the base mode with the same "
            "bootstrap interval; its own verdict is in the row-0 column."
        )
    return Para(text)


def blocks(df: pd.DataFrame, plots: list[Plot]) -> list[Block]:
    """The section: [] when no record has batch sizes."""
    t = table(df)
    if t.empty:
        return []
    out: list[Block] = [Heading(2, "Batch invariance"), _method(t)]
    words = conclusions(t)
    for suite, g in t.groupby("suite", sort=False):
        s = str(suite)
        out.append(Heading(3, s))
        if not g["ran"].eq(True).any():
            why = "; ".join(
                f"{note} ({n} workload/mode pair{'s' if n != 1 else ''})"
                for note, n in g["note"].astype(str).value_counts(sort=False).items()
            )
            text = (
                f"Nothing in {s} could run: every workload that declares batch sizes failed in "
                f"every mode, so there is no batch-invariance verdict. Why: {why}."
            )
            out.append(Para(text))
        baseline = str(analysis.baseline_mode(df["mode"]))
        out.append(compact_table(g, s, baseline))
        cells = g.assign(symbol=[matrix_symbol(r) for r in g.to_dict("records")])
        _, differ = split(cells)
        if len(differ):
            modes = analysis.ordered_modes(g["mode"])
            key = {"=": "batch invariant", "u": "did not run", "?": "no verdict"}
            symbols = list(differ["symbol"])
            for x in symbols:
                if x.startswith("≠"):
                    key[x] = f"varies from batch {x[1:]}" if len(x) > 1 else "varies"
            caption = f"{s}: where the batch verdict depends on the mode"
            out += [symbol_matrix(differ, modes, caption), key_para(symbols, modes, key)]
        out.append(Details(f"{s}: every workload and mode (full table)", [suite_table(g, s)]))
        bad = g[g["reference_of"].notna() & g["ran"].eq(True) & g["reference_invariant"].ne(True)]
        for w, b in bad.groupby("workload", sort=False):
            where = ", ".join(f"{r['mode']} ({verdict_cell(r)})" for r in b.to_dict("records"))
            text = (
                f"Warning: {w}, the invariant reference of {b['reference_of'].iloc[0]}, is NOT "
                f"batch invariant in {where}: its throughput is not the price of invariance."
            )
            out.append(Para(text))
        out += [Figure(p) for p in plots if p.kind == KIND and p.suite == s]
        if words[s]:
            out.append(Bullets(words[s]))
    return out
