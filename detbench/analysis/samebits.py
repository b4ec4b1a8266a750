"""Within one run: which modes and settings give the same bits as the baseline mode? Per
workload, the reproducible modes grouped by fingerprint (a nondeterministic mode has no bits of
its own to compare), with ``max_abs_diff_vs_default`` where the bits differ.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from detbench.analysis.labels import baseline_mode, counted, mode_key
from detbench.analysis.matrix import verdicts
from detbench.store.schema import Status


def table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (suite, workload) of a run with two or more modes: ``same`` (the modes with
    the baseline's bits), ``other`` (groups of modes with other bits, largest first), ..."""
    if df.empty or df["mode"].nunique() < 2:
        return pd.DataFrame()
    base = str(baseline_mode(df["mode"]))
    v = verdicts(df)
    prints = counted(df)
    prints = prints[(prints["status"] == Status.OK) & prints["fingerprint"].notna()]
    first = prints.groupby(["suite", "workload", "mode"], sort=False)["fingerprint"].first()
    diffs = (
        pd.to_numeric(prints["max_abs_diff_vs_default"], errors="coerce")
        .groupby([prints["suite"], prints["workload"], prints["mode"]])
        .max()
        if "max_abs_diff_vs_default" in prints.columns
        else pd.Series(dtype=float)
    )
    rows: list[dict[str, Any]] = []
    for (suite, workload), g in v.groupby(["suite", "workload"], sort=False):
        by_mode = dict(zip(g["mode"], g["verdict"], strict=True))
        if base not in by_mode or len(by_mode) < 2:
            continue
        modes = sorted(by_mode, key=mode_key)
        repro = [m for m in modes if by_mode[m] == "reproducible"]
        groups: dict[str, list[str]] = {}
        for m in repro:
            groups.setdefault(str(first.get((suite, workload, m))), []).append(m)
        ref = first.get((suite, workload, base)) if by_mode[base] == "reproducible" else None
        same = [m for m in groups.get(str(ref), []) if m != base] if ref is not None else []
        other = sorted(
            (ms for fpr, ms in groups.items() if ref is None or fpr != str(ref)),
            key=lambda ms: (-len(ms), mode_key(ms[0])),
        )
        found = {m: diffs.get((suite, workload, m)) for ms in other for m in ms}
        max_diff = {m: float(d) for m, d in found.items() if d is not None and pd.notna(d)}
        rows.append(
            {
                "suite": suite,
                "workload": workload,
                "baseline": base,
                "baseline_verdict": by_mode[base],
                "same": same,
                "other": other,
                "nondeterministic": [m for m in modes if by_mode[m] == "nondeterministic"],
                "not_run": {
                    m: by_mode[m]
                    for m in modes
                    if by_mode[m] not in ("reproducible", "nondeterministic")
                },
                "max_diff": max_diff,
            }
        )
    return pd.DataFrame(rows, dtype=object)


def diff_text(t: dict[str, float], modes: list[str]) -> str:
    """ " (max |diff| X)" of ``modes``, where recorded."""
    d = [t[m] for m in modes if m in t]
    return f" (max |diff| {max(d):.3g})" if d else ""


def describe(r: Mapping[Any, Any]) -> str:
    """One workload's groups in words."""
    base = r["baseline"]
    parts = []
    if r["baseline_verdict"] != "reproducible":
        parts.append(f"{base} is {r['baseline_verdict']}: no bits to compare with")
    elif r["same"]:
        parts.append(f"{base}'s bits in {', '.join(r['same'])}")
    else:
        parts.append(f"no other mode gives {base}'s bits")
    if r["other"]:
        groups = " | ".join(", ".join(ms) + diff_text(r["max_diff"], ms) for ms in r["other"])
        parts.append(f"other bits: {groups}")
    nondet = [m for m in r["nondeterministic"] if m != base]  # the baseline's is said above
    if nondet:
        parts.append(f"not reproducible: {', '.join(nondet)}")
    return "; ".join(parts)


def text(df: pd.DataFrame) -> str:
    """The summary's lines: workloads with bits unlike the baseline's, and a count of the rest."""
    t = table(df)
    if t.empty:
        return ""
    base = str(t["baseline"].iloc[0])
    all_same = (t["baseline_verdict"] == "reproducible") & t["other"].map(len).eq(0)
    lines = [f"same bits as {base} (modes whose replicates agree with each other):"]
    for r in t[~all_same].to_dict("records"):
        lines.append(f"  {r['suite']}/{r['workload']}: {describe(r)}")
    n = int(all_same.sum())
    if n:
        lines.append(f"  {n} workload(s): every reproducible mode gives {base}'s bits")
    return "\n".join(lines)
