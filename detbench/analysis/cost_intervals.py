"""Costs with confidence intervals: each mode's throughput relative to the baseline, per
workload, with a bootstrap interval, and whether the timing behind it was noisy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from detbench.analysis import stats
from detbench.analysis.labels import baseline_mode, counted
from detbench.store.schema import Status

#: A replicate is noisy when the IQR of its timing samples exceeds this fraction of their median.
NOISY_IQR = 0.10


def replicate_samples(g: pd.DataFrame) -> list[np.ndarray]:
    """Seconds-per-step samples of each successful replicate (one array per record) that counts
    (not one whose workload changed a setting, see ``counted``)."""
    g = counted(g)
    ok = g[g["status"] == Status.OK]
    return [np.asarray(s, dtype=float) for s in ok["timing_samples"] if s]


def costs(
    df: pd.DataFrame,
    baseline: str | None = None,
    n_boot: int = stats.N_BOOT,
    seed: int = stats.SEED,
) -> pd.DataFrame:
    """Each mode's throughput relative to ``baseline``, per workload, with a 95% interval.

    ``stats.ratio`` of the mode against the baseline: the point estimate is the ratio of the
    medians over replicates of each replicate's median throughput (as in the summary table), the
    interval the 2.5th-97.5th percentile of the same ratio over ``n_boot`` two-level bootstrap
    resamples (replicates, then samples within each replicate) drawn independently for the mode
    and the baseline, from a generator seeded with ``seed`` and the comparison's name
    (``stats.comparison_key``): a report is reproducible, and an interval does not depend on
    what else the records hold. ``significant`` is False when the interval contains 1. ``noisy``
    flags a mode or baseline with any replicate whose IQR exceeds ``NOISY_IQR`` of its median.
    ``baseline``: ``baseline_mode`` of the run when None.
    """
    baseline = baseline_mode(df["mode"]) if baseline is None else baseline
    rows: list[dict[str, Any]] = []
    for (suite, workload), g in df.groupby(["suite", "workload"], sort=False):
        base = g[g["mode"] == baseline]
        base_reps = replicate_samples(base)
        if not base_reps:
            continue
        base_noisy = _noisy(base)
        for mode, m in g.groupby("mode", sort=False):
            reps = replicate_samples(m)
            if not reps:
                continue
            name = stats.comparison_key(suite, workload, mode, baseline)
            r = stats.ratio(reps, base_reps, name, seed, n_boot)
            rows.append(
                {
                    "suite": suite,
                    "workload": workload,
                    "mode": mode,
                    "relative_throughput": r.point,
                    "ci_low": r.low,
                    "ci_high": r.high,
                    "significant": r.significant,
                    "noisy": base_noisy or _noisy(m),
                    "replicates": len(reps),
                }
            )
    return pd.DataFrame(rows)


def _noisy(g: pd.DataFrame) -> bool:
    g = counted(g)
    ok = g[g["status"] == Status.OK]
    rel = pd.to_numeric(ok["iqr"], errors="coerce") / pd.to_numeric(
        ok["seconds_per_step"], errors="coerce"
    )
    return bool((rel > NOISY_IQR).any())
