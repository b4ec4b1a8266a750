"""The GPU check of sustained clocks (issue 29, item 4): detbench's timing against CUDA events.

    python tools/clock_check.py [--out FILE.json]

In one process, for an 8192^3 bf16 GEMM (compute-bound: on an H100 it meets the 700 W power cap
within a second) and a 1 GiB fp32 scale (memory-bound: it meets no limit), each after 2 s idle:

1. ``time_step`` in burst mode (for information: the clock before the power limit acts);
2. after 2 s idle again, ``time_step`` in sustained mode (detbench's default on CUDA), with the
   full profile's budget and target;
3. right after, a long loop between ``torch.cuda.Event`` pairs: 2 s of steps untimed, then 3 s
   in blocks of about 0.1 s, each between two events; the reference is the median block;
4. ``triton.testing.do_bench`` (median, 1 s of repetitions) where triton imports.

Each kernel's line says PASS where the sustained median is within 2% of the events' median, else
FAIL, and the same against do_bench. Exit status 0 when every kernel passes against the events,
1 when one fails, 2 without a CUDA GPU. About 30 s on an H100.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: Sustained and reference medians agree when within this share of each other.
AGREE = 0.02
IDLE_SECONDS = 2.0
LOOP_HOLD_SECONDS = 2.0
LOOP_SECONDS = 3.0
LOOP_BLOCK_SECONDS = 0.1


def kernels(torch: Any) -> dict[str, Callable[[], Any]]:
    """The two steps, on tensors made once."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(8192, 8192, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(2**28, device="cuda")  # 1 GiB of fp32
    y = torch.empty_like(x)
    return {
        "gemm_bf16_8192": lambda: torch.matmul(a, b, out=c),
        "scale_fp32_1gib": lambda: torch.mul(x, 1.5, out=y),
    }


def event_loop(torch: Any, step: Callable[[], Any]) -> dict[str, Any]:
    """Seconds per step: the median of ~0.1 s blocks between CUDA events, after a hold."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    one = time.perf_counter()
    step()
    torch.cuda.synchronize()
    per = max(time.perf_counter() - one, 1e-6)
    while time.perf_counter() - t0 < LOOP_HOLD_SECONDS:
        for _ in range(max(1, int(LOOP_BLOCK_SECONDS / per))):
            step()
        torch.cuda.synchronize()
    n = max(1, int(LOOP_BLOCK_SECONDS / per))
    pairs = []
    for _ in range(int(LOOP_SECONDS / LOOP_BLOCK_SECONDS)):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            step()
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    blocks = [s.elapsed_time(e) / 1000.0 / n for s, e in pairs]
    return {"median": statistics.median(blocks), "blocks": len(blocks), "steps_per_block": n}


def do_bench(step: Callable[[], Any]) -> float | None:
    """triton's do_bench median in seconds, or None where triton does not import."""
    try:
        from triton.testing import do_bench as bench
    except Exception:
        return None
    return float(bench(step, warmup=100, rep=1000, return_mode="median")) / 1000.0


def verdict(value: float, ref: float | None) -> str:
    if ref is None:
        return "n/a"
    off = value / ref - 1.0
    return f"{'PASS' if abs(off) <= AGREE else 'FAIL'} ({off:+.2%})"


def check(torch: Any, name: str, step: Callable[[], Any]) -> dict[str, Any]:
    from detbench.worker.timing import time_step

    dev = torch.device("cuda")

    def timed(clocks: str) -> Any:
        time.sleep(IDLE_SECONDS)
        return time_step(
            step,
            warmup_steps=5,
            budget=0.3,
            target_rel=0.01,
            min_samples=6,
            device=dev,
            clocks=clocks,
        )

    burst = timed("burst")
    sustained = timed("sustained")
    loop = event_loop(torch, step)
    bench = do_bench(step)
    return {
        "kernel": name,
        "burst_median": burst.median,
        "sustained_median": sustained.median,
        "sustained_hold": sustained.hold,
        "sustained_gpu_clocks": sustained.gpu_clocks,
        "sustained_samples": len(sustained.samples),
        "sustained_ci_rel": sustained.ci_rel,
        "events": loop,
        "do_bench_median": bench,
        "vs_events": verdict(sustained.median, loop["median"]),
        "vs_do_bench": verdict(sustained.median, bench),
        "pass": abs(sustained.median / loop["median"] - 1.0) <= AGREE,
    }


def line(r: dict[str, Any]) -> str:
    hold = r["sustained_hold"] or {}
    end = hold.get("end") or {}
    held = (
        f"held: acted={hold.get('acted')} settled={hold.get('settled')} "
        f"{hold.get('seconds', 0.0):.2f} s, end {end.get('sm_clock_mhz')} MHz "
        f"{end.get('power_w')} W of {end.get('power_limit_w')} W"
        if hold.get("status") == "ok"
        else f"not held: {hold.get('reason')}"
    )
    bench = r["do_bench_median"]
    return (
        f"{'PASS' if r['pass'] else 'FAIL'} {r['kernel']}: sustained "
        f"{r['sustained_median'] * 1e3:.4f} ms, events {r['events']['median'] * 1e3:.4f} ms "
        f"{r['vs_events']}, do_bench "
        f"{'n/a' if bench is None else f'{bench * 1e3:.4f} ms'} {r['vs_do_bench']}, burst "
        f"{r['burst_median'] * 1e3:.4f} ms; {held}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="also write every figure to this JSON file")
    a = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("clock_check: needs a CUDA GPU; torch sees none here (nothing was timed)")
        return 2
    start = time.perf_counter()
    results = [check(torch, name, step) for name, step in kernels(torch).items()]
    for r in results:
        print(line(r))
    took = time.perf_counter() - start
    print(
        f"clock_check: {sum(r['pass'] for r in results)} of {len(results)} passed in {took:.0f} s"
    )
    if a.out is not None:
        a.out.write_text(json.dumps({"seconds": took, "kernels": results}, indent=1, default=str))
    return 0 if all(r["pass"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
