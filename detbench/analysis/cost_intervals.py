"""Costs: each mode's throughput relative to the baseline, per workload, with a 95% interval and
whether its timing was noisy. From the pairs where the two were timed side by side
(``paired_costs``), else ``stats.ratio`` of the records' own samples (``earlier_design``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from detbench.analysis import earlier_design, paired_costs, stats
from detbench.analysis.labels import baseline_mode, counted
from detbench.analysis.pairs import is_paired, pair, side_from_records
from detbench.store.schema import Status

#: A replicate is noisy when the IQR of its timing samples exceeds this fraction of their median.
NOISY_IQR = 0.10


def replicate_samples(g: pd.DataFrame) -> list[np.ndarray]:
    """Seconds-per-step samples of each successful replicate that counts (one array per record;
    a paired record's are its copy-0 worker's, one per round)."""
    g = counted(g)
    ok = g[g["status"] == Status.OK]
    return [np.asarray(s, dtype=float) for s in ok["timing_samples"] if s]


def costs(
    df: pd.DataFrame,
    baseline: str | None = None,
    n_boot: int = stats.N_BOOT,
    seed: int = stats.SEED,
) -> pd.DataFrame:
    """Each mode's throughput relative to ``baseline`` per workload (``ratio``); ``noisy``: the
    mode or the baseline has a replicate whose IQR exceeds ``NOISY_IQR`` of its median."""
    baseline = baseline_mode(df["mode"]) if baseline is None else baseline
    rows: list[dict[str, Any]] = []
    for (suite, workload), g in df.groupby(["suite", "workload"], sort=False):
        base = g[g["mode"] == baseline]
        if not replicate_samples(base):
            continue
        base_noisy = _noisy(base)
        for mode, m in g.groupby("mode", sort=False):
            if not replicate_samples(m):
                continue
            name = stats.comparison_key(suite, workload, mode, baseline)
            r = ratio(m, base, name, seed, n_boot)
            noisy = base_noisy or _noisy(m)
            if paired(m, base):
                p = pair(side_from_records(base), side_from_records(m))
                rows.append(paired_costs.row(suite, workload, mode, p, r, noisy))
                continue
            reps = len(replicate_samples(m))
            rows.append(earlier_design.row(suite, workload, mode, r, noisy, reps))
    return pd.DataFrame(rows, columns=list(COLUMNS))


#: The columns of ``costs``, in this order.
COLUMNS = (
    "suite",
    "workload",
    "mode",
    "relative_throughput",
    "ci_low",
    "ci_high",
    "significant",
    "noisy",
    "replicates",
    "rounds",
    "design",
    "half_width",
    "limited_by",
    "rests_on",
)


def on_one_replicate(c: pd.DataFrame) -> pd.Series:
    """The rows of ``costs`` ``c`` whose paired interval rests on one process."""
    if c.empty or "design" not in c.columns:
        return pd.Series(False, index=c.index, dtype=bool)
    reps = pd.to_numeric(c["replicates"], errors="coerce")
    return (c["design"] == paired_costs.DESIGN) & (reps == 1)


def paired(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Both groups of records were timed in the paired design and share a round."""
    if "timing" not in a.columns or "timing" not in b.columns:
        return False
    ta, tb = counted(a)["timing"], counted(b)["timing"]
    if not (ta.map(is_paired).any() and tb.map(is_paired).any()):
        return False
    return pair(side_from_records(b), side_from_records(a)).rounds > 0


def ratio(
    a: pd.DataFrame,
    b: pd.DataFrame,
    name: str,
    seed: int = stats.SEED,
    n_boot: int = stats.N_BOOT,
) -> stats.Ratio:
    """The throughput of records ``a`` over records ``b`` (one workload, two modes): the one
    call for every interval of one workload, so every table states the same numbers."""
    if paired(a, b):
        p = pair(side_from_records(b), side_from_records(a))
        return paired_costs.ratio(p, name, seed, n_boot)
    return stats.ratio(replicate_samples(a), replicate_samples(b), name, seed, n_boot)


def _noisy(g: pd.DataFrame) -> bool:
    g = counted(g)
    ok = g[g["status"] == Status.OK]
    rel = pd.to_numeric(ok["iqr"], errors="coerce") / pd.to_numeric(
        ok["seconds_per_step"], errors="coerce"
    )
    return bool((rel > NOISY_IQR).any())
