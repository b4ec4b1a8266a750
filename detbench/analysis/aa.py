"""The A/A check: how often a run reports a cost that is not there.

An interval that claims 95% must contain the true ratio 95% of the time. Where two measured sides
are the same computation under the same settings, the true ratio is 1, so the share of their
intervals that exclude 1 (false costs) is what the run's intervals are worth, measured on the
run itself.

``paired``: the run times a second worker of the baseline's settings (copy 1 of
``paired.jsonl``) beside every other; copy 1 against copy 0, per workload, through the very
estimator of the costs (``paired_costs.ratio``). ``twins``: on a CPU, the modes that differ from
the baseline only in cuDNN switches, which act on nothing there: more A/A comparisons
(``tools/aa_check.py``).
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


def summary(aa: pd.DataFrame) -> dict[str, Any]:
    """comparisons, false_costs, false_share (NaN for none) and median_half_width of an A/A
    table (``paired``); ``workloads`` and ``false_workloads``: workloads, and
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
