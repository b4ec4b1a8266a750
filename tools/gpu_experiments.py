"""The small GPU experiments that paper could not decide (docs/gpu-session.md), in one process.

    python tools/gpu_experiments.py row0 OUT.json      # cuBLAS row 0 against the batch size
    python tools/gpu_experiments.py nccl OUT.json      # NCCL_ALGO after init_process_group
    python tools/gpu_experiments.py idle OUT.json [S]  # throttle reasons idle, under S s of bmm

Each writes one JSON file and prints a short summary. Nothing here is a detbench measurement;
these are the facts the measurements' design rests on, read on the GPU they are about.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def row0(out: Path) -> dict[str, Any]:
    """Row 0 of x[:M] @ W.T for M in a range of batch sizes, against M = 1, bitwise.

    cuBLAS picks its kernel (tile, split-K) by shape, so the same row may be summed in another
    order at another M: that is the batch-invariance question for a linear layer. Fresh random
    inputs, K = N = 512 as the review asked, and a larger K where split-K is likelier.
    """
    import torch

    torch.manual_seed(0)
    rows = []
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for k in (512, 4096):
            w = torch.randn(512, k, device="cuda", dtype=dtype)
            x = torch.randn(1024, k, device="cuda", dtype=dtype)
            ref = torch.nn.functional.linear(x[:1], w)[0]
            for m in (1, 2, 3, 4, 8, 16, 32, 64, 128, 256, 1024):
                y = torch.nn.functional.linear(x[:m], w)[0]
                diff = (y.float() - ref.float()).abs().max().item()
                rows.append({
                    "dtype": str(dtype).removeprefix("torch."), "k": k, "n": 512, "m": m,
                    "row0_equal_bits": bool(torch.equal(y, ref)), "max_abs_diff": diff,
                })  # fmt: skip
    result = {
        "experiment": "cublas_row0",
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "rows": rows,
    }
    for r in rows:
        print(f"{r['dtype']:9} K={r['k']:5} M={r['m']:5} row0 equal={r['row0_equal_bits']!s:5} "
              f"max|diff|={r['max_abs_diff']:.3g}")  # fmt: skip
    return result


def nccl(out: Path) -> dict[str, Any]:
    """NCCL_ALGO before and after init_process_group under deterministic algorithms, one rank."""
    import torch
    import torch.distributed as dist

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    before = os.environ.get("NCCL_ALGO")
    torch.use_deterministic_algorithms(True)
    store = Path(tempfile.mkdtemp()) / "store"
    dist.init_process_group(
        "nccl", init_method=f"file://{store}", rank=0, world_size=1,
        device_id=torch.device("cuda:0"),
    )  # fmt: skip
    t = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    after_init = os.environ.get("NCCL_ALGO")
    dist.destroy_process_group()
    result = {
        "experiment": "nccl_algo_det_algos_world1",
        "torch": torch.__version__,
        "nccl_version": ".".join(map(str, torch.cuda.nccl.version())),
        "NCCL_ALGO_before": before,
        "NCCL_ALGO_after_init": after_init,
        "all_reduce_ok": bool(t[0].item() == 1.0),
    }
    print(json.dumps(result))
    return result


def idle(out: Path, seconds: float) -> dict[str, Any]:
    """Throttle reasons and NVML violation counters: idle, during `seconds` of bf16 bmm, after."""
    import torch

    from detbench.store.gpustate import snapshot

    snaps = {"idle_before": snapshot()}
    a = torch.randn(64, 1024, 1024, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(64, 1024, 1024, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    start = time.perf_counter()
    per_second = []
    mid_taken = False
    while (elapsed := time.perf_counter() - start) < seconds:
        t0 = time.perf_counter()
        for _ in range(50):
            torch.bmm(a, b)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        per_second.append({"t": round(elapsed, 2), "tflops": 50 * 2 * 64 * 1024**3 / dt / 1e12})
        if not mid_taken and elapsed > seconds / 2:
            snaps["under_load"] = snapshot()
            mid_taken = True
    snaps["just_after"] = snapshot()
    time.sleep(5)
    snaps["idle_5s_after"] = snapshot()
    result = {"experiment": "idle_and_load_throttle", "seconds": seconds,
              "bmm_tflops": per_second, "snapshots": snaps}  # fmt: skip
    for name, snap in snaps.items():
        for gpu in snap.get("gpus") or []:
            print(
                name,
                {
                    k: gpu.get(k)
                    for k in (
                        "throttle_reasons",
                        "sm_clock_mhz",
                        "power_draw_w",
                        "temperature_c",
                        "violation_ns",
                    )
                },
            )
    tf = [p["tflops"] for p in per_second]
    print(
        f"bmm bf16 TFLOP/s: first {tf[0]:.0f}, min {min(tf):.0f}, max {max(tf):.0f}, "
        f"last {tf[-1]:.0f} over {len(tf)} batches"
    )
    return result


def main(argv: list[str]) -> int:
    what, out = argv[0], Path(argv[1])
    if what == "row0":
        result = row0(out)
    elif what == "nccl":
        result = nccl(out)
    elif what == "idle":
        result = idle(out, float(argv[2]) if len(argv) > 2 else 60.0)
    else:
        print(f"unknown experiment {what!r}: row0, nccl or idle", file=sys.stderr)
        return 2
    out.write_text(json.dumps(result, indent=1, sort_keys=True, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
