"""Sampling past the budget on a GPU (``worker/budget.py``, issue 29 item 3): the ceiling grows
with the step time, sampling goes on only while the target is in reach, and a record that stops
short says so with its interval. Injected clocks: exact numbers, no GPU."""

from __future__ import annotations

import pytest

from detbench.worker.budget import (
    CEILING_FACTOR,
    EXPECTED_SAMPLES,
    expected_sampling_seconds,
    in_reach,
    sampling_ceiling,
)
from detbench.worker.timing import time_step
from tests.test_timing import FakeDevice, settled


def test_the_ceiling_grows_with_the_step_time_on_a_gpu_only() -> None:
    # Full profile, 0.3 s: 300 samples' worth of seconds, at least the budget, at most 10x it.
    assert sampling_ceiling(0.0005, 0.3, "cuda") == 0.3  # 0.15 s of samples: the budget
    assert sampling_ceiling(0.005, 0.3, "cuda") == pytest.approx(1.5)
    assert sampling_ceiling(0.02, 0.3, "cuda") == pytest.approx(CEILING_FACTOR["cuda"] * 0.3)
    assert sampling_ceiling(0.02, 0.3, "cpu") == 0.3 == sampling_ceiling(0.02, 0.3, None)


def test_the_target_is_in_reach_while_the_projection_fits_the_ceiling() -> None:
    # 20 samples in 0.3 s at +-2%: 80 samples (1.2 s) to +-1%, within 2 x 3 s; at +-10%: 2000
    # samples (30 s), out of reach.
    assert in_reach(0.02, 0.01, 20, 0.3, 3.0)
    assert not in_reach(0.10, 0.01, 20, 0.3, 3.0)
    assert in_reach(float("inf"), 0.01, 5, 0.3, 3.0)  # no interval yet: go on


def scatter(cost: float, n: int) -> list[float]:
    """Steps around ``cost``: 3% below and above in turn, with one step at ``cost`` in four,
    so the median is ``cost`` and the interval narrows as more samples come."""
    pattern = [0.97 * cost, 1.03 * cost, cost, 0.97 * cost, 1.03 * cost, cost, cost, cost]
    return [pattern[i % len(pattern)] for i in range(n)]


def test_a_scattered_step_reaches_the_target_past_the_budget_on_a_gpu() -> None:
    # A 20 ms step scattering by 3%: the budget (0.3 s) holds 15 samples, whose interval is
    # +-3%; on a GPU it samples on (ceiling 3 s) and reaches +-1%, on a CPU it stops short.
    cost = 0.02
    gpu = FakeDevice(costs=settled(cost) + scatter(cost, 400))
    t = time_step(
        gpu.step,
        warmup_steps=0,
        budget=0.3,
        target_rel=0.01,
        clock=gpu.clock,
        ceiling_device="cuda",
    )
    assert t.reached_target and t.ci_rel <= 0.01 and t.ceiling == pytest.approx(3.0)
    assert sum(t.samples) > 0.3 and len(t.samples) > 15
    cpu = FakeDevice(costs=settled(cost) + scatter(cost, 400))
    t = time_step(cpu.step, warmup_steps=0, budget=0.3, target_rel=0.01, clock=cpu.clock)
    assert not t.reached_target and t.ceiling == 0.3
    # It says so, with its interval.
    assert t.ci_low < t.median < t.ci_high and t.ci_rel > 0.01
    assert t.to_json()["reached_target"] is False and t.to_json()["ceiling"] == 0.3


def test_a_step_out_of_reach_stops_soon_after_the_budget_not_at_the_ceiling() -> None:
    # Steps alternating 1x and 1.5x never give an interval within +-1%: the projection says
    # so at the budget, and the record stops short there instead of spending 3 s.
    cost = 0.02
    dev = FakeDevice(costs=settled(cost) + [cost, 1.5 * cost] * 500)
    t = time_step(
        dev.step,
        warmup_steps=0,
        budget=0.3,
        target_rel=0.01,
        clock=dev.clock,
        ceiling_device="cuda",
    )
    assert not t.reached_target and t.ceiling == pytest.approx(3.0)
    assert sum(t.samples) < 0.5


def test_the_expected_sampling_seconds_follow_the_rule() -> None:
    # Short steps: a share of the budget; one step a sample: the expected samples within the
    # ceiling, at least the floor; a CPU: its budget.
    assert expected_sampling_seconds(0.001, 0.3) == pytest.approx(0.12)
    assert expected_sampling_seconds(0.02, 0.3) == pytest.approx(EXPECTED_SAMPLES * 0.02)
    assert expected_sampling_seconds(0.5, 0.3) == pytest.approx(3.0)  # the ceiling
    assert expected_sampling_seconds(0.02, 0.3, "cpu") == pytest.approx(0.3)
    assert expected_sampling_seconds(0.2, 0.3, "cpu") == pytest.approx(1.2)  # the floor
