"""Costs from pairs: each mode's throughput relative to the baseline, from the rounds in which the
two were timed side by side, with a 95% interval that counts both levels of variance.

A round's ratio is ``l[p, r] = log(t_base[p, r] / t_mode[p, r])`` (``pairs.pair``).

**The estimate** (``kalibera_jones``): the median of ``l`` in each process, then a t-interval on
those ``P`` figures with ``P - 1`` degrees of freedom (Kalibera & Jones, ISMM 2013, who use the
mean). The median, because a round the scheduler preempts is an outlier that moves a mean; a
t-interval, because a bootstrap over 2-3 processes has no small-sample correction and is too
narrow where the variance sits between processes (docs/measured.md).

**One process: a process floor.** The between-process level cannot be estimated, yet each
worker keeps an offset for its life. It is taken as ``PROCESS_FLOOR`` = k rounds' robust spreads
``s`` (MAD-based: the GPU's rounds have heavy tails): ``exp(median(l) +- t_{n-1} * s *
sqrt(k^2 + pi / (2n)))``, joined with the distribution-free interval of the median, so never
narrower than the rounds' own.

Draws (for ``stats.geometric_mean``) are ``point * exp(se * T)``, ``T ~ t_{df}``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from detbench.analysis import stats
from detbench.analysis.labels import baseline_mode
from detbench.analysis.pairs import Paired, pair, side_from_lines
from detbench.analysis.variance import split
from detbench.worker.ranks import median_ci

#: The interval's confidence (that of every interval detbench states).
CONFIDENCE = stats.CONFIDENCE
#: The largest |log| of a draw's factor (exp(700) is about 1e304, within a float's range).
LOG_RANGE = 700.0
#: The design a cost came from, in ``cost_intervals.costs``' ``design`` column.
DESIGN = "paired"
#: The process level a one-process interval assumes, in rounds' robust spreads: fixed from the
#: two-replicate costs of a GPU run, not fitted to the A/A checks (docs/measured.md).
PROCESS_FLOOR = 1.0
#: What turns a MAD into a normal law's standard deviation: ``robust_spread``'s scale.
MAD_SD = 1.4826


def _t_interval(center: float, se: float, dof: int) -> tuple[float, float, float]:
    q = float(sps.t.ppf((1 + CONFIDENCE) / 2, dof))
    return math.exp(center), math.exp(center - q * se), math.exp(center + q * se)


def process_points(p: Paired) -> dict[int, float]:
    """Each process's figure on the ratio scale, by replicate: ``exp(median(l))``."""
    return {
        int(rep): math.exp(float(np.median(np.asarray(x, dtype=float))))
        for rep, x in zip(p.replicates, p.log_ratio, strict=True)
        if len(x)
    }


def robust_spread(x: np.ndarray) -> float:
    """The MAD of ``x`` about its median, scaled to a normal law's standard deviation."""
    x = np.asarray(x, dtype=float)
    return MAD_SD * float(np.median(np.abs(x - np.median(x)))) if len(x) else math.nan


def kalibera_jones(
    p: Paired, floor: float | None = PROCESS_FLOOR
) -> tuple[float, float, float, float, int]:
    """(point, low, high, se of the log, degrees of freedom) of the ratio (module docstring;
    ``floor`` None: no process floor). NaNs for one process with fewer than 6 rounds."""
    logs = [np.asarray(x, dtype=float) for x in p.log_ratio if len(x)]
    if len(logs) >= 2:
        m = np.asarray([np.median(x) for x in logs])
        se, dof = float(np.std(m, ddof=1)) / math.sqrt(len(m)), len(m) - 1
        return (*_t_interval(float(m.mean()), se, dof), se, dof)
    ci = median_ci(list(logs[0])) if logs else None
    if ci is not None:
        # One process: the distribution-free interval, with an se that gives it back for draws.
        x, (low, high) = logs[0], ci
        se = (high - low) / (2 * float(sps.norm.ppf((1 + CONFIDENCE) / 2)))
        center, dof = float(np.median(x)), len(x) - 1
        if floor is not None:
            s = robust_spread(x)
            se_floor = s * math.sqrt(floor * floor + math.pi / (2 * len(x)))
            _, f_low, f_high = _t_interval(center, se_floor, dof)
            low, high = min(low, math.log(f_low)), max(high, math.log(f_high))
            se = max(se, se_floor)
        return math.exp(center), math.exp(low), math.exp(high), se, dof
    return math.nan, math.nan, math.nan, math.nan, 0


