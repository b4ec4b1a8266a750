"""A record's timing samples and their summary (``Timing``), as the paired phase takes them
(``worker.paired``) and ``detbench exec`` keeps its runs' times (``run.execdoc``).

A sample is one block of ``number_per_block`` steps, in seconds per step: a step can be far
shorter than a clock read or a CUDA event pair resolves cheaply. The interval of the median is
distribution-free (``worker.ranks``: step times are skewed).
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

#: The fewest samples with a 95 % interval of the median (at 5 even [min, max] covers 93.75 %).
MIN_CI_SAMPLES = 6


@dataclass(frozen=True)
class Timing:
    """Raw samples (seconds per step) and their summary: the median's 95 % interval and more."""

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
        name it), and ``ceiling`` and ``hold`` None (fields of records of the earlier separate
        design, which ``report`` still reads)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out.update(samples=list(self.samples), min_run_time=self.budget, ceiling=None, hold=None)
        out["warmup"] = None if self.warmup is None else self.warmup.to_json()
        return out


def quantile(sorted_samples: tuple[float, ...] | list[float], q: float) -> float:
    """``torch.quantile(x, q)`` on sorted floats, with torch's lerp: ``Measurement``'s bits."""
    n = len(sorted_samples)
    pos = q * (n - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    w = pos - lo
    a, b = sorted_samples[lo], sorted_samples[hi]
    return a + w * (b - a) if w < 0.5 else b - (b - a) * (1.0 - w)


def summarise(samples: tuple[float, ...] | list[float]) -> tuple[float, float]:
    """(median, IQR) as ``torch.utils.benchmark.Measurement`` computes them."""
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
    """The ``Timing`` fields computed from its samples."""
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
