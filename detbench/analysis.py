"""Verdicts and relative throughput per (workload, mode), computed from the raw records."""

from __future__ import annotations

from typing import Any

import pandas as pd

from detbench.modes import DEFAULT_MODE, MODES

#: Verdicts, and the short mark each gets in the summary table.
MARKS = {
    "reproducible": "=",
    "nondeterministic": "≠",
    "single": "?",  # one successful replicate: run-to-run behaviour unknown
    "unsupported": "unsup",
    "oom": "oom",
    "error": "error",
    "timeout": "t/o",
    "crashed": "crash",
}


def verdicts(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (suite, workload, mode): verdict, replicate counts, distinct fingerprints,
    median items/s over the replicates' medians, and the largest difference measured."""
    rows: list[dict[str, Any]] = []
    order = {m.name: i for i, m in enumerate(MODES)}
    for (suite, workload, mode), g in df.groupby(["suite", "workload", "mode"], sort=False):
        ok = g[g["status"] == "ok"]
        bad = g[g["status"] != "ok"]
        distinct = int(ok["fingerprint"].nunique())
        if len(bad):
            verdict = str(bad["status"].mode().iloc[0])
        elif len(ok) >= 2:
            verdict = "reproducible" if distinct == 1 else "nondeterministic"
        else:
            verdict = "single"
        diffs = pd.to_numeric(ok["max_abs_diff"], errors="coerce").dropna()
        rows.append(
            {
                "suite": suite,
                "workload": workload,
                "mode": mode,
                "verdict": verdict,
                "replicates": len(g),
                "ok": len(ok),
                "distinct_fingerprints": distinct,
                "max_abs_diff": float(diffs.max()) if len(diffs) else None,
                "items_per_second": float(ok["items_per_second"].median()) if len(ok) else None,
                "message": None if not len(bad) else bad["message"].iloc[0],
            }
        )
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out["_order"] = out["mode"].map(order).fillna(len(order))
    return out.sort_values(["suite", "workload", "_order"], kind="stable").drop(columns="_order")


def relative_throughput(v: pd.DataFrame, baseline: str) -> pd.Series:
    """Each row's items/s over the same workload's items/s in ``baseline`` (NaN where missing)."""
    base = v[v["mode"] == baseline].set_index(["suite", "workload"])["items_per_second"]
    idx = pd.MultiIndex.from_frame(v[["suite", "workload"]])
    return pd.Series(
        pd.to_numeric(v["items_per_second"], errors="coerce").to_numpy()
        / pd.to_numeric(base.reindex(idx), errors="coerce").to_numpy(),
        index=v.index,
    )


def summary_table(df: pd.DataFrame) -> tuple[str, str]:
    """Workloads x modes: throughput relative to the default mode and a reproducibility mark.

    Returns (baseline mode name, text table). If the default mode was not run, the first mode
    that was is the baseline.
    """
    v = verdicts(df)
    modes = [m.name for m in MODES if m.name in set(v["mode"])]
    modes += [m for m in dict.fromkeys(v["mode"]) if m not in modes]
    baseline = DEFAULT_MODE.name if DEFAULT_MODE.name in modes else modes[0]
    v = v.assign(rel=relative_throughput(v, baseline))

    def cell(row: pd.Series) -> str:
        mark = MARKS.get(row["verdict"], row["verdict"])
        if row["verdict"] in ("reproducible", "nondeterministic", "single"):
            return f"{row['rel']:.2f} {mark}" if pd.notna(row["rel"]) else f"  -  {mark}"
        return mark

    v["cell"] = v.apply(cell, axis=1)
    v["key"] = v["suite"] + "/" + v["workload"]
    rows = list(dict.fromkeys(df["suite"] + "/" + df["workload"]))  # the order they ran in
    table = v.pivot(index="key", columns="mode", values="cell").reindex(index=rows, columns=modes)
    table.columns = [f"M{i}" for i in range(len(modes))]
    table.index.name = None
    legend = "\n".join(f"  M{i}  {name}" for i, name in enumerate(modes))
    text = (
        f"throughput relative to mode {baseline!r} (median of replicates); "
        "= bitwise identical in every replicate, ≠ not, ? one replicate only\n"
        f"{legend}\n\n{table.fillna('').to_string()}"
    )
    return baseline, text