def rests_on(processes: int, rounds: int, floor: float = PROCESS_FLOOR) -> str:
    """What the interval of ``kalibera_jones`` rests on, in words."""
    if processes >= 2:
        return (
            f"{processes} replicates, {rounds} rounds: the process level measured "
            f"(t, {processes - 1} degree{'s' if processes > 2 else ''} of freedom)"
        )
    spread = "one round's spread" if floor == 1 else f"{floor:g} rounds' spreads"
    return (
        f"1 replicate, {rounds} rounds: the process level assumed at {spread} "
        f"(k = {floor:g}), not measured"
    )


def ratio(p: Paired, name: str, seed: int = stats.SEED, n_boot: int = stats.N_BOOT) -> stats.Ratio:
    """The ratio of a paired comparison as ``stats.Ratio``, with ``n_boot`` t draws."""
    point, low, high, se, dof = kalibera_jones(p)
    if not np.isfinite(point):
        return stats.Ratio(point, low, high, np.full(n_boot, math.nan))
    t = stats.generator(seed, name).standard_t(max(dof, 1), size=n_boot)
    # With 2 processes T has 1 degree of freedom (a Cauchy): a draw can pass exp's range.
    log = np.clip(se * t, -LOG_RANGE, LOG_RANGE)
    draws = point * np.exp(log) if np.isfinite(se) else np.full(n_boot, point)
    return stats.Ratio(point, low, high, draws)


def half_width(point: float, low: float, high: float) -> float:
    """The interval's relative half-width."""
    return max(point - low, high - point) / point if point > 0 else math.nan


def ratio_fields(
    suite: Any, workload: Any, mode: Any, r: stats.Ratio, noisy: bool
) -> dict[str, Any]:
    """The columns every row of ``cost_intervals.costs`` has, whichever design timed it."""
    return {
        "suite": suite,
        "workload": workload,
        "mode": mode,
        "relative_throughput": r.point,
        "ci_low": r.low,
        "ci_high": r.high,
        "half_width": half_width(r.point, r.low, r.high),
        "significant": r.significant,
        "noisy": noisy,
    }


def row(
    suite: Any, workload: Any, mode: Any, p: Paired, r: stats.Ratio, noisy: bool = False
) -> dict[str, Any]:
    """One row of ``cost_intervals.costs`` for a paired comparison."""
    return {
        **ratio_fields(suite, workload, mode, r, noisy),
        "replicates": p.processes,
        "rounds": p.rounds,
        "design": DESIGN,
        "limited_by": split(p).limited_by,
        "rests_on": rests_on(p.processes, p.rounds),
    }


def aa_pairs(lines: pd.DataFrame, baseline: str | None = None) -> list[tuple[Any, Any, Paired]]:
    """(suite, workload, copy 1 of the baseline against copy 0) of ``paired.jsonl`` rows."""
    if lines.empty:
        return []
    baseline = baseline_mode(lines["mode"]) if baseline is None else baseline
    out = []
    base = lines[lines["mode"] == baseline]
    for (suite, workload), g in base.groupby(["suite", "workload"], sort=False):
        p = pair(side_from_lines(g[g["copy"] == 0]), side_from_lines(g[g["copy"] == 1]))
        if p.rounds:
            out.append((suite, workload, p))
    return out
