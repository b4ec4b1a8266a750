"""The report's ``Batch invariance`` section and its plane, for a run whose workloads declare
``batch_sizes`` (``detbench.invariance``, ``detbench.measure._invariance``).

Everything here is computed from the records: each workload's batch-invariance verdict per mode
(over its replicates), and the price of invariance where the suite has an invariant reference (a
workload whose params hold ``"invariant_reference_of": "<base workload>"``): its throughput
relative to the base in the same suite and mode, with a 95% interval from the two-level bootstrap
of ``analysis.costs``. A run without such workloads gets no section and no figure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from detbench import analysis
from detbench.plots import Plot, _save, plane_figure
from detbench.render import Block, Figure, Heading, Para, Table, num

#: The params key that names the workload a reference computes invariantly.
REFERENCE_KEY = "invariant_reference_of"
KIND = "invariance-plane"
N_BOOT = 2000


def _sized(df: pd.DataFrame) -> pd.DataFrame:
    """The records that count and carry a batch-invariance verdict or note."""
    if df.empty or "batch_invariant" not in df.columns:
        return df.iloc[:0]
    df = analysis.counted(df)
    mask = df["batch_invariant"].notna()
    if "batch_note" in df.columns:
        mask |= df["batch_note"].notna()
    return df[mask]


def _reference_of(params: Any) -> str | None:
    if isinstance(params, dict) and params.get(REFERENCE_KEY):
        return str(params[REFERENCE_KEY])
    return None


def _sizes(values: pd.Series) -> tuple[int, ...]:
    out: set[int] = set()
    for x in values:
        if isinstance(x, dict):
            out.update(int(k) for k in x)
    return tuple(sorted(out))


def _verdict(g: pd.DataFrame) -> tuple[bool | None, str | None]:
    """(invariant, note) over a group's replicates: False if any ok replicate said False, True
    only if every ok replicate said True, else None with a note saying why."""
    ok = g[g["status"] == "ok"]
    said = [x for x in ok["batch_invariant"] if isinstance(x, (bool, np.bool_))]
    if any(not x for x in said):
        return False, None
    if ok.empty:
        return None, f"did not run ({', '.join(sorted(set(g['status'].astype(str))))})"
    if said and len(said) == len(ok):
        return True, None
    notes = [str(x) for x in g.get("batch_note", pd.Series(dtype=object)).dropna()]
    return None, notes[0] if notes else "no verdict in some replicates"


def _items_per_step(g: pd.DataFrame) -> float:
    if "items_per_step" in g.columns:
        v = pd.to_numeric(g["items_per_step"], errors="coerce").dropna()
        if len(v):
            return float(v.median())
    return 1.0


def _price(ref: pd.DataFrame, base: pd.DataFrame, rng: np.random.Generator,
           n_boot: int) -> tuple[float, float, float]:  # fmt: skip
    """The reference's items/s over the base's: the ratio of the medians over replicates of each
    replicate's median, with the 2.5-97.5th percentiles of the same ratio over two-level
    bootstrap resamples (as ``analysis.costs``); from the median items/s without an interval
    where the records hold no timing samples. NaN where either has no throughput."""
    nan = (math.nan, math.nan, math.nan)
    a, b = analysis.replicate_samples(ref), analysis.replicate_samples(base)
    if a and b:
        scale = _items_per_step(ref) / _items_per_step(base)
        point = scale * analysis.median_throughput(a) / analysis.median_throughput(b)
        boot = scale * (analysis.bootstrap_throughput(a, rng, n_boot)
                        / analysis.bootstrap_throughput(b, rng, n_boot))  # fmt: skip
        low, high = (float(x) for x in np.percentile(boot, [2.5, 97.5]))
        return float(point), low, high
    ra = pd.to_numeric(ref.loc[ref["status"] == "ok", "items_per_second"], errors="coerce")
    rb = pd.to_numeric(base.loc[base["status"] == "ok", "items_per_second"], errors="coerce")
    if ra.notna().any() and rb.notna().any() and float(rb.median()) > 0:
        return float(ra.median() / rb.median()), math.nan, math.nan
    return nan


def table(df: pd.DataFrame, n_boot: int = N_BOOT, seed: int = 0) -> pd.DataFrame:
    """One row per (suite, workload, mode) of the workloads whose records carry a batch verdict:
    ``invariant`` (True, False, or None with ``note``), ``first_variant_size`` (smallest over
    replicates), ``max_abs_diff`` (largest), ``batch_sizes``, ``replicates`` (ok ones), and for an
    invariant reference ``reference_of`` (its base), ``price`` with ``price_low``/``price_high``
    (its throughput relative to the base in the same mode, 95% interval), ``reference_invariant``
    (the reference's own verdict) and ``base_invariant``. Records whose workload changed a setting
    (``settings_changed``) are left out."""
    s = _sized(df)
    if s.empty:
        return pd.DataFrame()
    full = analysis.counted(df)
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for (suite, workload, mode), g in s.groupby(["suite", "workload", "mode"], sort=False):
        invariant, note = _verdict(g)
        ok = g[g["status"] == "ok"]
        first = pd.to_numeric(ok["batch_first_variant_size"], errors="coerce").dropna()
        diff = pd.to_numeric(ok["batch_max_abs_diff"], errors="coerce").dropna()
        sizes = _sizes(g["batch_same_as_smallest"]) if "batch_same_as_smallest" in g else ()
        base_name = _reference_of(g["params"].iloc[0]) if "params" in g.columns else None
        row: dict[str, Any] = {
            "suite": suite, "workload": workload, "mode": mode, "invariant": invariant,
            "note": note, "first_variant_size": int(first.min()) if len(first) else None,
            "max_abs_diff": float(diff.max()) if len(diff) else None, "batch_sizes": sizes,
            "replicates": len(ok), "reference_of": base_name, "price": None, "price_low": None,
            "price_high": None, "reference_invariant": None, "base_invariant": None,
            "deterministic_algorithms": bool(g["deterministic_algorithms"].iloc[0])
            if "deterministic_algorithms" in g.columns else None,
        }  # fmt: skip
        if base_name is not None:
            row["reference_invariant"] = invariant
            base = full[(full["suite"] == suite) & (full["workload"] == base_name)
                        & (full["mode"] == mode)]  # fmt: skip
            if len(base):
                sb = _sized(base)
                row["base_invariant"] = _verdict(sb)[0] if len(sb) else None
                price = _price(g, base, rng, n_boot)
                row["price"], row["price_low"], row["price_high"] = (
                    None if math.isnan(x) else x for x in price
                )
        rows.append(row)
    out = pd.DataFrame(rows, dtype=object)
    keys = out["mode"].map(analysis.mode_key)
    out["_o"], out["_l"] = keys.map(lambda k: k[0]), keys.map(lambda k: k[1])
    order = {w: i for i, w in enumerate(dict.fromkeys(s["workload"]))}
    out["_w"] = out["workload"].map(order)
    return (out.sort_values(["suite", "_w", "_o", "_l"], kind="stable")
            .drop(columns=["_o", "_l", "_w"]).reset_index(drop=True))  # fmt: skip


# -- the plane -------------------------------------------------------------------------------


def plane(df: pd.DataFrame, baseline: str | None = None) -> pd.DataFrame:
    """One row per (suite, mode) over the suite's workloads with a batch verdict:
    ``relative_throughput`` (geometric mean of the mode's throughput relative to ``baseline``,
    as ``analysis.plane``), ``reproducible`` (here: the fraction of those workloads batch
    invariant in the mode; no verdict counts as not invariant), ``workloads`` and ``frontier``."""
    t = table(df, n_boot=1)
    if t.empty:
        return pd.DataFrame()
    baseline = analysis.baseline_mode(df["mode"]) if baseline is None else baseline
    sized = df[df["workload"].isin(set(t["workload"]))]
    v = analysis.verdicts(sized)
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
            rows.append({
                "suite": suite, "mode": mode, "workloads": n,
                "relative_throughput": float(np.exp(np.log(rel).mean())) if len(rel) else None,
                "reproducible": int((m["invariant"] == True).sum()) / n,  # noqa: E712
                "invariant": int((m["invariant"] == True).sum()),  # noqa: E712
            })  # fmt: skip
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    analysis.mark_frontier(out)
    return out


def write_plots(df: pd.DataFrame, env: dict[str, Any], directory: Path) -> list[Plot]:
    """Per suite with batch verdicts, its speed-versus-batch-invariance plane, PNG and SVG, under
    ``directory``; none when no record has batch sizes. ``env`` is unused (the signature of the
    report's section modules)."""
    points = plane(df)
    if points.empty:
        return []
    baseline = str(analysis.baseline_mode(df["mode"]))
    directory.mkdir(parents=True, exist_ok=True)
    plots = []
    for suite in dict.fromkeys(points["suite"]):
        s = str(suite)
        p = points[points["suite"] == suite]
        fig = plane_figure(p, s, None, baseline)
        ax = fig.axes[0]
        ax.set_ylabel("fraction of workloads batch invariant")
        ax.set_title(f"{s}: speed versus batch invariance, per mode "
                     f"({int(p['workloads'].iloc[0])} workloads with batch sizes)")  # fmt: skip
        for leg in fig.legends:
            for text in leg.get_texts():
                if text.get_text().startswith("frontier"):
                    text.set_text("frontier: no mode is faster and more often batch invariant")
        title = f"{s}: speed versus batch invariance"
        plots.append(Plot(KIND, s, title, *_save(fig, directory, f"{s}-invariance-plane")))
    return plots


# -- the section -----------------------------------------------------------------------------


def _cell(r: Mapping[Any, Any]) -> str:
    if r["invariant"] is True:
        return "invariant"
    if r["invariant"] is False:
        first = r["first_variant_size"]
        return f"varies from batch {first}" if first is not None else "varies"
    return f"no verdict: {r['note']}"


def price_text(r: Mapping[Any, Any]) -> str:
    """``0.35x [0.30, 0.40]``: a reference's price, with its 95% interval where there is one."""
    if r.get("price") is None:
        return "no throughput to compare"
    text = num(r["price"], ".2f") + "x"
    if r.get("price_low") is not None and r.get("price_high") is not None:
        text += f" [{num(r['price_low'], '.2f')}, {num(r['price_high'], '.2f')}]"
    return text


def _yes_no(x: Any) -> str:
    return ("yes" if x else "NO") if isinstance(x, (bool, np.bool_)) else "–"


def _suite_table(t: pd.DataFrame, suite: str) -> Table:
    """Workload x mode; the price columns only where the suite has an invariant reference."""
    refs = bool(t["reference_of"].notna().any())
    rows: list[list[Any]] = []
    for r in t.to_dict("records"):
        ref = r["reference_of"]
        row = [
            r["workload"], r["mode"], "/".join(str(b) for b in r["batch_sizes"]) or "–",
            _cell(r), num(r["max_abs_diff"], ".3g") if r["max_abs_diff"] is not None else "–",
        ]  # fmt: skip
        if refs:
            row += [f"{price_text(r)} vs {ref}" if ref else "–",
                    _yes_no(r["reference_invariant"]) if ref else "–"]  # fmt: skip
        rows.append(row)
    header = ["workload", "mode", "batch sizes", "row 0 across batch sizes", "max abs diff"]
    if refs:
        header += ["price of invariance (throughput vs base)", "reference invariant"]
    return Table(header, rows, caption=f"{suite}: batch invariance per workload and mode")


def _modes_words(modes: list[str]) -> str:
    return ", ".join(modes)


def conclusions(t: pd.DataFrame) -> dict[str, str]:
    """Per suite, one sentence from the numbers: which workloads are batch invariant in which
    modes, and what each invariant reference costs (and whether it is invariant itself)."""
    out: dict[str, str] = {}
    for suite, g in t.groupby("suite", sort=False):
        parts: list[str] = []
        refs = g[g["reference_of"].notna()]
        for w, m in g[g["reference_of"].isna()].groupby("workload", sort=False):
            modes = list(m["mode"])
            inv = [x for x, y in zip(m["mode"], m["invariant"], strict=True) if y is True]
            var = m[m["invariant"] == False]  # noqa: E712
            if len(inv) == len(modes):
                text = f"{w} is batch invariant in {'every' if len(modes) > 1 else 'the'} mode"
                text += f" ({_modes_words(modes)})"
            elif len(var) == len(modes):
                first = sorted({int(x) for x in var["first_variant_size"] if x is not None})
                text = (f"{w} is not batch invariant in any mode ({_modes_words(modes)})"
                        + (", deterministic algorithms included"
                           if (var["deterministic_algorithms"] == True).any() else "")  # noqa: E712
                        + (f"; row 0 varies from batch {'/'.join(map(str, first))}"
                           if first else ""))  # fmt: skip
            else:
                text = f"{w} is batch invariant in {_modes_words(inv) or 'no mode'}"
                if len(var):
                    text += f" and not in {_modes_words(list(var['mode']))}"
                rest = len(modes) - len(inv) - len(var)
                if rest:
                    text += f" (no verdict in {rest} mode(s))"
            for rw, rm in refs[refs["reference_of"] == w].groupby("workload", sort=False):
                prices = "; ".join(f"{price_text(r)} in {r['mode']}"
                                   for r in rm.to_dict("records"))  # fmt: skip
                text += f"; its invariant reference {rw} costs {prices}"
                bad = [r["mode"] for r in rm.to_dict("records") if r["invariant"] is not True]
                if bad:
                    text += (f", but {rw} is NOT batch invariant itself in {_modes_words(bad)}, "
                             "so that is not the price of invariance")  # fmt: skip
            parts.append(text)
        orphans = refs[~refs["reference_of"].isin(set(g["workload"]))]
        for rw, rm in orphans.groupby("workload", sort=False):
            parts.append(f"{rw} names {rm['reference_of'].iloc[0]} as its base, which has no "
                         "batch verdict in this run: no price")  # fmt: skip
        out[str(suite)] = "; ".join(parts) + "."
    return out


def _method(t: pd.DataFrame) -> Para:
    refs = t["reference_of"].notna().any()
    return Para(
        "What was compared: in a fresh worker under each mode, every workload that declares "
        "batch sizes was built at each declared size (freshly seeded) and ran one step; row 0 "
        "(index 0 of dim 0) of every batch-first output at each size was compared bitwise with "
        "row 0 at the smallest size. The workload makes row 0 the same request at every size, "
        "so a difference means the kernels computed the same request differently because of "
        "what shared its batch. A mode's verdict is 'invariant' only when every replicate found "
        "the same bits at every size; 'varies from batch N' names the smallest size whose row 0 "
        "differed in any replicate, and the max abs diff is the largest difference seen. "
        "Timing stays at the workload's own batch size."
        + (
            " The price of invariance: an invariant reference (a workload that computes the same "
            "thing in a batch-invariant way) against its base in the same mode, throughput "
            "relative to the base (ratio of the medians over replicates of each replicate's "
            "median, 95% interval from a two-level bootstrap over replicates and samples). A "
            "reference that is not itself invariant is marked NO: its speed is then no price."
            if refs
            else ""
        )
    )


def blocks(df: pd.DataFrame, env: dict[str, Any], plots: list[Plot]) -> list[Block]:
    """The section: [] when no record has batch sizes. ``env`` is unused (the signature of the
    report's section modules)."""
    t = table(df)
    if t.empty:
        return []
    out: list[Block] = [Heading(2, "Batch invariance"), _method(t)]
    words = conclusions(t)
    for suite, g in t.groupby("suite", sort=False):
        s = str(suite)
        out.append(Heading(3, s))
        out.append(_suite_table(g, s))
        bad = g[g["reference_of"].notna() & (g["reference_invariant"] != True)]  # noqa: E712
        for w, b in bad.groupby("workload", sort=False):
            where = ", ".join(f"{r['mode']} ({_cell(r)})" for r in b.to_dict("records"))
            out.append(Para(
                f"Warning: {w}, the invariant reference of {b['reference_of'].iloc[0]}, is NOT "
                f"batch invariant in {where}: its throughput is not the price of invariance."
            ))  # fmt: skip
        out += [Figure(p) for p in plots if p.kind == KIND and p.suite == s]
        out.append(Para(words[s]))
    return out
