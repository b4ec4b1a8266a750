"""The speed-versus-reproducibility plane: where each mode of a suite sits (its geometric-mean
relative throughput, the fraction of workloads it made reproducible), and the frontier of the
modes no other mode beats on both."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from detbench.analysis.labels import baseline_mode, mode_key
from detbench.analysis.matrix import RAN, ran_somewhere, relative_throughput, verdicts


def plane(df: pd.DataFrame, baseline: str | None = None) -> pd.DataFrame:
    """One row per (suite, mode): where the mode sits on the speed-versus-reproducibility plane.

    ``relative_throughput`` is the geometric mean over the suite's workloads that the mode ran
    (``ran`` of ``workloads``) of its throughput relative to ``baseline``; ``reproducible`` is
    the fraction of the suite's workloads that were bitwise identical in every replicate (a
    workload the mode could not run counts as not reproducible; one that ran in no mode is left
    out, as in ``recommendations``). A mode the run gave only some of the suite's workloads (an
    attribution study's attention-backend variants) is not on the plane: its fraction would
    count what it never ran. ``frontier`` marks the modes no other mode beats on both
    axes: the best choices. ``baseline``: ``baseline_mode`` of the run when None.
    """
    v = verdicts(df)
    baseline = baseline_mode(v["mode"]) if baseline is None else baseline
    v = v.assign(rel=relative_throughput(v, str(baseline)))
    rows: list[dict[str, Any]] = []
    for suite, g in v.groupby("suite", sort=False):
        g = g[g["workload"].isin(ran_somewhere(g))]
        n = int(g["workload"].nunique())
        for mode, m in g.groupby("mode", sort=False):
            if m["workload"].nunique() < n:  # run on some workloads only (an attribution variant)
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
    """Set ``points["frontier"]``: per suite, True for the modes that no other mode beats on both
    ``relative_throughput`` and ``reproducible`` (at least as good on both, better on one)."""
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
