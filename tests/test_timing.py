"""A record's timing samples: the warm-up before them (``worker.warmup``), with an injected clock
(exact numbers, no GPU, no wall-clock dependence) and on this CPU's real clock; the interval of
their median, their median and IQR against ``torch.utils.benchmark.Measurement``; the thread
count while a step is timed."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterable

import pytest
import torch
from torch.utils.benchmark.utils.common import Measurement, TaskSpec

from detbench.worker.ranks import median_ci_ranks
from detbench.worker.samplers import ClockSampler, host_clock
from detbench.worker.timing import summarise, summary_of, torch_threads
from detbench.worker.warmup import GROUP, SAMPLES_PER_BUDGET, Warmup, block_size, warm_up


class FakeDevice:
    """A clock and a step sharing one virtual time: each step costs the next of ``costs`` (then
    ``step_cost`` forever) and each read of the clock costs ``sync_cost``. Counts the steps."""

    def __init__(
        self, step_cost: float = 0.0, sync_cost: float = 0.0, costs: Iterable[float] = ()
    ) -> None:
        self.now = 0.0
        self.step_cost = step_cost
        self.sync_cost = sync_cost
        self.costs = iter(costs)
        self.steps = 0
        self.reads = 0

    def clock(self) -> float:
        self.reads += 1
        t = self.now
        self.now += self.sync_cost
        return t

    def step(self) -> list[object]:
        self.steps += 1
        self.now += next(self.costs, self.step_cost)
        return []


def settled(cost: float, groups: int = 2) -> list[float]:
    """The step costs of a warm-up that settles at once: ``groups`` groups of ``GROUP`` equal
    samples of one step each, its first step alone the first one's first (steps of ``cost`` >=
    budget / 50)."""
    return [cost] * (GROUP * groups)


def warmed(dev: FakeDevice, min_steps: int, budget: float, target_rel: float) -> Warmup:
    """``warm_up`` of ``dev``'s step on its own clock, as the paired worker warms a step up."""
    return warm_up(dev.step, ClockSampler(dev.clock, "injected"), min_steps, budget, target_rel)


def test_median_ci_ranks_are_the_binomial_order_statistics() -> None:
    # Hand values: j is the largest rank with P(B <= j-1) <= 0.025, B ~ Binomial(n, 1/2).
    # n=5: P(B=0) = 1/32 > 0.025, so no 95 % interval; n=6: 1/64 <= 0.025 < 7/64.
    # n=9: P(B<=1) = 10/512 <= 0.025 < P(B<=2) = 46/512. n=10: 11/1024 <= 0.025 < 56/1024.
    # n=20 and n=100 are the textbook (6, 15) and (40, 61).
    assert median_ci_ranks(5) is None
    assert median_ci_ranks(6) == (1, 6)
    assert median_ci_ranks(8) == (1, 8)  # P(B<=1) = 9/256 = 0.035
    assert median_ci_ranks(9) == (2, 8)
    assert median_ci_ranks(10) == (2, 9)
    assert median_ci_ranks(20) == (6, 15)
    assert median_ci_ranks(100) == (40, 61)


