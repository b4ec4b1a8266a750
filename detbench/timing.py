"""Timing of a warmed-up step, synchronised with the device, keeping the raw samples.

This is ``torch.utils.benchmark.Timer.blocked_autorange`` with two choices made explicit:

* The clock synchronises the GPU before reading the time, so GPU work queued by ``step`` is
  inside the measured interval. A synchronisation costs microseconds, so the timer first
  measures an empty block (the overhead) and grows the block size (steps per sample) by 10x until
  that overhead is at most 1e-4 of a block (or one block alone outlasts ``min_run_time``). The
  sync cost is therefore negligible in every sample.
* It times at ``num_threads=1`` unless told otherwise. A benchmark of the run-to-run behaviour of
  multithreaded kernels must not force one thread, so we pass torch's current thread count.

Warm-up runs before calibration so that one-off costs (cuDNN autotuning under
``cudnn.benchmark``, allocator growth, lazy initialisation) never land in the calibration or in a
sample. The clock is injectable so the logic can be tested with exact numbers and no GPU.
"""

from __future__ import annotations

import timeit
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.benchmark import Timer

Clock = Callable[[], float]


def synchronising_clock() -> float:
    """Wait for all queued GPU work, then read the clock (torch's own ``timer`` does this too,
    through ``torch.accelerator`` in recent releases)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return timeit.default_timer()


@dataclass(frozen=True)
class Timing:
    """Raw samples (seconds per step, one per block of ``number_per_block`` steps) and their
    summary, computed by ``torch.utils.benchmark.Measurement``."""

    samples: tuple[float, ...]
    number_per_block: int
    median: float
    iqr: float
    warmup_steps: int
    min_run_time: float
    num_threads: int

    def to_json(self) -> dict[str, Any]:
        return {
            "samples": list(self.samples),
            "number_per_block": self.number_per_block,
            "median": self.median,
            "iqr": self.iqr,
            "warmup_steps": self.warmup_steps,
            "min_run_time": self.min_run_time,
            "num_threads": self.num_threads,
        }


def time_step(
    step: Callable[[], Any],
    *,
    warmup_steps: int = 3,
    min_run_time: float = 1.0,
    clock: Clock | None = None,
    num_threads: int | None = None,
) -> Timing:
    """Warm up ``step``, then time it in calibrated blocks until ``min_run_time`` seconds of
    samples exist. ``clock`` defaults to torch's synchronising timer."""
    clock = clock or synchronising_clock
    threads = num_threads if num_threads is not None else torch.get_num_threads()
    for _ in range(warmup_steps):
        step()
    timer = Timer(
        stmt="step()",
        globals={"step": step},
        timer=clock,
        num_threads=threads,
    )
    m = timer.blocked_autorange(min_run_time=min_run_time)
    return Timing(
        samples=tuple(m.times),
        number_per_block=int(m.number_per_run),
        median=float(m.median),
        iqr=float(m.iqr),
        warmup_steps=warmup_steps,
        min_run_time=min_run_time,
        num_threads=threads,
    )
