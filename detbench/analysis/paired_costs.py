"""Costs from pairs: each mode's throughput relative to the baseline, from the rounds in which the
two were timed side by side, with a 95% interval that counts both levels of variance.

**The ratio of a round.** For replicate ``p`` and round ``r`` where the mode and the baseline's
copy 0 both have a block (``pairs.pair``): ``l[p, r] = log(t_base[p, r] / t_mode[p, r])``, the
log of the mode's throughput relative to the baseline's.

**The estimate and its interval** (``kalibera_jones``): the median of ``l`` in each process,
then a t-interval on those ``P`` process figures with ``P - 1`` degrees of freedom, back on the
ratio scale: ``exp(mean(m) +- t_{P-1} * sd(m) / sqrt(P))`` (Kalibera & Jones, "Rigorous
Benchmarking in Reasonable Time", ISMM 2013, who use the mean). The rounds' spread enters
through each process's figure, the processes' through the spread of the figures. The median,
not the mean: on a CPU a block the scheduler preempts is an outlier round (a ratio of 3 or 1/3),
which moves a mean of 20 rounds and hardly a median. A t-interval, not a bootstrap: over the 2-3
processes of a run a bootstrap draws from 3 values with no small-sample correction, too narrow
where the variance sits between processes; the t quantile pays for knowing that variance from 3
values. The A/A figures that chose this estimator are in docs/measured.md.

**One process: a process floor.** With one process the between-process level cannot be
estimated, yet each worker keeps an offset of its own for its life. It is taken as one round
(``PROCESS_FLOOR`` = k = 1, fixed from the two-replicate costs of a GPU run: docs/measured.md,
"Intervals that hold on the GPU's own rounds"): with the n >= 6 log ratios ``l`` of its rounds
and their robust spread ``s = 1.4826 * median(|l - median(l)|)`` (``robust_spread``: the GPU's
launch-bound rounds have tails 2-7 times their MAD), the interval is
``exp(median(l) +- t_{n-1} * s * sqrt(k^2 + pi / (2n)))`` (the process level plus the variance
of a median of n rounds), joined with the distribution-free interval of the median
(``worker.ranks.median_ci``), so never narrower than the rounds' own. ``limited_by`` then says
"processes" and ``rests_on`` that the level is assumed. Two or more processes: no floor.

Draws (for ``stats.geometric_mean`` over a suite's workloads) are ``point * exp(se * T)``,
``T ~ t_{df}``, from ``stats.generator(seed, name)``: the one seeding rule.
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
#: The process level a one-process interval assumes, in rounds' robust spreads (k; module
#: docstring): fixed, from the two-replicate costs of a GPU run, not fitted to the A/A checks.
PROCESS_FLOOR = 1.0
#: What turns a MAD into a normal law's standard deviation: ``robust_spread``'s scale.
MAD_SD = 1.4826


def _t_interval(center: float, se: float, dof: int) -> tuple[float, float, float]:
    q = float(sps.t.ppf((1 + CONFIDENCE) / 2, dof))
    return math.exp(center), math.exp(center - q * se), math.exp(center + q * se)


def process_points(p: Paired) -> dict[int, float]:
    """Each process's figure on the ratio scale, by replicate: ``exp(median(l))`` of its log
    per-round ratios. ``kalibera_jones``' point is their geometric mean (with one process, the
    figure itself): what a replicate contributes to the cost."""
    return {
        int(rep): math.exp(float(np.median(np.asarray(x, dtype=float))))
        for rep, x in zip(p.replicates, p.log_ratio, strict=True)
        if len(x)
    }


def robust_spread(x: np.ndarray) -> float:
    """The robust spread of log ratios (or log samples): their MAD about the median, scaled to
    a normal law's standard deviation (``MAD_SD``)."""
    x = np.asarray(x, dtype=float)
    return MAD_SD * float(np.median(np.abs(x - np.median(x)))) if len(x) else math.nan


