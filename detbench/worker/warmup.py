"""Warm-up until steady: the steps a timing pass runs before its first sample. A fixed count of
steps is too few where the GPU's clock is still ramping up after the worker's start, so the
warm-up runs until the step time stops moving:

1. One step alone, timed (synchronised on a GPU): what it costs sets the block size, as for the
   samples (``block_size``); lazy set-up, autotuning and allocator growth land in it. Where a
   step fills a sample on its own (one step a sample), it is also the first group's first sample.
2. Then groups of ``GROUP`` samples (each a block of steps, timed as the samples will be), until
   the median of a group is as close to the median of the group before it (two groups of the
   same block size at least) as either ``tolerance`` allows or the groups' own scatter: the
   warm-up has **settled**. ``tolerance`` is ``SETTLE_SHARE`` of the pass's target half-width,
   so what the warm-up leaves moving is small beside the interval the samples will reach. The
   scatter is half the range of the narrower of the two groups: a step whose time jumps by 10%
   from sample to sample (an RNN) has stopped moving when its medians differ by less than that,
   while a ramp moves each median by about three samples' worth of ramp, more than the
   half-range of a group on it, and a group that straddles a sudden change has a narrow
   neighbour.
3. It runs at least ``min_steps`` steps (the profile's ``warmup_steps``), unless its ceiling
   comes first: ``CEILING_SHARE`` of the budget in wall time, after one group at least, settled
   or not. A step time that never settles is timed all the same, and the record says
   ``settled: false``.

If a group's median shows the first step was far slower than the steady ones (a factor of 2 or
more), the block size is taken again from that median, so the samples are not needlessly short.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

#: Samples per group: the median of three ignores one outlier.
GROUP = 3
#: Two successive groups' medians this share of the target half-width apart, or closer: settled.
SETTLE_SHARE = 0.5
#: The warm-up's ceiling in wall time, as a share of the timing budget.
CEILING_SHARE = 1.0
#: A sample lasts about budget / this many seconds.
SAMPLES_PER_BUDGET = 50


class Sampler(Protocol):
    def now(self) -> float: ...

    def one_step(self, step: Callable[[], Any]) -> float: ...

    def samples(self, step: Callable[[], Any], number: int, k: int) -> list[float]: ...


def block_steps(step_seconds: float, block_seconds: float) -> int:
    """Steps in a block of about ``block_seconds``: at least one."""
    if step_seconds <= 0:
        return 1
    return max(1, math.floor(block_seconds / step_seconds))


#: Untimed steps before each block of a paired turn (``worker.paired``): one narrowed the A/A
#: ratios' spread (docs/measured.md).
TURN_STEPS = 1
#: A block of one step at least this long takes no untimed step (``turn_steps``). What the
#: untimed step absorbs is the cold start of a turn (caches, TLBs, sleeping threads, the launch
#: queue after another worker's turn): a cost of its own, not a share of the step. On the 2-core
#: VM (``tools/launch_noise.py``, three workers, docs/measured.md) a one-step block of 14 ms
#: without it had an A/A spread 1.3 times the one with it (the median of six runs), where blocks
#: of one step of 180-350 ms were as steady without it. Past 0.1 s that cost is a fraction of a
#: percent of the step, and the untimed step would double the turn of the GPU's slowest members
#: (native RNN and ResNet-18 steps of 0.3-0.4 s without cuDNN on the H200).
LONG_STEP_SECONDS = 0.1


def turn_steps(step_seconds: float, number: int) -> int:
    """The untimed steps before a paired block of ``number`` steps of ``step_seconds``:
    ``TURN_STEPS``, none where the block is one step of ``LONG_STEP_SECONDS`` or more."""
    return 0 if number == 1 and step_seconds >= LONG_STEP_SECONDS else TURN_STEPS


def block_size(step_seconds: float, budget: float) -> int:
    """Steps per sample: about budget / SAMPLES_PER_BUDGET seconds of steps, at least one."""
    return block_steps(step_seconds, budget / SAMPLES_PER_BUDGET)


@dataclass(frozen=True)
class Warmup:
    """What a warm-up did: its steps and wall time, whether the step time settled, each group's
    median (seconds per step), and the block size it leaves for the samples."""

    steps: int
    seconds: float
    settled: bool
    medians: tuple[float, ...]
    number_per_block: int
    min_steps: int
    ceiling: float
    tolerance: float

    def to_json(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "seconds": self.seconds,
            "settled": self.settled,
            "group_medians": list(self.medians),
            "group_samples": GROUP,
            "min_steps": self.min_steps,
            "ceiling_seconds": self.ceiling,
            "tolerance": self.tolerance,
        }


def warm_up(
    step: Callable[[], Any], sampler: Sampler, min_steps: int, budget: float, target_rel: float
) -> Warmup:
    """Run ``step`` until its time per step settles (see the module docstring)."""
    tolerance = SETTLE_SHARE * target_rel
    ceiling = CEILING_SHARE * budget
    start = sampler.now()
    one = sampler.one_step(step)
    steps = 1
    number = block_size(one, budget)
    medians: list[float] = []
    numbers: list[int] = []
    spreads: list[float] = []  # half the range of each group
    settled = False
    # A step that fills a sample on its own (one step a sample): the first step is the first
    # group's first sample, so a long step's warm-up costs no step more than it must.
    first: list[float] = [one] if number == 1 else []
    while True:
        group = first + sampler.samples(step, number, GROUP - len(first))
        steps += (GROUP - len(first)) * number
        first = []
        m = statistics.median(group)
        medians.append(m)
        numbers.append(number)
        spreads.append((max(group) - min(group)) / 2)
        spent = sampler.now() - start
        if len(medians) >= 2 and numbers[-2] == number and steps >= min_steps:
            before = medians[-2]
            if abs(m - before) <= max(tolerance * before, min(spreads[-2:])):
                settled = True
                break
        if spent >= ceiling:
            break
        better = block_size(m, budget)
        if better >= 2 * number:  # the first step was far slower than the steady ones
            number = better
    return Warmup(
        steps=steps,
        seconds=sampler.now() - start,
        settled=settled,
        medians=tuple(medians),
        number_per_block=block_size(medians[-1], budget),
        min_steps=min_steps,
        ceiling=ceiling,
        tolerance=tolerance,
    )
