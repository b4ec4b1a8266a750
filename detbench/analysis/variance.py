"""Where the variance of a cost sits, so the repetitions at each level are chosen from measurement.

**Levels** (``split``): a one-way random-effects model of the log per-round ratio with a common
within-process trend. **time**: the variance of the trend fitted on the pairs' start times,
pooled over processes; **rounds**: what is left within a process; **processes**: the variance of
the process means less the share the within-process variance ``s_w^2`` puts into each,
``max(0, var(m_p) - s_w^2 / n)`` (Kalibera & Jones's ``T_2^2``). ``limited_by`` names the largest
term of ``processes + (rounds + time) / n``.

**Repetitions** (Kalibera & Jones, ISMM 2013, section 4): the rounds per process that make the
interval narrowest for the time spent, ``ceil(sqrt(c_process / c_round * s_w^2 / processes))``,
then the processes that bring the t-interval within the target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from detbench.analysis.pairs import Paired

#: The levels a cost's interval can be limited by.
LEVELS = ("rounds", "processes", "time")


@dataclass(frozen=True)
class Split:
    """The variance of the log per-round ratio at each level, the mean rounds per process and
    the processes it came from; NaN where a level cannot be estimated."""

    rounds: float
    processes: float
    time: float
    per_process: float
    n_processes: int

    @property
    def within(self) -> float:
        """The within-process variance (rounds and time together): ``s_w^2``."""
        return self.rounds + self.time

    def contributions(self) -> dict[str, float]:
        """Each level's term in the variance of a process mean, which the interval follows."""
        n = max(self.per_process, 1.0)
        return {"rounds": self.rounds / n, "processes": self.processes, "time": self.time / n}

    @property
    def limited_by(self) -> str:
        """The level with the largest term; "processes" with one process (it cannot count it)."""
        if self.n_processes < 2 or not np.isfinite(self.processes):
            return "processes"
        c = {k: (v if np.isfinite(v) else 0.0) for k, v in self.contributions().items()}
        return max(LEVELS, key=lambda k: c[k])


def split(p: Paired) -> Split:
    """The variance split of one comparison's log ratios (module docstring)."""
    logs = [np.asarray(x, dtype=float) for x in p.log_ratio]
    times = [np.asarray(x, dtype=float) for x in p.start]
    n_total, n_proc = sum(len(x) for x in logs), len(logs)
    if n_proc == 0:
        return Split(math.nan, math.nan, math.nan, 0.0, 0)
    lc = np.concatenate([x - x.mean() for x in logs])
    tc = np.concatenate([t - t.mean() for t in times])
    sxx = float(np.sum(tc * tc))
    slope = float(np.sum(tc * lc)) / sxx if sxx > 0 else 0.0
    fitted = slope * tc
    dof = n_total - n_proc
    time_var = float(np.sum(fitted**2)) / dof if dof > 0 else math.nan
    resid_dof = dof - (1 if sxx > 0 else 0)
    rounds_var = float(np.sum((lc - fitted) ** 2)) / resid_dof if resid_dof > 0 else math.nan
    per_process = n_total / n_proc
    if n_proc >= 2:
        means = np.asarray([x.mean() for x in logs])
        within = float(np.sum(lc**2)) / dof if dof > 0 else 0.0
        proc_var = max(0.0, float(np.var(means, ddof=1)) - within / per_process)
    else:
        proc_var = math.nan
    return Split(rounds_var, proc_var, time_var, per_process, n_proc)


@dataclass(frozen=True)
class Repetitions:
    """Rounds per process, processes for the target, and the resulting relative half-width."""

    rounds: int
    processes: int
    half_width: float
    target: float


def repetitions(
    s: Split,
    c_round: float,
    c_process: float,
    target: float = 0.01,
    max_rounds: int = 1000,
    max_processes: int = 100,
) -> Repetitions | None:
    """The ``Repetitions`` that reach ``target`` for the least time; None with one process."""
    if s.n_processes < 2 or not np.isfinite(s.processes) or not np.isfinite(s.within):
        return None
    if s.processes > 0:
        r = math.ceil(math.sqrt(c_process / c_round * s.within / s.processes))
    else:  # a process adds nothing the rounds do not: as many rounds as the run allows
        r = max_rounds
    r = int(min(max(r, 2), max_rounds))
    var_mean = s.processes + s.within / r
    goal = math.log1p(target)
    half = math.inf
    for n in range(2, max_processes + 1):
        half = float(sps.t.ppf(0.975, n - 1)) * math.sqrt(var_mean / n)
        if half <= goal:
            return Repetitions(r, n, math.expm1(half), target)
    return Repetitions(r, max_processes, math.expm1(half), target)
