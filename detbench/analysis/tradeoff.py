"""The speed-versus-reproducibility plane: where each mode of a suite sits (``plane``), the modes
no other beats on both axes (``mark_frontier``), and the plane with its noise (``points``).
``mark_frontier`` compares point estimates, so a mode faster by noise alone sits on it. In
``points`` the frontier agrees with the recommendation: among the modes reproducible on every
workload it holds the recommended mode alone, and a less reproducible mode is on it only when
nothing at least as reproducible beats its point and its interval lies above that of every
more reproducible frontier mode. An ``inert`` mode is never on it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from detbench.analysis import stats
from detbench.analysis.cost_intervals import ratio, replicate_samples
from detbench.analysis.labels import baseline_mode, mode_key, run_device
from detbench.analysis.matrix import RAN, ran_somewhere, relative_throughput, verdicts
from detbench.analysis.recommend import inert_changes


def plane(df: pd.DataFrame, baseline: str | None = None) -> pd.DataFrame:
    """One row per (suite, mode): the geometric mean over the workloads it ran of its throughput
    relative to ``baseline``, and the fraction of the suite's workloads (those that ran in some
    mode) it made reproducible. A mode run on some workloads only is left out."""
    v = verdicts(df)
    baseline = baseline_mode(v["mode"]) if baseline is None else baseline
    v = v.assign(rel=relative_throughput(v, str(baseline)))
    rows: list[dict[str, Any]] = []
    for suite, g in v.groupby("suite", sort=False):
        g = g[g["workload"].isin(ran_somewhere(g))]
        n = int(g["workload"].nunique())
        for mode, m in g.groupby("mode", sort=False):
            if m["workload"].nunique() < n:  # its fraction would count what it never ran
                continue
            ran = m[m["verdict"].isin(RAN)]
            rel = pd.to_numeric(ran["rel"], errors="coerce").dropna()
            rows.append(
                {
                    "suite": suite,
                    "mode": mode,
                    "relative_throughput": float(np.exp(np.log(rel).mean())) if len(rel) else None,
                    "reproducible": int((m["verdict"] == "reproducible").sum()) / n,
                    "workloads": n,
                    "ran": len(ran),
                    "nondeterministic": int((m["verdict"] == "nondeterministic").sum()),
                    "failed": int((~m["verdict"].isin(RAN)).sum()),
                }
            )
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    mark_frontier(out)
    keys = out["mode"].map(mode_key)
    out["_order"], out["_label"] = keys.map(lambda k: k[0]), keys.map(lambda k: k[1])
    return out.sort_values(["suite", "_order", "_label"], kind="stable").drop(
        columns=["_order", "_label"]
    )


def mark_frontier(points: pd.DataFrame) -> None:
    """Set ``points["frontier"]``: per suite, the modes no other mode beats on both axes."""
    points["frontier"] = False
    for _, g in points.groupby("suite", sort=False):
        pts = g.dropna(subset=["relative_throughput"])
        for i, r in pts.iterrows():
            dominated = (
                (pts["relative_throughput"] >= r["relative_throughput"])
                & (pts["reproducible"] >= r["reproducible"])
                & (
                    (pts["relative_throughput"] > r["relative_throughput"])
                    | (pts["reproducible"] > r["reproducible"])
                )
            ).any()
            points.loc[i, "frontier"] = not dominated


def points(
    df: pd.DataFrame,
    rec: pd.DataFrame,
    baseline: str | None = None,
    seed: int = stats.SEED,
    v: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """``plane`` with each point and its 95% interval from ``cost_intervals.ratio`` (None for the
    baseline and without samples), ``inert``, ``recommended`` and the noise-aware ``frontier``;
    ``rec``: ``recommend.recommendations`` of ``df``; ``v``: ``matrix.verdicts(df)`` if known."""
    baseline = str(baseline_mode(df["mode"]) if baseline is None else baseline)
    p = plane(df, baseline)
    if p.empty:
        return p
    device = run_device(df)
    v = verdicts(df) if v is None else v
    groups = {k: g for k, g in df.groupby(["suite", "workload", "mode"], sort=False)}
    lows, highs, centres = [], [], []
    for r in p.to_dict("records"):
        low = high = None
        centre = r["relative_throughput"]
        if r["mode"] != baseline and r["relative_throughput"] is not None:
            ran = v[(v["suite"] == r["suite"]) & (v["mode"] == r["mode"]) & v["verdict"].isin(RAN)]
            ratios = []
            for w in ran["workload"]:
                a = groups.get((r["suite"], w, r["mode"]))
                b = groups.get((r["suite"], w, baseline))
                if (
                    a is not None
                    and b is not None
                    and replicate_samples(a)
                    and replicate_samples(b)
                ):
                    name = stats.comparison_key(r["suite"], w, r["mode"], baseline)
                    ratios.append(ratio(a, b, name, seed))
            if ratios and len(ratios) == len(ran):
                mean = stats.geometric_mean(ratios)
                low, high, centre = mean.low, mean.high, mean.point
        lows.append(low)
        highs.append(high)
        centres.append(centre)
    p = p.assign(
        relative_throughput=pd.Series(centres, index=p.index, dtype=float),
        ci_low=pd.Series(lows, index=p.index, dtype=object),
        ci_high=pd.Series(highs, index=p.index, dtype=object),
    )
    p["inert"] = [bool(inert_changes(str(m), device)) for m in p["mode"]]
    picks = rec[rec["workload"] == "*"].set_index("suite")["mode"].to_dict() if len(rec) else {}
    p["recommended"] = [picks.get(s) == m for s, m in zip(p["suite"], p["mode"], strict=True)]
    p["frontier"] = False
    for _suite, g in p.groupby("suite", sort=False):
        for i in _frontier(g, baseline):
            p.loc[i, "frontier"] = True
    return p


def _bounds(r: Any) -> tuple[float, float]:
    x = float(r["relative_throughput"])
    low = x if r["ci_low"] is None or pd.isna(r["ci_low"]) else float(r["ci_low"])
    high = x if r["ci_high"] is None or pd.isna(r["ci_high"]) else float(r["ci_high"])
    return low, high


def _frontier(g: pd.DataFrame, baseline: str) -> list[Any]:
    pts = g[g["relative_throughput"].notna() & ~g["inert"]]
    if pts.empty:
        return []
    on: list[Any] = []
    full = pts[pts["reproducible"] >= 1.0]
    if len(full):
        on += list(full.index[full["recommended"]])
    rest = pts[pts["reproducible"] < 1.0].sort_values("reproducible", ascending=False)
    for i in rest.index:
        r = rest.loc[i]
        x = float(r["relative_throughput"])
        better = pts[(pts["reproducible"] >= r["reproducible"]) & (pts.index != i)]
        if (better["relative_throughput"].astype(float) >= x).any():
            continue
        above = [j for j in on if pts.loc[j, "reproducible"] > r["reproducible"]]
        if all(_bounds(r)[0] > _bounds(pts.loc[j])[1] for j in above):
            on.append(i)
    return on
