"""Warm-up until steady: a fixed count of steps is too few where the GPU's clock is still ramping
up. One step alone, timed, sets the block size (``block_size``); then groups of ``GROUP`` samples
run until a group's median is as close to the one before as ``tolerance`` (``SETTLE_SHARE`` of
the target half-width) or the groups' scatter allows: **settled**. The scatter is half the range
of the narrower group: a step that jumps 10% from sample to sample (an RNN) has stopped moving
when its medians differ by less, while a ramp moves each median by more than a group's
half-range. At least ``min_steps`` steps, unless the ceiling (``CEILING_SHARE`` of the budget)
comes first; a step time that never settles is timed all the same (``settled: false``).
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
#: A block of one step at least this long takes no untimed step (``turn_steps``). The untimed
#: step absorbs a turn's cold start (caches, TLBs, sleeping threads, the launch queue after
#: another worker's turn); past 0.1 s that is a fraction of a percent of the step, and the
#: untimed step would double the turn of the slowest (measured, docs/measured.md).
LONG_STEP_SECONDS = 0.1


def turn_steps(step_seconds: float, number: int) -> int:
    """The untimed steps before a paired block of ``number`` steps of ``step_seconds``."""
    return 0 if number == 1 and step_seconds >= LONG_STEP_SECONDS else TURN_STEPS


def block_size(step_seconds: float, budget: float) -> int:
    """Steps per sample: about budget / SAMPLES_PER_BUDGET seconds of steps, at least one."""
    return block_steps(step_seconds, budget / SAMPLES_PER_BUDGET)


@dataclass(frozen=True)
class Warmup:
    """What a warm-up did, and the block size it leaves for the samples."""

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
    # A step that fills a sample on its own is also the first group's first sample.
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
        if better >= 2 * number:  # the first step was far slower: size the block again
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
