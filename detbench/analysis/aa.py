"""The A/A check: how often a run reports a cost that is not there.

An interval that claims 95% must contain the true ratio 95% of the time. Where two measured sides
are the same computation under the same settings, the true ratio is 1, so the share of their
intervals that exclude 1 (false costs) is what the run's intervals are worth, measured on the
run itself.

* **Paired design** (``paired``): the run times a second worker of the baseline's settings
  (copy 1 of ``paired.jsonl``) beside every other; copy 1 against copy 0, per workload, through
  the very estimator of the costs (``paired_costs.ratio``).
* **Separate design** (``separate``): on a CPU, a mode that differs from the baseline only in
  cuDNN switches (``cudnn.benchmark``, ``cudnn.deterministic``, cuDNN disabled) runs the same
  computation, since those switches act on nothing there; its cost from the records' own timing
  (``stats.ratio``, the separate path of ``cost_intervals``) is an A/A comparison. On a GPU the
  switches act, so a run there has no such pairs (``separate_note`` says so).

``side_by_side`` puts both designs' figures in one table: comparisons, false costs, their share
and the median relative half-width of the intervals.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from detbench.analysis import paired_costs, stats
from detbench.analysis.cost_intervals import replicate_samples
from detbench.analysis.labels import baseline_mode, counted, mode_of, run_device
from detbench.analysis.pairs import is_paired

#: The switches that only cuDNN reads: inert on a CPU.
CUDNN_SWITCHES = frozenset({"benchmark", "cudnn_deterministic", "cudnn_enabled"})
#: The copy of the baseline's A/A worker in ``paired.jsonl``.
AA_COPY = 1
#: The columns of ``paired`` and ``separate``.
COLUMNS = (
    "design",
    "suite",
    "workload",
    "mode",
    "relative_throughput",
    "ci_low",
    "ci_high",
    "false_cost",
    "half_width",
    "replicates",
    "rounds",
    "limited_by",
    "rests_on",
)


def paired(
    lines: pd.DataFrame, baseline: str | None = None, seed: int = stats.SEED
) -> pd.DataFrame:
    """Per workload of the ``paired.jsonl`` rows ``lines`` (``store.paired.load_paired``): copy
    1 of the baseline against copy 0, the interval of ``paired_costs.ratio``, and whether it
    excludes 1 (``false_cost``). Empty where the run has no copy 1."""
    rows = []
    for suite, workload, p in paired_costs.aa_pairs(lines, baseline):
        name = stats.key(f"{suite}/{workload}", "aa-copy-1", "copy-0")
        r = paired_costs.ratio(p, name, seed)
        if not np.isfinite(r.low):
            continue
        row = paired_costs.row(suite, workload, "copy 1", p, r)
        rows.append({**row, "design": "paired", "false_cost": r.significant})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def twins(df: pd.DataFrame, baseline: str) -> list[str]:
    """The modes of ``df`` that differ from ``baseline`` only in cuDNN switches: the same
    computation on a CPU. Empty on another device, or when the run does not say it ran on a
    CPU."""
    if run_device(df) != "cpu":
        return []
    base = mode_of(baseline)
    if base is None:
        return []
    out = []
    for label in dict.fromkeys(map(str, df["mode"])):
        m = mode_of(label)
        if m is None or label == baseline:
            continue
        differ = set(m.changes()) ^ set(base.changes())
        if differ and differ <= CUDNN_SWITCHES and m.settings == base.settings:
            out.append(label)
    return out


def separate(df: pd.DataFrame, baseline: str | None = None, seed: int = stats.SEED) -> pd.DataFrame:
    """Per (workload, twin mode) of the records ``df`` (``load_results``): the twin's cost from
    the records' own timing (``stats.ratio``, as ``cost_intervals`` computes a separate cost),
    and whether its interval excludes 1. Only records timed in their own worker count (not the
    paired rows a run of the paired design joined). Empty off a CPU."""
    baseline = str(baseline_mode(df["mode"]) if baseline is None else baseline)
    modes = twins(df, baseline)
    own = own_timings(df)
    rows: list[dict[str, Any]] = []
    for (suite, workload), g in counted(own).groupby(["suite", "workload"], sort=False):
        base = replicate_samples(g[g["mode"] == baseline])
        if not base:
            continue
        for mode in modes:
            reps = replicate_samples(g[g["mode"] == mode])
            if not reps:
                continue
            name = stats.comparison_key(suite, workload, mode, baseline)
            r = stats.ratio(reps, base, name, seed)
            rows.append(
                {
                    "design": "separate",
                    "suite": suite,
                    "workload": workload,
                    "mode": mode,
                    **paired_costs.interval_fields(r),
                    "false_cost": r.significant,
                    "replicates": min(len(reps), len(base)),
                    "rounds": None,
                    "limited_by": None,
                    "rests_on": None,
                }
            )
    return pd.DataFrame(rows, columns=list(COLUMNS))


def summary(aa: pd.DataFrame) -> dict[str, Any]:
    """comparisons, false_costs, false_share (NaN for none) and median_half_width of an A/A
    table (``paired`` or ``separate``); ``workloads`` and ``false_workloads``: workloads, and
    those with at least one false cost; ``says_nothing``: the comparisons whose interval is too
    wide to say anything (``stats.says_nothing``: it holds both half and twice the speed, so it
    holds 1 and could not have shown a cost, false or not)."""
    n = len(aa)
    false = int(aa["false_cost"].sum()) if n else 0
    by_workload = aa.groupby(["suite", "workload"], sort=False)["false_cost"].any() if n else None
    wide = sum(
        stats.says_nothing(lo, hi) for lo, hi in zip(aa["ci_low"], aa["ci_high"], strict=True)
    )
    return {
        "comparisons": n,
        "false_costs": false,
        "false_share": false / n if n else math.nan,
        "median_half_width": float(np.median(aa["half_width"].astype(float))) if n else math.nan,
        "workloads": 0 if by_workload is None else len(by_workload),
        "false_workloads": 0 if by_workload is None else int(by_workload.sum()),
        "says_nothing": int(wide),
    }


def own_timings(df: pd.DataFrame) -> pd.DataFrame:
    """The records ``df`` (``load_results``) that were timed in their own worker, with a timing:
    a run of the separate design's (an earlier detbench's default), not the rows a paired run
    joined with its rounds."""
    if "timing" not in df.columns:
        return df.iloc[0:0]
    timed = df["timing"].map(lambda t: isinstance(t, Mapping) and bool(t) and not is_paired(t))
    return df[timed]


def separate_note(df: pd.DataFrame) -> str | None:
    """Why the separate design has no A/A comparison in this run (None where it has some)."""
    device = run_device(df)
    if device == "cuda":
        return (
            "on a GPU the cuDNN switches act, so no two modes of the matrix are the same "
            "computation"
        )
    baseline = str(baseline_mode(df["mode"]))
    if device == "cpu" and not twins(df, baseline):
        return f"no mode of this run differs from {baseline} only in cuDNN switches"
    if device != "cpu":
        return "the records do not say they ran on one CPU device"
    return None


def side_by_side(
    df: pd.DataFrame, lines: pd.DataFrame, baseline: str | None = None, seed: int = stats.SEED
) -> pd.DataFrame:
    """Both designs' A/A figures, one row each (``summary``'s columns, ``design`` and ``note``):
    the paired design from ``lines`` (``paired.jsonl``), the separate one from the records
    ``df``. A design with no comparison keeps its row, with 0 comparisons and why."""
    rows = []
    p = paired(lines, baseline, seed) if len(lines) else pd.DataFrame(columns=list(COLUMNS))
    rows.append(
        {
            "design": "paired",
            **summary(p),
            "note": None if len(p) else "no second worker of the baseline (copy 1) was timed",
        }
    )
    s = separate(df, baseline, seed)
    rows.append({"design": "separate", **summary(s), "note": separate_note(df)})
    return pd.DataFrame(rows)
