"""Adaptive timing (detbench.worker.timing.time_step) beside torch.utils.benchmark on real CPU
steps.

    python -m pytest -q -s benchmarks/test_timing_fidelity.py     (or: python THIS_FILE)

For four steps from ~10 us to ~20 ms and budgets of 0.1 s (the quick profile) and 1.0 s (full),
it prints the adaptive median, ``Timer.blocked_autorange``'s median at ``min_run_time`` = the
same budget (detbench's timing before adaptive timing), their ratio, the sample counts, the
interval reached (``ci_rel``: half-width of the 95 % interval of the median over the median) and
the seconds each spent (wall, warm-up and block-size calibration included). Both time at one
thread: on a shared 2-core machine a two-thread step waits for a descheduled pool thread for
whole scheduler ticks, which would compare the neighbours' load rather than the timers. Nothing
here is a unit test of speed; the assertions are the timer's contract, the numbers are printed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.benchmark import Timer

from detbench.worker.timing import time_step

TARGET_REL = 0.03  # the CPU target
BUDGETS = (0.1, 1.0)
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


def measure() -> list[dict[str, Any]]:
    rows = []
    for name, step in workloads().items():
        for budget in BUDGETS:
            t0 = time.perf_counter()
            t = time_step(
                step, warmup_steps=WARMUP, budget=budget, target_rel=TARGET_REL, num_threads=THREADS
            )
            spent = time.perf_counter() - t0
            for _ in range(WARMUP):
                step()
            t0 = time.perf_counter()
            ref = Timer("step()", globals={"step": step}, num_threads=THREADS)
            m = ref.blocked_autorange(min_run_time=budget)
            ref_spent = time.perf_counter() - t0
            rows.append(
                {"workload": name, "budget": budget, "timing": t, "spent": spent,
                 "torch_median": m.median, "torch_samples": len(m.times), "torch_spent": ref_spent}
            )  # fmt: skip
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'workload':<28} {'budget':>6} {'adaptive':>10} {'torch':>10} {'ratio':>6} "
        f"{'n':>4} {'steps/n':>7} {'ci_rel':>7} {'target':>6} {'s':>5} "
        f"{'torch n':>7} {'torch s':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        t = r["timing"]
        ci = f"{100 * t.ci_rel:6.2f}%"
        lines.append(
            f"{r['workload']:<28} {r['budget']:>6.1f} {1e6 * t.median:>8.1f}us "
            f"{1e6 * r['torch_median']:>8.1f}us {t.median / r['torch_median']:>6.3f} "
            f"{len(t.samples):>4} {t.number_per_block:>7} {ci:>7} "
            f"{'met' if t.reached_target else 'MISSED':>6} {r['spent']:>5.2f} "
            f"{r['torch_samples']:>7} {r['torch_spent']:>7.2f}"
        )
    return "\n".join(lines)


def test_timing_fidelity_table() -> None:
    rows = measure()
    print(f"\nadaptive timing vs torch.utils.benchmark, target +-{100 * TARGET_REL:.0f}%, "
          f"{THREADS} thread, torch {torch.__version__}")  # fmt: skip
    print(table(rows))
    for r in rows:
        t = r["timing"]
        # The contract: the floor of 5 samples, and the target met or the budget spent.
        assert len(t.samples) >= 5
        assert t.reached_target or r["spent"] >= r["budget"]
        assert t.clock == "perf_counter"


if __name__ == "__main__":
    test_timing_fidelity_table()