def test_median_ci_ranks_agree_with_binomial_sums_from_math_comb() -> None:
    # median_ci_ranks (scipy.stats.binom) against the definition, one math.comb per term.
    def by_definition(n: int) -> tuple[int, int] | None:
        j = 0
        for i in range(n // 2 + 1):
            if sum(math.comb(n, r) for r in range(i + 1)) / 2**n > 0.025:
                break
            j = i + 1
        return (j, n + 1 - j) if j else None

    for n in range(1, 301):
        assert median_ci_ranks(n) == by_definition(n), n


def test_ci_bounds_are_the_order_statistics_of_the_samples() -> None:
    # Ten distinct samples in shuffled order: the interval is the 2nd and 9th smallest.
    samples = [0.5 * k for k in (7, 3, 10, 1, 6, 9, 2, 8, 4, 5)]
    t = summary_of(samples, target_rel=1e-9)
    assert (t["ci_low"], t["ci_high"]) == (1.0, 4.5)
    assert t["median"] == 2.75
    assert t["ci_rel"] == (4.5 - 2.75) / 2.75
    assert t["reached_target"] is False
    # Six equal samples: the first count with an interval, and a target met.
    assert summary_of([0.25] * 6, target_rel=0.01)["reached_target"] is True


def test_warmup_runs_until_the_step_time_settles_and_not_before() -> None:
    # Ten slow steps (1 s: autotuning, a clock still ramping up), then 0.25 s steps. The first
    # step sets 2 steps a sample (100 s / 50 = 2 s); each group of 3 samples is 6 steps.
    dev = FakeDevice(costs=[1.0] * 10, step_cost=0.25)
    w = warmed(dev, min_steps=0, budget=100.0, target_rel=0.01)
    # Group medians: steps 2-7 all slow (1.0); steps 8-13 mix (1.0, 0.625, 0.25: 0.625); then
    # 0.25, which shows the first step was 4x too slow: blocks of 8 steps from then on, and two
    # groups of those within 0.5 % (target 1 % x SETTLE_SHARE) settle it, no sooner.
    assert w.medians == (1.0, 0.625, 0.25, 0.25, 0.25) and w.settled
    assert w.steps == 1 + 3 * GROUP * 2 + 2 * GROUP * 8 == 67 == dev.steps
    assert w.seconds == 10 * 1.0 + 57 * 0.25 and w.tolerance == 0.005
    # The blocks it leaves are sized from the settled step.
    assert w.number_per_block == block_size(0.25, 100.0) == 8


def test_warmup_stops_at_its_ceiling_unsettled_and_says_so() -> None:
    # Steps alternating 1 s and 2 s never settle (group medians 1, 2, 1: 1 s apart, more than
    # their scatter of 0.5 s): the warm-up stops at its ceiling, the budget (10 s) of wall time,
    # and the record says it did not settle.
    dev = FakeDevice(costs=[1.0, 2.0] * 50)
    w = warmed(dev, min_steps=0, budget=10.0, target_rel=0.01)
    assert not w.settled
    # Groups (1, 2, 1), (2, 1, 2), (1, 2, 1): 4 s, 9 s, 13 s: past the ceiling.
    assert w.medians == (1.0, 2.0, 1.0) and w.steps == 9 and w.seconds == 13.0
    assert w.to_json() == {
        "steps": 9,
        "seconds": 13.0,
        "settled": False,
        "group_medians": [1.0, 2.0, 1.0],
        "group_samples": 3,
        "min_steps": 0,
        "ceiling_seconds": 10.0,
        "tolerance": 0.005,
    }


def test_a_step_that_scatters_without_moving_settles_within_its_scatter() -> None:
    # One-step samples scattering by +-10-25 % (an RNN's steps): the group medians 1.0 and
    # 1.125 are 12.5 % apart, far over the 0.5 % tolerance, but within the groups' scatter (half
    # their range: 0.1875 s each), so the step time has stopped moving.
    dev = FakeDevice(costs=[1.0, 1.25, 0.875, 1.125, 0.875, 1.25], step_cost=1.0)
    w = warmed(dev, min_steps=0, budget=40.0, target_rel=0.01)
    assert w.settled and w.medians == (1.0, 1.125)
    # A group that straddles a change (1.0, 0.75, 0.5: half-range 0.25) has a narrow neighbour
    # on either side: the narrower decides, and the change is not taken for scatter.
    dev = FakeDevice(costs=[1.0, 1.0, 1.0, 1.0, 0.75], step_cost=0.5)
    w = warmed(dev, min_steps=0, budget=40.0, target_rel=0.01)
    assert w.medians == (1.0, 0.75, 0.5, 0.5) and w.settled


def test_warmup_runs_at_least_its_minimum_of_steps() -> None:
    # A constant 1 s step settles after 2 groups (6 steps), but 10 are asked for: 4 groups.
    dev = FakeDevice(step_cost=1.0)
    w = warmed(dev, min_steps=10, budget=40.0, target_rel=0.01)
    assert (w.steps, w.settled) == (12, True) and dev.steps == 12


def test_block_size_aims_at_a_fiftieth_of_the_budget() -> None:
    cost = 2.0**-10  # ~1 ms
    dev = FakeDevice(step_cost=cost, sync_cost=cost)
    w = warmed(dev, min_steps=0, budget=1.0, target_rel=0.01)
    # The warm-up's first step measured one step plus one clock read: 1.95 ms; 1 s / 50 = 20 ms,
    # so floor(10.24) = 10 steps per sample in its groups, each sample 11 reads' worth / 10.
    assert w.medians == (11 * cost / 10,) * 2
    # The blocks after it come from the warmed step: floor(20 ms / 1.07 ms) = 18 steps.
    assert w.number_per_block == block_size(11 * cost / 10, 1.0) == 18
    assert block_size(1.0, 1.0) == 1  # a step longer than a sample: one step per sample
    assert block_size(0.0, 1.0) == 1
    assert block_size(2.0**-16, 1.0) == 1310 == int(2.0**16 / SAMPLES_PER_BUDGET)


class RampingStep:
    """A real step on this CPU (a small product, then a busy wait) that starts 9x slower and
    speeds up steadily for ``ramp`` seconds from its first call, as a GPU's clock ramps up, then
    stays steady. Counts its calls."""

    def __init__(self, base: float = 100e-6, ramp: float = 0.4) -> None:
        self.a = torch.randn(32, 32)
        self.base, self.ramp = base, ramp
        self.calls = 0
        self.t0 = 0.0

    def __call__(self) -> torch.Tensor:
        now = time.perf_counter()
        self.calls += 1
        if self.calls == 1:
            self.t0 = now
        left = max(0.0, 1.0 - (now - self.t0) / self.ramp)
        out = self.a @ self.a
        end = now + self.base * (1.0 + 8.0 * left)
        while time.perf_counter() < end:
            pass
        return out


@pytest.mark.serial  # wall-clock ramps: not beside other tests' processes
def test_real_steps_that_settle_after_slow_ones_are_warmed_past_them() -> None:
    # The warm-up must outlast the ramp (a fixed count of steps or of groups would stop within
    # 0.15 s) and stop once the step time is steady, before its ceiling. A loose target (20 %:
    # groups within 10 %; the ramp moves a group's median by 20 % or more) keeps the shared
    # machine's noise from deciding. Its 2 cores are shared: a burst of load can keep the
    # warm-up from settling before its ceiling, or look like a step that settled: the best of 5
    # attempts (a warm-up that stops at a fixed count fails all five).
    sampler = ClockSampler(host_clock(torch.device("cpu")), "perf_counter")
    for _ in range(5):
        step = RampingStep()
        with torch_threads(1):
            w = warm_up(step, sampler, 0, 1.0, 0.2)
        # Every step is the warm-up's. It outlasted most of the ramp: its end moves a group's
        # median by less than the tolerance or the machine's noise.
        assert step.calls == w.steps
        if w.settled and 0.6 * step.ramp <= w.seconds < w.ceiling:
            break
    assert w.settled and 0.6 * step.ramp <= w.seconds < w.ceiling, w


def test_num_threads_is_set_while_timing_and_restored() -> None:
    before = torch.get_num_threads()
    want = 1 if before != 1 else 2
    with torch_threads(want):
        assert torch.get_num_threads() == want
    assert torch.get_num_threads() == before


def test_median_and_iqr_match_torch_measurement() -> None:
    rng = random.Random(7)
    for n in (1, 2, 5, 6, 10, 37, 100):
        for number in (1, 3, 1000):
            raw = [rng.lognormvariate(-7.0, 0.4) for _ in range(n)]
            m = Measurement(number_per_run=number, raw_times=raw, task_spec=TaskSpec("s", ""))
            assert summarise(m.times) == (m.median, m.iqr)  # bit for bit
    # And by hand on binary-exact samples.
    assert summarise([0.25, 0.5, 1.0, 0.75]) == (0.625, 0.8125 - 0.4375)