def kalibera_jones(
    p: Paired, floor: float | None = PROCESS_FLOOR
) -> tuple[float, float, float, float, int]:
    """(point, low, high, se of the log estimate, degrees of freedom) of the ratio: a t-interval
    on the per-process median of the log ratios (module docstring); one process: the
    interval of its rounds' median joined with the process floor of ``floor`` rounds' spreads
    (None: the rounds' interval alone). NaNs where there is nothing to estimate (one
    process with fewer than 6 rounds)."""
    logs = [np.asarray(x, dtype=float) for x in p.log_ratio if len(x)]
    if len(logs) >= 2:
        m = np.asarray([np.median(x) for x in logs])
        se, dof = float(np.std(m, ddof=1)) / math.sqrt(len(m)), len(m) - 1
        return (*_t_interval(float(m.mean()), se, dof), se, dof)
    ci = median_ci(list(logs[0])) if logs else None
    if ci is not None:
        # One process: the distribution-free 95% interval of its median log ratio (the rule of
        # a record's own timing), with an se that gives it back for the draws.
        x, (low, high) = logs[0], ci
        se = (high - low) / (2 * float(sps.norm.ppf((1 + CONFIDENCE) / 2)))
        center, dof = float(np.median(x)), len(x) - 1
        if floor is not None:  # joined with the process floor (module docstring)
            s = robust_spread(x)
            se_floor = s * math.sqrt(floor * floor + math.pi / (2 * len(x)))
            _, f_low, f_high = _t_interval(center, se_floor, dof)
            low, high = min(low, math.log(f_low)), max(high, math.log(f_high))
            se = max(se, se_floor)
        return math.exp(center), math.exp(low), math.exp(high), se, dof
    nan = math.nan
    return nan, nan, nan, nan, 0


def rests_on(processes: int, rounds: int, floor: float = PROCESS_FLOOR) -> str:
    """What the interval of ``kalibera_jones`` rests on, in words: with one process, its rounds
    and an assumed process level (``floor``); with more, the process level measured."""
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
    """The ratio of a paired comparison as ``stats.Ratio``: ``kalibera_jones``'s point and
    interval, and ``n_boot`` draws of its t-distribution (module docstring) for the geometric
    means over workloads."""
    point, low, high, se, dof = kalibera_jones(p)
    if not np.isfinite(point):
        return stats.Ratio(point, low, high, np.full(n_boot, math.nan))
    t = stats.generator(seed, name).standard_t(max(dof, 1), size=n_boot)
    # With 2 processes T has 1 degree of freedom (a Cauchy): a draw can pass exp's range.
    log = np.clip(se * t, -LOG_RANGE, LOG_RANGE)
    draws = point * np.exp(log) if np.isfinite(se) else np.full(n_boot, point)
    return stats.Ratio(point, low, high, draws)


def half_width(point: float, low: float, high: float) -> float:
    """max(point - low, high - point) / point: the interval's relative half-width."""
    return max(point - low, high - point) / point if point > 0 else math.nan


def ratio_fields(
    suite: Any, workload: Any, mode: Any, r: stats.Ratio, noisy: bool
) -> dict[str, Any]:
    """The columns every row of ``cost_intervals.costs`` has, whichever design timed it: which
    cost it is, its ratio's point, 95% interval, half-width and significance, and whether its
    timings were noisy."""
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
    """One row of ``costs``: ``cost_intervals.costs``' columns with ``rounds``, ``design``,
    ``half_width``, ``limited_by`` (``variance.Split.limited_by``) and ``rests_on``
    (``rests_on``: what the interval rests on, in words)."""
    return {
        **ratio_fields(suite, workload, mode, r, noisy),
        "replicates": p.processes,
        "rounds": p.rounds,
        "design": DESIGN,
        "limited_by": split(p).limited_by,
        "rests_on": rests_on(p.processes, p.rounds),
    }


def aa_pairs(lines: pd.DataFrame, baseline: str | None = None) -> list[tuple[Any, Any, Paired]]:
    """(suite, workload, Paired) of copy 1 of the baseline against copy 0, per workload of the
    ``paired.jsonl`` rows ``lines`` (``store.paired.load_paired``): the A/A comparisons."""
    if lines.empty:
        return []
    baseline = baseline_mode(lines["mode"]) if baseline is None else baseline
    out = []
    for (suite, workload), g in lines[lines["mode"] == baseline].groupby(
        ["suite", "workload"], sort=False
    ):
        a = side_from_lines(g[g["copy"] == 0])
        b = side_from_lines(g[g["copy"] == 1])
        p = pair(a, b)
        if p.rounds:
            out.append((suite, workload, p))
    return out
