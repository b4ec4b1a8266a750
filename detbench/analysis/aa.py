"""The A/A check: how often a run reports a cost that is not there.

Where two measured sides are the same computation, the true ratio is 1, so the share of their 95%
intervals that exclude 1 (false costs) measures the run's intervals on the run itself.
``paired``: copy 1 of the baseline's worker against copy 0, through the costs' own estimator.
``twins``: on a CPU, the modes that differ from the baseline only in inert cuDNN switches.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from detbench.analysis import paired_costs, stats
from detbench.analysis.labels import mode_of, run_device
from detbench.analysis.recommend import CUDNN_FLAGS

#: The switches that only cuDNN reads: inert on a CPU.
CUDNN_SWITCHES = frozenset(CUDNN_FLAGS)
#: The columns of ``paired``.
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
    """Per workload of ``paired.jsonl`` rows ``lines``: copy 1 of the baseline against copy 0."""
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
    """The modes of ``df`` that differ from ``baseline`` only in cuDNN switches, on a CPU."""
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


def summary(aa: pd.DataFrame) -> dict[str, Any]:
    """The counts of an A/A table, ``says_nothing``: intervals too wide to show any cost."""
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
