"""Verdicts and relative throughput per (workload, mode) from the raw records: the summary table,
peak memory, the training loss divergence and the recipes."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, cast

import numpy as np
import pandas as pd

from detbench.analysis.cost_intervals import costs
from detbench.analysis.labels import (
    baseline_mode,
    changed_mask,
    changed_settings,
    counted,
    mode_key,
    ordered_modes,
)
from detbench.store.schema import Status

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
    # every replicate's workload changed a setting behind detbench's back: nothing to count
    "settings_changed": "chg",
}

#: Verdicts of a mode that ran the workload (status ok in every replicate).
RAN = ("reproducible", "nondeterministic", "single")
#: Verdicts that compare two replicates or more: run-to-run behaviour known.
JUDGED = ("reproducible", "nondeterministic")
#: What a (workload, mode) with one replicate only tells, in words: nothing run to run.
ONE_REPLICATE = "one replicate only (a run-to-run verdict needs two)"


def unjudged(v: pd.DataFrame) -> list[str]:
    """The workloads of ``v`` (one suite's) that ran with one replicate only in every mode:
    nothing is known run to run, so no sentence may say no mode made them reproducible."""
    ran = v[v["verdict"].isin(RAN)]
    judged = set(ran.loc[ran["verdict"].isin(JUDGED), "workload"].astype(str))
    return [str(w) for w in dict.fromkeys(ran["workload"].astype(str)) if w not in judged]


def _present(x: Any) -> bool:
    """Not None and not NaN: what ``Series.nunique`` counts."""
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def _number(x: Any) -> float | None:
    """``x`` as ``pd.to_numeric(errors="coerce").dropna()`` keeps it: a float, else None."""
    if x is None or isinstance(x, bool):
        return None if x is None else float(x)
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def verdicts(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (suite, workload, mode): verdict, replicate counts, distinct fingerprints,
    median items/s and the largest difference measured. A record whose workload changed a
    setting (``changed``, ``changed_settings``) does not vote; when all did, the verdict is
    ``settings_changed``."""
    rows: list[dict[str, Any]] = []
    used = [
        "suite",
        "workload",
        "mode",
        "status",
        "fingerprint",
        "max_abs_diff",
        "items_per_second",
        "message",
        "settings_changed",
    ]
    # Plain lists, not pandas selections: a report calls this often on thousands of records.
    col = {c: (df[c].tolist() if c in df.columns else [None] * len(df)) for c in used}
    changed = changed_mask(df).to_numpy()
    groups = df.groupby(["suite", "workload", "mode"], sort=False).indices
    for key, idx in groups.items():
        suite, workload, mode = cast(tuple[Any, Any, Any], key)
        chg = [i for i in idx if changed[i]]
        count = [i for i in idx if not changed[i]]
        names = list(
            dict.fromkeys(n for i in chg for n in changed_settings(col["settings_changed"][i]))
        )
        ok = [i for i in count if col["status"][i] == Status.OK]
        bad = [i for i in count if col["status"][i] != Status.OK]
        distinct = len({col["fingerprint"][i] for i in ok if _present(col["fingerprint"][i])})
        if not count:
            verdict = "settings_changed"
        elif bad:  # the most frequent status, the least among ties (Series.mode sorts them)
            tally = Counter(str(col["status"][i]) for i in bad)
            most = max(tally.values())
            verdict = min(x for x, n in tally.items() if n == most)
        elif len(ok) >= 2:
            verdict = "reproducible" if distinct == 1 else "nondeterministic"
        else:
            verdict = "single"
        diffs = [x for x in (_number(col["max_abs_diff"][i]) for i in ok) if x is not None]
        rates = [x for x in (_number(col["items_per_second"][i]) for i in ok) if x is not None]
        rate = float(np.median(rates)) if rates else (math.nan if ok else None)
        rows.append(
            {
                "suite": suite,
                "workload": workload,
                "mode": mode,
                "verdict": verdict,
                "replicates": len(idx),
                "ok": len(ok),
                "distinct_fingerprints": distinct,
                "max_abs_diff": max(diffs) if diffs else None,
                "items_per_second": rate,
                "message": col["message"][bad[0]] if bad else None,
                "changed": len(chg),
                "changed_settings": names,
            }
        )
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    keys = out["mode"].map(mode_key)
    out["_order"], out["_label"] = keys.map(lambda k: k[0]), keys.map(lambda k: k[1])
    return out.sort_values(["suite", "workload", "_order", "_label"], kind="stable").drop(
        columns=["_order", "_label"]
    )


def relative_throughput(v: pd.DataFrame, baseline: str) -> pd.Series:
    """Each row's items/s over the same workload's items/s in ``baseline`` (NaN where missing)."""
    base = v[v["mode"] == baseline].set_index(["suite", "workload"])["items_per_second"]
    idx = pd.MultiIndex.from_frame(v[["suite", "workload"]])
    return pd.Series(
        pd.to_numeric(v["items_per_second"], errors="coerce").to_numpy()
        / pd.to_numeric(base.reindex(idx), errors="coerce").to_numpy(),
        index=v.index,
    )


def cost_points(v: pd.DataFrame, baseline: str, c: pd.DataFrame) -> pd.Series:
    """Each row's throughput relative to ``baseline`` as its cost ``c`` states it (one number)."""
    rel = pd.to_numeric(relative_throughput(v, baseline), errors="coerce").to_numpy(dtype=float)
    if c.empty or "design" not in c.columns:
        return pd.Series(rel, index=v.index)
    paired = c[c["design"] == "paired"].set_index(["suite", "workload", "mode"])
    idx = pd.MultiIndex.from_frame(v[["suite", "workload", "mode"]])
    point = pd.to_numeric(paired["relative_throughput"].reindex(idx), errors="coerce")
    got = point.to_numpy(dtype=float)
    return pd.Series(np.where(np.isnan(got), rel, got), index=v.index)


def summary_table(
    df: pd.DataFrame, v: pd.DataFrame | None = None, c: pd.DataFrame | None = None
) -> tuple[str, str]:
    """(``baseline_mode``, the text table of workloads x modes): throughput relative to the
    baseline where significant, and a reproducibility mark. ``v`` and ``c``: ``verdicts(df)``
    and ``costs(df, baseline)`` where the caller has them."""
    v = verdicts(df) if v is None else v
    modes = ordered_modes(v["mode"])
    baseline = str(baseline_mode(modes))
    c = costs(df, baseline) if c is None else c
    v = v.assign(rel=cost_points(v, baseline, c))
    # A mode the paired phase timed as another (the same computation on this device): "≡M4".
    timed_as = df[df["timed_as"].notna()] if "timed_as" in df.columns else df.iloc[:0]
    twins = {
        (r["suite"], r["workload"], r["mode"]): f"M{modes.index(r['timed_as'])}"
        for r in timed_as.to_dict("records")
        if r["timed_as"] in modes
    }
    quality = {
        (r["suite"], r["workload"], r["mode"]): (bool(r["significant"]), bool(r["noisy"]))
        for r in c.to_dict("records")
    }

    def cell(row: pd.Series) -> str:
        mark = MARKS.get(row["verdict"], row["verdict"])
        if row["verdict"] not in RAN:
            return mark
        if row["mode"] == baseline:
            return f"base {mark}"
        significant, noisy = quality.get((row["suite"], row["workload"], row["mode"]), (1, 0))
        twin = twins.get((row["suite"], row["workload"], row["mode"]))
        if pd.isna(row["rel"]) and twin is not None:
            return f" ≡{twin} {mark}"
        if pd.isna(row["rel"]):
            return f"  -  {mark}"
        if not significant:
            return f"n.s. {mark}"
        return f"{row['rel']:.2f}{'~' if noisy else ''} {mark}"

    v["cell"] = v.apply(cell, axis=1)
    v["key"] = v["suite"] + "/" + v["workload"]
    rows = list(dict.fromkeys(df["suite"] + "/" + df["workload"]))  # the order they ran in
    table = v.pivot(index="key", columns="mode", values="cell").reindex(index=rows, columns=modes)
    table.columns = [f"M{i}" for i in range(len(modes))]
    table.index.name = None
    legend = "\n".join(f"  M{i}  {name}" for i, name in enumerate(modes))
    text = (
        f"throughput relative to mode {baseline!r} (each cost's point: from the rounds timed side "
        "by side where the run paired them, else the median of replicates) where the difference "
        "is significant; n.s. within the noise (95% interval contains 1), ~ noisy timing; "
        "= bitwise identical in every replicate, ≠ not, ? one replicate only"
        + ("; ≡Mk timed as mode Mk, the same computation on this device" if twins else "")
        + (
            "; chg every replicate changed a setting during the workload (not counted)"
            if (v["verdict"] == "settings_changed").any()
            else ""
        )
        + f"\n{legend}\n\n{table.fillna('').to_string()}"
    )
    return baseline, text


def peak_memory(df: pd.DataFrame, baseline: str | None = None) -> pd.DataFrame:
    """Per (suite, workload, mode): the median ``peak_memory_bytes`` of the ok replicates and
    its ratio to ``baseline``'s (NaN where unknown or 0). Empty where no record has it."""
    if "peak_memory_bytes" not in df.columns:
        return pd.DataFrame()
    baseline = baseline_mode(df["mode"]) if baseline is None else baseline
    df = counted(df)
    ok = df[df["status"] == Status.OK].assign(
        peak=pd.to_numeric(df["peak_memory_bytes"], errors="coerce")
    )
    if ok["peak"].isna().all():
        return pd.DataFrame()
    key = ["suite", "workload", "mode"]
    med = ok.groupby(key, sort=False)["peak"].median().reset_index()
    base = med[med["mode"] == baseline].set_index(["suite", "workload"])["peak"]
    base_peak = base.reindex(pd.MultiIndex.from_frame(med[["suite", "workload"]])).to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = med["peak"].to_numpy() / np.where(base_peak > 0, base_peak, np.nan)
    return med.rename(columns={"peak": "peak_memory_bytes"}).assign(memory_ratio=ratio)


def ran_somewhere(v: pd.DataFrame) -> list[Any]:
    """The workloads of verdict rows ``v`` that ran (status ok) in at least one mode."""
    return list(dict.fromkeys(v.loc[v["verdict"].isin(RAN), "workload"]))


def divergence(df: pd.DataFrame) -> pd.DataFrame:
    """Per (suite, workload, mode, step) of the training workloads whose replicates differ: the
    largest loss difference from the first replicate, and whether a step fingerprint differs."""
    if "losses" not in df.columns:
        return pd.DataFrame()
    rows: list[dict[str, Any]] = []
    df = counted(df)
    ok = df[(df["status"] == Status.OK) & df["losses"].notna()]
    for (suite, workload, mode), g in ok.groupby(["suite", "workload", "mode"], sort=False):
        g = g.sort_values("replicate")
        if len(g) < 2 or g["fingerprint"].nunique() == 1:
            continue
        ref_losses = np.asarray(g["losses"].iloc[0], dtype=float)
        ref_steps = list(g["step_fingerprints"].iloc[0] or [])
        for step in range(len(ref_losses)):
            others = [np.asarray(x, dtype=float) for x in g["losses"].iloc[1:]]
            diff = max(abs(o[step] - ref_losses[step]) for o in others if len(o) > step)
            params_differ = any(
                step < len(s or []) and step < len(ref_steps) and s[step] != ref_steps[step]
                for s in g["step_fingerprints"].iloc[1:]
            )
            rows.append(
                {
                    "suite": suite,
                    "workload": workload,
                    "mode": mode,
                    "step": step + 1,
                    "max_abs_loss_diff": float(diff),
                    "step_fingerprint_differs": params_differ,
                }
            )
    return pd.DataFrame(rows)


def recipes(df: pd.DataFrame) -> pd.DataFrame:
    """One row per recipe workload: its verdicts summarised, whether its bits equal those of
    ``params["compare_with"]`` (None: not both reproducible), its throughput in the baseline."""
    if df.empty or "params" not in df.columns:
        return pd.DataFrame()
    recs = df[df["params"].map(lambda p: isinstance(p, dict) and "recipe" in p)]
    if recs.empty:
        return pd.DataFrame()
    v = verdicts(recs)
    baseline = baseline_mode(df["mode"])
    counts = counted(recs)
    prints = (
        counts[counts["status"] == Status.OK].groupby(["workload", "mode"])["fingerprint"].agg(set)
    )
    rows: list[dict[str, Any]] = []
    for (suite, workload), g in v.groupby(["suite", "workload"], sort=False):
        params = recs.loc[recs["workload"] == workload, "params"].iloc[0]
        by_mode = dict(zip(g["mode"], g["verdict"], strict=True))
        kinds = sorted(set(by_mode.values()))
        if len(kinds) == 1:
            where = f"all {len(by_mode)} modes" if len(by_mode) > 1 else next(iter(by_mode))
            summary = f"{kinds[0]} in {where}"
        else:
            summary = "; ".join(f"{m}: {x}" for m, x in by_mode.items())
        other = params.get("compare_with")
        same: bool | None = None
        if other:
            pairs = [(prints.get((workload, m)), prints.get((other, m))) for m in by_mode]
            if all(a is not None and b is not None and len(a) == len(b) == 1 for a, b in pairs):
                same = all(a == b for a, b in pairs)
        base = g[g["mode"] == baseline]
        base = base if len(base) else g.iloc[:1]
        rows.append(
            {
                "suite": suite,
                "workload": workload,
                "recipe": params["recipe"],
                "variant": params.get("variant", workload),
                "verdict": summary,
                "reproducible": kinds == ["reproducible"],
                "compare_with": other,
                "same_bits": same,
                "items_per_second": base["items_per_second"].iloc[0],
            }
        )
    order = {w: i for i, w in enumerate(dict.fromkeys(recs["workload"]))}
    rows.sort(key=lambda r: order[r["workload"]])
    return pd.DataFrame(rows, dtype=object)
