"""The paired design's timing of one step beside torch.utils.benchmark on real CPU steps.

    python -m pytest -q -s benchmarks/test_timing_fidelity.py     (or: python THIS_FILE)

For four steps from ~10 us to ~20 ms and each profile's rounds and block (quick: 12 blocks of
8 ms; full: 10 of 10 ms), it takes a step's samples as a paired member does (the warm-up until
steady, ``worker.warmup``, at most half the rounds' seconds; then one block of about the
profile's block seconds a round, ``worker.paired.block_steps``), back to back here with no other
mode between the blocks, and prints their median, ``Timer.blocked_autorange``'s median over as
many seconds, their ratio, the blocks' steps, the interval of the median (``ci_rel``) and the
seconds each spent. Both time at one thread: on a shared 2-core machine a two-thread step waits
for a descheduled pool thread for whole scheduler ticks, which would compare the neighbours'
load rather than the timers. Nothing here is a unit test of speed; the assertions are the
timer's contract, the numbers are printed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.benchmark import Timer

from detbench.run.config import PROFILE_DEFAULTS
from detbench.worker.samplers import ClockSampler, host_clock
from detbench.worker.timing import MIN_CI_SAMPLES, summary_of, torch_threads
from detbench.worker.warmup import block_steps, warm_up

TARGET_REL = 0.03  # the CPU target
THREADS = 1
WARMUP = 3


def workloads() -> dict[str, Callable[[], Any]]:
    """Real steps of different lengths (single-thread times measured on the 2-core machine)."""
    x, w = torch.randn(64, 64), torch.randn(64, 64)
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    mlp = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    xb = torch.randn(256, 512)
    img, kernel = torch.randn(12, 32, 56, 56), torch.randn(64, 32, 3, 3)

    def mlp_train_step() -> torch.Tensor:
        mlp.zero_grad()
        loss = mlp(xb).square().mean()
        loss.backward()
        return loss

    return {
        "relu(64x64 matmul)": lambda: torch.relu(x @ w),  # ~10 us
        "256x256 matmul": lambda: a @ b,  # ~0.2 ms
        "MLP fwd+bwd, batch 256": mlp_train_step,  # ~2-3 ms
        "conv2d 12x32x56x56, 3x3->64": lambda: torch.nn.functional.conv2d(img, kernel, padding=1),
    }


def paired_samples(step: Callable[[], Any], rounds: int, block: float, budget: float) -> Any:
    """A paired member's samples of ``step``: its warm-up, then ``rounds`` blocks of about
    ``block`` seconds, one a round."""
    sampler = ClockSampler(host_clock(torch.device("cpu")), "perf_counter")
    with torch_threads(THREADS):
        warm = warm_up(step, sampler, WARMUP, min(budget, rounds * block / 2), TARGET_REL)
        number = block_steps(warm.medians[-1], block)
        samples = [sampler.samples(step, number, 1)[0] for _ in range(rounds)]
    return {**summary_of(samples, TARGET_REL), "number": number}


def measure() -> list[dict[str, Any]]:
    rows = []
    for name, step in workloads().items():
        for profile, d in PROFILE_DEFAULTS.items():
            rounds, block = int(d["rounds"]), float(d["block_seconds"])
            t0 = time.perf_counter()
            t = paired_samples(step, rounds, block, float(d["budget"]))
            spent = time.perf_counter() - t0
            t0 = time.perf_counter()
            ref = Timer("step()", globals={"step": step}, num_threads=THREADS)
            m = ref.blocked_autorange(min_run_time=rounds * block)
            rows.append(
                {
                    "workload": name,
                    "profile": profile,
                    "timing": t,
                    "spent": spent,
                    "torch_median": m.median,
                    "torch_samples": len(m.times),
                    "torch_spent": time.perf_counter() - t0,
                }
            )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'workload':<28} {'profile':>7} {'paired':>10} {'torch':>10} {'ratio':>6} "
        f"{'n':>4} {'steps/n':>7} {'ci_rel':>7} {'s':>5} {'torch n':>7} {'torch s':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        t = r["timing"]
        lines.append(
            f"{r['workload']:<28} {r['profile']:>7} {1e6 * t['median']:>8.1f}us "
            f"{1e6 * r['torch_median']:>8.1f}us {t['median'] / r['torch_median']:>6.3f} "
            f"{len(t['samples']):>4} {t['number']:>7} {100 * t['ci_rel']:>6.2f}% "
            f"{r['spent']:>5.2f} {r['torch_samples']:>7} {r['torch_spent']:>7.2f}"
        )
    return "\n".join(lines)


def test_timing_fidelity_table() -> None:
    rows = measure()
    print(f"\npaired blocks vs torch.utils.benchmark, {THREADS} thread, torch {torch.__version__}")
    print(table(rows))
    for r in rows:
        # The contract: every profile's rounds give a median with a 95% interval.
        assert len(r["timing"]["samples"]) >= MIN_CI_SAMPLES


if __name__ == "__main__":
    test_timing_fidelity_table()
