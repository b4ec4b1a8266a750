"""Adaptive timing. With an injected clock: exact numbers, no GPU, no wall-clock dependence.
Then fidelity against torch.utils.benchmark on this CPU, and against CUDA events on a GPU."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterable

import pytest
import torch
from torch.utils.benchmark import Timer
from torch.utils.benchmark.utils.common import Measurement, TaskSpec

from detbench.worker.ranks import median_ci_ranks
from detbench.worker.samplers import ClockSampler
from detbench.worker.timing import (
    _sample,
    summarise,
    time_step,
)
from detbench.worker.warmup import GROUP, SAMPLES_PER_BUDGET, block_size
from tests.conftest import requires_cuda


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
    # Ten distinct samples in shuffled order: the interval is the 2nd and 9th smallest. Budget 0:
    # the warm-up's ceiling is reached after one group of 3 one-step samples.
    costs = settled(1.0, groups=1) + [0.5 * k for k in (7, 3, 10, 1, 6, 9, 2, 8, 4, 5)]
    dev = FakeDevice(costs=costs, step_cost=99.0)
    # target 0 is unreachable; min_samples=10 and budget=0 stop it at exactly ten samples.
    t = time_step(
        dev.step, warmup_steps=0, budget=0.0, target_rel=1e-9, min_samples=10, clock=dev.clock
    )
    assert len(t.samples) == 10
    assert (t.ci_low, t.ci_high) == (1.0, 4.5)
    assert t.median == 2.75
    assert t.ci_rel == (4.5 - 2.75) / 2.75
    assert t.reached_target is False
    assert t.warmup is not None and (t.warmup.steps, t.warmup.settled) == (3, False)


def test_rule_stops_at_the_first_sample_whose_interval_is_within_target() -> None:
    # Samples 1, 2, 0.5, then 1s. Up to n=8 the interval is [min, max] = [0.5, 2] (+-100 %);
    # at n=9 it is [x(2), x(8)] = [1, 1]: within +-5 %, so it stops there and not later.
    costs = [*settled(1.0), 1.0, 2.0, 0.5]  # a warm-up of 6 steps first (not samples)
    dev = FakeDevice(costs=costs, step_cost=1.0)
    t = time_step(
        dev.step, warmup_steps=0, budget=40.0, target_rel=0.05, clock=dev.clock, num_threads=2
    )
    assert t.number_per_block == 1  # 40 s / 50 = 0.8 s per sample: less than the 1 s step
    assert t.samples == (1.0, 2.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    assert (t.ci_low, t.ci_high, t.ci_rel) == (1.0, 1.0, 0.0)
    assert t.median == 1.0
    assert t.reached_target is True
    assert t.clock == "injected"
    assert t.num_threads == 2
    assert dev.steps == 6 + 9


def test_min_samples_is_a_floor_and_six_samples_make_the_first_interval() -> None:
    # A constant step meets any target as soon as an interval exists: at 6 samples.
    dev = FakeDevice(step_cost=0.125)  # binary-exact
    t = time_step(dev.step, warmup_steps=0, budget=5.0, target_rel=0.01, clock=dev.clock)
    assert t.samples == (0.125,) * 6 and t.reached_target
    # With a floor of 12 it takes 12, although the target was met at 6 and the budget (0.5 s,
    # 4 samples) long spent: the floor wins over the budget.
    dev = FakeDevice(step_cost=0.125)
    t = time_step(
        dev.step, warmup_steps=0, budget=0.5, target_rel=0.01, min_samples=12, clock=dev.clock
    )
    assert t.samples == (0.125,) * 12 and t.reached_target
    assert (t.median, t.iqr, t.ci_low, t.ci_high, t.ci_rel) == (0.125, 0.0, 0.125, 0.125, 0.0)


def test_budget_is_the_ceiling_and_a_missed_target_is_recorded() -> None:
    # Samples alternate 1, 2: the interval always holds both values (+-100 % of a median of 1),
    # so the target is never met; spent time is 1, 3, 4, 6, 7, 9, 10 s: it stops at 10 >= 10.
    costs = settled(1.0) + [1.0, 2.0] * 20
    dev = FakeDevice(costs=costs)
    t = time_step(dev.step, warmup_steps=0, budget=10.0, target_rel=0.03, clock=dev.clock)
    assert t.samples == (1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 1.0)
    assert t.reached_target is False
    assert (t.median, t.ci_low, t.ci_high, t.ci_rel) == (1.0, 1.0, 2.0, 1.0)
    js = t.to_json()
    assert js["reached_target"] is False and js["budget"] == js["min_run_time"] == 10.0
    assert js["target_rel"] == 0.03 and js["clock"] == "injected"
    assert set(js) >= {"samples", "number_per_block", "median", "iqr", "warmup_steps",
                       "num_threads", "ci_low", "ci_high", "ci_rel", "warmup",
                       "gpu_clocks"}  # fmt: skip
    assert js["warmup"]["settled"] is True and js["warmup"]["steps"] == 6
    assert js["warmup_steps"] == js["warmup"]["min_steps"] == 0  # the least it was asked for


def test_a_long_run_still_stops_exactly_at_the_budget() -> None:
    # Past 100 samples the rule is checked every n // 100 samples, the budget after every one:
    # alternating 1 s and 2 s samples spend 3 s a pair, so 450 s hold exactly 300 samples.
    # A warm-up at 10 s a step (over 450 s / 50): one step a sample.
    dev = FakeDevice(costs=settled(10.0) + [1.0, 2.0] * 400)
    t = time_step(dev.step, warmup_steps=0, budget=450.0, target_rel=0.03, clock=dev.clock)
    assert len(t.samples) == 300 and t.reached_target is False
    assert (t.ci_low, t.ci_high) == (1.0, 2.0)


def test_the_floor_is_six_samples_so_every_record_has_an_interval() -> None:
    # The budget is spent after 2 samples and min_samples is 5, but no 95 % interval of the
    # median exists below 6 samples: the floor is 6, and the record carries [min, max].
    # The warm-up's ceiling (2 s) comes after one group: 3 steps.
    dev = FakeDevice(costs=[*settled(1.0, groups=1), 1.0, 2.0, 1.0, 0.5, 1.0, 4.0])
    t = time_step(dev.step, warmup_steps=0, budget=2.0, target_rel=0.5, clock=dev.clock)
    assert t.samples == (1.0, 2.0, 1.0, 0.5, 1.0, 4.0)
    assert (t.median, t.ci_low, t.ci_high, t.ci_rel, t.reached_target) == (
        1.0,
        0.5,
        4.0,
        3.0,
        False,
    )


def test_warmup_runs_until_the_step_time_settles_and_not_before() -> None:
    # Ten slow steps (1 s: autotuning, a clock still ramping up), then 0.25 s steps. The first
    # step sets 2 steps a sample (100 s / 50 = 2 s); each group of 3 samples is 6 steps.
    dev = FakeDevice(costs=[1.0] * 10, step_cost=0.25)
    t = time_step(dev.step, warmup_steps=0, budget=100.0, target_rel=0.01, clock=dev.clock)
    w = t.warmup
    assert w is not None
    # Group medians: steps 2-7 all slow (1.0); steps 8-13 mix (1.0, 0.625, 0.25: 0.625); then
    # 0.25, which shows the first step was 4x too slow: blocks of 8 steps from then on, and two
    # groups of those within 0.5 % (target 1 % x SETTLE_SHARE) settle it, no sooner.
    assert w.medians == (1.0, 0.625, 0.25, 0.25, 0.25) and w.settled
    assert w.steps == 1 + 3 * GROUP * 2 + 2 * GROUP * 8 == 67
    assert w.seconds == 10 * 1.0 + 57 * 0.25 and w.tolerance == 0.005
    # The samples hold no slow step, and their blocks are sized from the settled step.
    assert t.number_per_block == block_size(0.25, 100.0) == 8
    assert t.samples == (0.25,) * 6 and dev.steps == 67 + 6 * 8


def test_warmup_stops_at_its_ceiling_unsettled_and_says_so() -> None:
    # Steps alternating 1 s and 2 s never settle (group medians 1, 2, 1: 1 s apart, more than
    # their scatter of 0.5 s): the warm-up stops at its ceiling, the budget (10 s) of wall time,
    # and the record says it did not settle.
    dev = FakeDevice(costs=[1.0, 2.0] * 50)
    t = time_step(dev.step, warmup_steps=0, budget=10.0, target_rel=0.01, clock=dev.clock)
    w = t.warmup
    assert w is not None and not w.settled
    # Groups (1, 2, 1), (2, 1, 2), (1, 2, 1): 4 s, 9 s, 13 s: past the ceiling.
    assert w.medians == (1.0, 2.0, 1.0) and w.steps == 9 and w.seconds == 13.0
    assert t.to_json()["warmup"] == {
        "steps": 9, "seconds": 13.0, "settled": False, "group_medians": [1.0, 2.0, 1.0],
        "group_samples": 3, "min_steps": 0, "ceiling_seconds": 10.0, "tolerance": 0.005,
    }  # fmt: skip


def test_a_step_that_scatters_without_moving_settles_within_its_scatter() -> None:
    # One-step samples scattering by +-10-25 % (an RNN's steps): the group medians 1.0 and
    # 1.125 are 12.5 % apart, far over the 0.5 % tolerance, but within the groups' scatter (half
    # their range: 0.1875 s each), so the step time has stopped moving.
    dev = FakeDevice(costs=[1.0, 1.25, 0.875, 1.125, 0.875, 1.25], step_cost=1.0)
    t = time_step(dev.step, warmup_steps=0, budget=40.0, target_rel=0.01, clock=dev.clock)
    assert t.warmup is not None and t.warmup.settled and t.warmup.medians == (1.0, 1.125)
    # A group that straddles a change (1.0, 0.75, 0.5: half-range 0.25) has a narrow neighbour
    # on either side: the narrower decides, and the change is not taken for scatter.
    dev = FakeDevice(costs=[1.0, 1.0, 1.0, 1.0, 0.75], step_cost=0.5)
    t = time_step(dev.step, warmup_steps=0, budget=40.0, target_rel=0.01, clock=dev.clock)
    assert t.warmup is not None and t.warmup.medians == (1.0, 0.75, 0.5, 0.5)
    assert t.warmup.settled and t.samples == (0.5,) * 6


def test_warmup_runs_at_least_its_minimum_of_steps() -> None:
    # A constant 1 s step settles after 2 groups (6 steps), but 10 are asked for: 4 groups.
    dev = FakeDevice(step_cost=1.0)
    t = time_step(dev.step, warmup_steps=10, budget=40.0, target_rel=0.01, clock=dev.clock)
    assert t.warmup is not None and (t.warmup.steps, t.warmup.settled) == (12, True)
    assert t.samples == (1.0,) * 6 and dev.steps == 12 + 6


def test_block_size_aims_at_a_fiftieth_of_the_budget() -> None:
    cost = 2.0**-10  # ~1 ms
    dev = FakeDevice(step_cost=cost, sync_cost=cost)
    t = time_step(dev.step, warmup_steps=0, budget=1.0, target_rel=0.01, clock=dev.clock)
    # The warm-up's first step measured one step plus one clock read: 1.95 ms; 1 s / 50 = 20 ms,
    # so floor(10.24) = 10 steps per sample in its groups, each sample 11 reads' worth / 10.
    assert t.warmup is not None and t.warmup.medians == (11 * cost / 10,) * 2
    # The samples' blocks come from the warmed step: floor(20 ms / 1.07 ms) = 18 steps.
    assert t.number_per_block == block_size(11 * cost / 10, 1.0) == 18
    # Each sample reads the clock twice, so it holds one read (a sync) plus 18 steps.
    assert t.samples[0] == (18 * cost + cost) / 18
    assert block_size(1.0, 1.0) == 1  # a step longer than a sample: one step per sample
    assert block_size(0.0, 1.0) == 1
    assert block_size(2.0**-16, 1.0) == 1310 == int(2.0**16 / SAMPLES_PER_BUDGET)


def test_the_sample_count_adapts_to_the_step_time() -> None:
    # The same budget (1 s) and target: a 1 ms step gets blocks of 20 steps and stops at the
    # rule's first chance (6 samples of a constant step); steps of 0.5 s and 0.125 s get one step
    # a sample, 6 of them (the floor outlasts the budget for the longer one).
    for cost, number in ((2.0**-10, 20), (0.5, 1), (0.125, 1)):
        dev = FakeDevice(step_cost=cost)
        t = time_step(dev.step, warmup_steps=0, budget=1.0, target_rel=0.01, clock=dev.clock)
        assert (t.number_per_block, len(t.samples)) == (number, 6), cost
    # Samples alternating around the median (never within +-1%): the count is then set by the
    # budget, and a shorter step gets more of them in the same budget.
    counts = []
    for cost in (0.0625, 0.125):
        dev = FakeDevice(costs=settled(cost) + [cost, 1.5 * cost] * 200)
        t = time_step(dev.step, warmup_steps=0, budget=1.0, target_rel=0.01, clock=dev.clock)
        assert t.number_per_block == 1 and not t.reached_target
        counts.append(len(t.samples))
    assert counts == [13, 7]


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
    for _ in range(5):
        step = RampingStep()
        t = time_step(step, warmup_steps=0, budget=1.0, target_rel=0.2, num_threads=1,
                      device=torch.device("cpu"))  # fmt: skip
        w = t.warmup
        assert w is not None
        # Every step is the warm-up's or a sample's. The warm-up outlasted most of the ramp: its
        # end moves a group's median by less than the tolerance or the machine's noise (the
        # samples' start may hold what is left of it: about 10 % of the step here).
        assert step.calls == w.steps + len(t.samples) * t.number_per_block
        if w.settled and 0.6 * step.ramp <= w.seconds < w.ceiling:
            break
    assert w is not None and w.settled and 0.6 * step.ramp <= w.seconds < w.ceiling, w
    reason = "the device is not a CUDA GPU: NVML reads NVIDIA GPUs only"
    assert t.gpu_clocks == {"status": "unsupported", "reason": reason}


def test_batched_checks_as_on_cuda() -> None:
    # The CUDA sampler checks the rule once per batch of up to 8 samples (one host sync each).
    # The same loop with a clock sampler given batches of 8: a constant step meets the target at
    # 6 samples, but the first check comes after the first batch of 8.
    dev = FakeDevice(step_cost=0.25)
    sampler = ClockSampler(dev.clock, "injected")
    sampler.batch = 8
    calls: list[int] = []
    inner = sampler.samples

    def counted(step: Callable[[], object], number: int, k: int) -> list[float]:
        calls.append(k)
        return inner(step, number, k)

    sampler.samples = counted  # type: ignore[method-assign]
    samples, number, reached = _sample(dev.step, sampler, 1, 0.25, 10.0, 0.01, 5)
    assert (len(samples), number, reached, calls) == (8, 1, True, [8])
    # A batch never plans past the budget: the target is never met (samples alternate 0.25 and
    # 0.5 s); after a first batch of 8 (3 s), 0.5 s are left at 0.25 s a sample: a batch of 2.
    dev = FakeDevice(costs=[0.25, 0.5] * 20)
    sampler = ClockSampler(dev.clock, "injected")
    sampler.batch = 8
    calls.clear()
    inner = sampler.samples
    sampler.samples = counted  # type: ignore[method-assign]
    samples, number, reached = _sample(dev.step, sampler, 1, 0.25, 3.5, 0.01, 5)
    assert (len(samples), reached, calls) == (10, False, [8, 2])


def test_num_threads_is_set_while_timing_and_restored() -> None:
    seen: list[int] = []
    before = torch.get_num_threads()
    want = 1 if before != 1 else 2

    dev = FakeDevice(step_cost=0.5)

    def step() -> None:
        seen.append(torch.get_num_threads())
        dev.step()

    time_step(
        step,
        warmup_steps=2,
        budget=1.0,
        target_rel=0.1,
        clock=dev.clock,
        num_threads=want,
    )
    assert set(seen) == {want}  # warm-up included
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


def test_rejects_nonsense_arguments() -> None:
    with pytest.raises(ValueError):
        time_step(lambda: None, warmup_steps=0, budget=1.0, target_rel=0.0)
    with pytest.raises(ValueError):
        time_step(lambda: None, warmup_steps=0, budget=1.0, target_rel=0.03, min_samples=0)


@pytest.mark.serial  # two timers compared: not beside other tests' processes
def test_cpu_median_within_25_percent_of_torch_benchmark() -> None:
    a = torch.randn(256, 256)
    b = torch.randn(256, 256)

    def step() -> torch.Tensor:
        return a @ b

    # One thread: with two, a step waits for the pool's second thread, and on this shared 2-core
    # machine that thread is at times descheduled for whole 4 ms scheduler ticks (0.12 ms steps
    # then take 4, 8 or 12 ms), which compares the neighbours' load, not the two timers.
    threads = 1
    ratios = []
    # This machine's 2 cores are shared with other jobs, so one comparison can catch a burst of
    # load in one timer and not the other; the better of 3 attempts tests the timer, not the
    # neighbours (a timer that is wrong is wrong in all three).
    for _ in range(3):
        t = time_step(
            step,
            warmup_steps=3,
            budget=0.3,
            target_rel=0.03,
            device=torch.device("cpu"),
            num_threads=threads,
        )
        ref = Timer("step()", globals={"step": step}, num_threads=threads)
        ref_median = ref.blocked_autorange(min_run_time=0.3).median
        assert t.clock == "perf_counter" and len(t.samples) >= 5
        ratios.append(t.median / ref_median)
        if abs(ratios[-1] - 1.0) <= 0.25:
            break
    assert min(abs(r - 1.0) for r in ratios) <= 0.25, ratios


@pytest.mark.serial  # two timers compared: not beside other tests' processes
@requires_cuda
def test_cuda_median_within_2_percent_of_an_event_reference() -> None:
    device = torch.device("cuda")
    a = torch.randn(2048, 2048, device=device)
    b = torch.randn(2048, 2048, device=device)

    def step() -> torch.Tensor:
        return a @ b

    def reference(steps: int = 500) -> float:
        """Seconds per step from CUDA events around one long block of ``steps`` steps."""
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(device)
        start.record()
        for _ in range(steps):
            step()
        end.record()
        torch.cuda.synchronize(device)
        return start.elapsed_time(end) / 1000.0 / steps

    for _ in range(10):  # warm-up: cuBLAS handle, workspace, clocks ramping up
        step()
    ratios = []
    # GPU clocks move with temperature and power; the better of 3 attempts tests the timer, not
    # a clock change between the two measurements.
    for _ in range(3):
        t = time_step(
            step, warmup_steps=3, budget=0.5, target_rel=0.01, min_samples=8, device=device
        )
        assert t.clock == "cuda-event"
        assert len(t.samples) >= 8
        assert t.ci_low <= t.median <= t.ci_high
        # Blocks of ~budget/50 = 10 ms: many samples, not torch's 2-12 blocks of 80-800 ms.
        assert t.number_per_block * t.median < 0.05
        ratios.append(t.median / reference())
        if abs(ratios[-1] - 1.0) <= 0.02:
            break
    assert min(abs(r - 1.0) for r in ratios) <= 0.02, ratios
