"""The timing pass with an injected clock: exact numbers, no GPU, no wall-clock dependence."""

from __future__ import annotations

import pytest

from detbench.timing import time_step


class FakeDevice:
    """A clock and a step sharing one virtual time: each step costs ``step_cost`` seconds and
    each read of the clock (a device synchronisation) costs ``sync_cost``."""

    def __init__(self, step_cost: float, sync_cost: float = 0.0) -> None:
        self.now = 0.0
        self.step_cost = step_cost
        self.sync_cost = sync_cost
        self.steps = 0

    def clock(self) -> float:
        t = self.now
        self.now += self.sync_cost
        return t

    def step(self) -> list[object]:
        self.steps += 1
        self.now += self.step_cost
        return []


def test_constant_step_gives_exact_samples() -> None:
    dev = FakeDevice(step_cost=0.125)  # binary-exact
    t = time_step(dev.step, warmup_steps=3, min_run_time=1.0, clock=dev.clock, num_threads=2)
    # No sync cost: a block of one step is already negligible overhead, so one step per sample,
    # and blocks continue until 1.0 s of samples: 8 of 0.125 s.
    assert t.number_per_block == 1
    assert t.samples == (0.125,) * 8
    assert t.median == 0.125
    assert t.iqr == 0.0
    assert t.num_threads == 2
    # 3 warm-up + 5 calibration blocks of 0 steps + 1 calibration step + 8 timed.
    assert dev.steps == 3 + 1 + 8


def test_sync_cost_is_amortised_by_calibration() -> None:
    # A sync as costly as a step: blocks grow by 10x until the overhead is <= 1e-4 of a block.
    cost = 2.0**-10
    dev = FakeDevice(step_cost=cost, sync_cost=cost)
    t = time_step(dev.step, warmup_steps=0, min_run_time=100.0, clock=dev.clock)
    assert t.number_per_block == 10_000
    # Each block reads the clock twice, so it measures one sync plus 10 000 steps.
    per_step = (cost + 10_000 * cost) / 10_000
    assert t.samples[0] == pytest.approx(per_step, rel=1e-12)
    assert t.median == pytest.approx(per_step, rel=1e-12)
    assert (t.median - cost) / cost == pytest.approx(1e-4, rel=1e-9)


def test_median_and_iqr_come_from_the_raw_samples() -> None:
    # The first step is calibration (one step per block: no sync cost); then four samples.
    costs = iter([0.5, 0.25, 0.5, 1.0, 0.75, 8.0])

    class Varying(FakeDevice):
        def step(self) -> list[object]:
            self.steps += 1
            self.now += next(costs)
            return []

    dev = Varying(step_cost=0.0)
    t = time_step(dev.step, warmup_steps=0, min_run_time=2.5, clock=dev.clock)
    assert t.samples == (0.25, 0.5, 1.0, 0.75)  # stops once 2.5 s of samples exist
    assert t.median == 0.625  # linear interpolation between 0.5 and 0.75
    assert t.iqr == 0.8125 - 0.4375
