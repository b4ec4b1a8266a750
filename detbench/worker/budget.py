"""How long a record samples: the budget, then on towards a ceiling that grows with the step
time, while the samples so far project the target within reach.

The budget (0.1 s quick, 0.3 s full) gave steps of 10-100 ms 6-16 samples: on the H200 only 44%
of the records with 5-100 ms steps reached +-1%, on the H100 50%. So on a GPU a record whose
interval is still wider than the target when the budget is spent samples on:

* up to its **ceiling**, ``sampling_ceiling``: ``SAMPLES_WANTED`` samples' worth of seconds, at
  least the budget and at most ``CEILING_FACTOR`` times it (3 s at the full profile's 0.3 s);
* and only while the target is **in reach**, ``in_reach``: a median's interval narrows as
  1 / sqrt(n), so ``n * (ci_rel / target) ** 2`` samples are projected to reach the target;
  sampling stops, short of the target, once they would take more than ``REACH_SLACK``
  ceilings. A step whose samples scatter by 10% (an RNN launched from a busy host) stops at
  the budget or soon after, rather than spending its whole ceiling in vain.

A record that stops short still says so (``reached_target`` False) with its interval
(``ci_low``, ``ci_high``, ``ci_rel``), and the report shows that interval. A CPU keeps its
budget as the ceiling: its target is +-3% and its matrix is long.

Estimates, not measurements: this rule (the real loop of ``timing._sample``), replayed 40
times on draws from each record's own samples (a smoothed bootstrap) of the H100's and the
H200's core matrices (results/20261126-060355-cuda-full-h100-partial and
results/20261126-040517-cuda-full-h200-partial), brings the share of the records with 5-100 ms
steps that reach +-1% from 44-48% (the budget alone) to 60-67%, for about +50 to +62 s of
sampling over the core matrix (+0.07 s a record). The replay's figures by run, and the other
settings tried, are in docs/measured.md ("Finished studies whose tools were retired").

That is short of the 90% aimed at. On these records the RNN steps scatter by 2-5% (median absolute
deviation; a quarter of them more) from sample to sample, wandering between levels, and a +-1%
interval of such a median takes 300 or more samples (5 s and more a record): with no projection cut
and a 9 s ceiling the replay reaches 81-82% for +860 to +1190 s over the matrix, which the 15-minute
matrix cannot hold. Records timed with no other process on the GPU scatter as much. Whether the
warm-up until steady and a GPU timed alone narrow that scatter waits for the next GPU visit;
``SAMPLES_WANTED``, ``CEILING_FACTOR`` and ``REACH_SLACK`` are the three numbers to move then.
"""

from __future__ import annotations

import math

from detbench.worker.warmup import SAMPLES_PER_BUDGET

#: The fewest samples with a 95 % interval of the median (``timing.MIN_CI_SAMPLES``).
FLOOR = 6

#: Past the budget, unmet, a record samples on for up to this many samples' worth of seconds
#: (steps of 5-100 ms got 6-16 samples in a 0.3 s budget) ...
SAMPLES_WANTED = 300
#: ... at most this many times the budget, on the devices named in ``CEILING_FACTOR``; other
#: devices (a CPU, whose matrix is long and whose target is +-3 %) stop at the budget.
CEILING_FACTOR = {"cuda": 10.0}
#: ... and only while the samples so far project the target within this many ceilings.
REACH_SLACK = 2.0
#: For the estimate (``expected_sampling_seconds``): the share of its budget a record of short
#: steps samples for, and the samples a record of longer steps takes, on average (the replay on
#: the H100 and H200 core matrices: module docstring).
EXPECTED_SHORT_SHARE = 0.4
EXPECTED_SAMPLES = 23


def sampling_ceiling(sample_seconds: float, budget: float, device_type: str | None) -> float:
    """The most seconds a record samples for when its target is not met within ``budget``:
    ``SAMPLES_WANTED`` samples of ``sample_seconds`` each, at least the budget and at most
    ``CEILING_FACTOR[device_type]`` times it (the budget itself on other devices)."""
    factor = CEILING_FACTOR.get(device_type or "", 1.0)
    return min(max(budget, SAMPLES_WANTED * sample_seconds), factor * budget)


def expected_sampling_seconds(
    step_seconds: float, budget: float, device_type: str = "cuda"
) -> float:
    """The seconds a record of ``step_seconds`` per step is expected to spend sampling (warm-up
    not included), for the run's estimate: what the replay of this rule on the recorded samples
    of the H100 and H200 core matrices gave (module docstring).
    A step of up to budget / 50 fills ``EXPECTED_SHORT_SHARE`` of the budget; a longer one gets
    one step a sample and ``EXPECTED_SAMPLES`` samples, within its ceiling, at least the floor's
    6 samples."""
    if step_seconds <= budget / SAMPLES_PER_BUDGET:
        return EXPECTED_SHORT_SHARE * budget
    ceiling = sampling_ceiling(step_seconds, budget, device_type)
    samples = EXPECTED_SAMPLES if device_type in CEILING_FACTOR else budget / step_seconds
    return max(FLOOR * step_seconds, min(ceiling, samples * step_seconds))


def in_reach(rel: float, target_rel: float, n: int, spent: float, ceiling: float) -> bool:
    """Whether an interval of half-width ``rel`` after ``n`` samples and ``spent`` seconds is
    projected to narrow to ``target_rel`` within ``ceiling`` seconds: a median's interval
    narrows as 1 / sqrt(n), so it needs about ``n * (rel / target_rel) ** 2`` samples; allowed
    ``REACH_SLACK`` times the ceiling, since the interval of a few samples is coarse."""
    if not math.isfinite(rel):
        return True
    needed = n * (rel / target_rel) ** 2
    return needed * spent / n <= REACH_SLACK * ceiling
