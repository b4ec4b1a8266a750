"""A paired turn (``worker.paired.PairedTiming.block``): one untimed step before a block of short
steps, none before a block that is one step of 0.1 s or more (``worker.warmup.turn_steps``). Real
steps on the CPU, timed by the worker's own warm-up and sampler; the steps sleep, so their length
is known (150 ms and 0.5 ms, far from the rule's 0.1 s) and the test does not hang on the
machine's speed. What is counted is the steps each block ran, not a time."""

from __future__ import annotations

import time

import pytest
import torch

from detbench.core.modes import get_mode
from detbench.core.workload import Context, Workload
from detbench.worker import warmup
from detbench.worker.paired import PairedTiming

JOB = {"rounds": 6, "budget": 0.5, "block_seconds": 0.01, "warmup_steps": 3, "target_rel": 0.03}


def timed(seconds: float) -> tuple[PairedTiming, list[int]]:
    """A workload whose step sleeps ``seconds``, warmed up and its block sized as a paired worker
    does it; and the list its step appends to, once a call."""
    calls: list[int] = []

    def step() -> None:
        calls.append(1)
        time.sleep(seconds)

    ctx = Context(device=torch.device("cpu"), profile="quick", seed=0)
    # As a member that made the verdict warms the step its verdict built (no record fields
    # but those the warm-up reads).
    rec = {"num_threads": torch.get_num_threads(), "settings_changed": [], "memory": None}
    w = Workload(suite="test", name="sleep", factory=lambda ctx: step, items_per_step=1)
    t, said = PairedTiming.from_verdict(w, dict(JOB), get_mode("default"), step, rec, ctx)
    assert t is not None and said["status"] == "ok", said
    assert said["number_per_block"] == t.number
    return t, calls


@pytest.mark.parametrize(("seconds", "untimed"), [(0.15, 0), (0.0005, 1)])
def test_a_block_of_one_long_step_takes_no_untimed_step(seconds: float, untimed: int) -> None:
    t, calls = timed(seconds)
    long = seconds >= warmup.LONG_STEP_SECONDS
    assert (t.number == 1) if long else (t.number > 1)
    assert t.turn_steps == untimed
    for _ in range(6):
        before = len(calls)
        t.block()
        assert len(calls) - before == t.number + untimed
    out = t.finish()
    assert out["timing"]["turn_steps"] == untimed
    assert len(out["timing"]["samples"]) == 6


def test_the_rule_is_the_blocks_not_the_steps_alone() -> None:
    # a long step in a block of several (a block asked longer than the step) keeps its step
    assert warmup.turn_steps(0.2, 1) == 0
    assert warmup.turn_steps(0.2, 3) == warmup.TURN_STEPS
    assert warmup.turn_steps(0.014, 1) == warmup.TURN_STEPS  # the CPU's 14 ms block keeps it
