"""The figure of the report's ``Batch invariance`` section: per suite, its speed-versus-batch-
invariance plane (``detbench.report.invariance`` is the section, ``detbench.report.tradeoff`` draws
the panel).

Each point is a mode: its throughput against the fraction of the suite's workloads that are batch
invariant in it. The workloads counted are those that declare ``batch_sizes``, ran in some mode and
are not invariant references (a reference is the price of invariance, not a mode's behaviour).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from detbench import analysis
from detbench.analysis import tradeoff
from detbench.analysis.invariance_table import table
from detbench.report.plots import Plot, save_figure, subplots
from detbench.report.tradeoff import draw_panel, drawn, finish, key_parts

KIND = "invariance-plane"


#: The plane's axis, and the words for what it leaves out.
PLANE_AXIS = "workloads batch invariant\n(invariant references left out)"


def plane(df: pd.DataFrame, baseline: str | None = None) -> pd.DataFrame:
    """One row per (suite, mode) over the suite's workloads with batch sizes that are not
    invariant references (a reference is the price of invariance, not a mode's behaviour) and
    ran in some mode: ``relative_throughput`` (geometric mean of the mode's throughput relative
    to ``baseline``, as ``analysis.plane``), ``reproducible`` (here: the fraction of those
    workloads batch invariant in the mode; no verdict counts as not invariant), ``invariant``,
    ``workloads`` and ``frontier``. A mode run on only some of them is not on the plane."""
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


def write_plots(df: pd.DataFrame, env: dict[str, Any], directory: Path) -> list[Plot]:
    """Per suite with batch verdicts, its speed-versus-batch-invariance plane, PNG and SVG, under
    ``directory``; none when no record has batch sizes or no mode has a throughput to place.
    ``env`` is unused (the signature of the report's section modules)."""
    points = plane(df)
    if points.empty or points["relative_throughput"].isna().all():
        return []
    baseline = str(analysis.baseline_mode(df["mode"]))
    # The intervals of the same geometric means, over the same workloads (the one statistic).
    sub = df[df["workload"].isin(set(points.attrs.get("workloads", ())))]
    ci = tradeoff.points(sub, pd.DataFrame(columns=["suite", "workload", "mode"]), baseline)
    if len(ci):
        points = points.merge(
            ci[["suite", "mode", "ci_low", "ci_high"]], how="left", on=["suite", "mode"]
        )
    directory.mkdir(parents=True, exist_ok=True)
    plots = []
    for suite in dict.fromkeys(points["suite"]):
        s = str(suite)
        p = points[points["suite"] == suite]
        if p["relative_throughput"].isna().all():
            continue
        fig, ax = subplots(figsize=(8, 4.6))
        title = (
            f"{s}: speed versus batch invariance, per mode ({int(p['workloads'].iloc[0])} "
            "workloads with batch sizes;\ntheir invariant references are the price, not "
            "counted)"
        )
        missing = draw_panel(ax, p, title, PLANE_AXIS, baseline)
        key = [k.split(" (")[0] for k in key_parts(drawn(fig))]  # short: the title is long
        if key:
            ax.set_title(title + "; " + "; ".join(key), fontsize=10)
        if missing:
            fig.text(0.01, 0.0, "Not placed: " + "; ".join(missing), fontsize=8, va="bottom")
        finish(fig)
        title = f"{s}: speed versus batch invariance (invariant references left out)"
        plots.append(Plot(KIND, s, title, *save_figure(fig, directory, f"{s}-invariance-plane")))
    return plots
