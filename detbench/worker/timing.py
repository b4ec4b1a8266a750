"""A record's timing samples and their summary (``Timing``), as the paired phase takes them
(``detbench.worker.paired``) and ``detbench exec`` keeps its runs' times (``run.execdoc``).

* **A sample is one block of ``number_per_block`` consecutive steps**, and its value is the
  block's time divided by the step count (seconds per step, as ``Measurement.times`` gives).
  Blocks rather than single steps because a step can be far shorter than what the clock can
  resolve cheaply: a perf_counter read costs ~0.1 us and a CUDA event pair a few us of launch.
  The clocks are ``detbench.worker.samplers``'s; the warm-up before the first sample is
  ``detbench.worker.warmup``'s.
* **The 95 % interval of the median** is the pair of order statistics ``(x_(j), x_(n+1-j))``
  with ``j`` the largest rank with ``P(B <= j - 1) <= 0.025`` for ``B ~ Binomial(n, 1/2)``
  (``worker.ranks``): coverage is then >= 95 % whatever the distribution of the samples (no
  normality: step times are skewed, with long right tails). Such an interval exists only from
  n = 6 on (at n = 5 even ``[min, max]`` covers only 93.75 %): ``MIN_CI_SAMPLES``.
  ``reached_target``: its half-width is within ``target_rel`` of the median.
* ``num_threads`` is set while a step is timed and restored (``torch_threads``).

Median and IQR are computed as ``torch.utils.benchmark.Measurement`` computes them (linear
interpolation between order statistics, ``torch.quantile``'s rule), without building a tensor.

``ceiling`` and ``hold`` are written None: only records of the earlier separate design hold
them (``store.schema``), and ``report`` still reads those.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any

import torch

from detbench.worker.ranks import median_ci
from detbench.worker.warmup import Warmup

#: The fewest samples with a 95 % interval of the median (the floor of every record).
MIN_CI_SAMPLES = 6


@dataclass(frozen=True)
class Timing:
    """Raw samples (seconds per step, one per block of ``number_per_block`` steps), their
    summary: the 95 % interval of the median ``[ci_low, ci_high]`` (seconds per step), its
    half-width relative to the median, and whether that is within ``target_rel``."""

    samples: tuple[float, ...]
    number_per_block: int
    median: float
    iqr: float
    warmup_steps: int  # the least the warm-up was asked for; what it ran is ``warmup.steps``
    budget: float
    num_threads: int
    ci_low: float
    ci_high: float
    ci_rel: float
    target_rel: float
    reached_target: bool
    clock: str
    min_samples: int  # the floor applied: max(min_samples asked for, MIN_CI_SAMPLES)
    warmup: Warmup | None = None  # what the warm-up did; None: no warm-up record
    gpu_clocks: dict[str, Any] | None = None  # ``gpuclock.ClockWatch.stop()``
    clock_mode: str | None = None  # "paired", or "exec" (``detbench exec``)
    turn_steps: int | None = None  # paired: the untimed steps before each block

    def to_json(self) -> dict[str, Any]:
        """The record's ``timing``: every field, ``min_run_time`` (the budget, as older readers
        name it), and ``ceiling`` and ``hold`` None (module docstring)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out.update(samples=list(self.samples), min_run_time=self.budget, ceiling=None, hold=None)
        out["warmup"] = None if self.warmup is None else self.warmup.to_json()
        return out


def quantile(sorted_samples: tuple[float, ...] | list[float], q: float) -> float:
    """``torch.quantile(x, q)`` (linear interpolation) on already sorted floats, with torch's
    two-sided lerp so results agree with ``Measurement`` to the last bit."""
    n = len(sorted_samples)
    pos = q * (n - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    w = pos - lo
    a, b = sorted_samples[lo], sorted_samples[hi]
    return a + w * (b - a) if w < 0.5 else b - (b - a) * (1.0 - w)


def summarise(samples: tuple[float, ...] | list[float]) -> tuple[float, float]:
    """(median, IQR) as ``torch.utils.benchmark.Measurement`` gives them."""
    s = sorted(samples)
    return quantile(s, 0.5), quantile(s, 0.75) - quantile(s, 0.25)


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    if n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def summary_of(samples: list[float], target_rel: float) -> dict[str, Any]:
    """The ``Timing`` fields computed from its samples: the samples, their median and IQR, the
    95 % interval of the median and whether it met ``target_rel``."""
    median, iqr = summarise(samples)
    ci = median_ci(samples)
    assert ci is not None  # len(samples) >= MIN_CI_SAMPLES
    half = max(median - ci[0], ci[1] - median)
    rel = half / median if median > 0 else (0.0 if half == 0 else math.inf)
    return {
        "samples": tuple(samples),
        "median": median,
        "iqr": iqr,
        "ci_low": ci[0],
        "ci_high": ci[1],
        "ci_rel": rel,
        "reached_target": rel <= target_rel,
    }
