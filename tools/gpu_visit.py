"""Facts for issues 28 and 29 that only a GPU can give, in fresh processes (docs/gpu-session.md).

    python tools/gpu_visit.py cudnnlog DIR       # cuDNN's API log of a conv in fresh processes
    python tools/gpu_visit.py sustained OUT.json # a GEMM and a memory-bound kernel held for seconds
    python tools/gpu_visit.py watch OUT.jsonl    # who holds the GPU, every 50 ms, until killed

None of this is a detbench measurement: these are the facts its design rests on, read on the GPU
they are about, written as JSON for the development machine to read after the visit.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# The conv workloads whose verdict changed with cudnn.benchmark on the H200 (issue 28): batch,
# in, out, spatial size and kernel as in suites/conv.py's full profile.
CONVS = {
    "conv2d_resnet50_stage3_1x1": (2, 64, 1024, 256, (14, 14), 1),
    "conv3d_r3d18_stage1": (3, 8, 64, 64, (8, 56, 56), 3),
}


def conv_child(name: str, bench: bool) -> None:
    """One fresh process: the conv's forward and backward, its bits and its step time, as JSON."""
    import torch

    dims, batch, cin, cout, spatial, k = CONVS[name]
    torch.backends.cudnn.benchmark = bench
    torch.manual_seed(0)
    conv_cls = torch.nn.Conv2d if dims == 2 else torch.nn.Conv3d
    conv = conv_cls(cin, cout, k, padding=k // 2).cuda()
    x = torch.randn(batch, cin, *spatial, device="cuda", requires_grad=True)
    t0 = time.perf_counter()
    y = conv(x)
    y.backward(torch.ones_like(y))
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    digest = hashlib.sha256()
    for t in (y, x.grad, conv.weight.grad):
        assert t is not None
        digest.update(t.detach().cpu().numpy().tobytes())
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        x.grad = None
        conv(x).backward(torch.ones_like(y))
    end.record()
    torch.cuda.synchronize()
    print(
        json.dumps(
            {
                "workload": name,
                "benchmark": bench,
                "pid": os.getpid(),
                "sha256": digest.hexdigest(),
                "first_step_s": first,
                "step_ms": start.elapsed_time(end) / 20,
            }
        )
    )


def cudnnlog(out: Path) -> dict[str, Any]:
    """Each conv in fresh processes, with cuDNN's API log on (level 3: info) and without it."""
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    plan = []
    for name in CONVS:
        plan += [(name, True, True, r) for r in range(4)]
        plan += [(name, False, True, 0), (name, True, False, 0), (name, True, False, 1)]
    for name, bench, logged, rep in plan:
        tag = f"{name}-{'bench' if bench else 'nobench'}-{'log' if logged else 'nolog'}-r{rep}"
        env = dict(os.environ)
        if logged:
            env.update(CUDNN_LOGLEVEL_DBG="3", CUDNN_LOGDEST_DBG=str(out / f"{tag}.log"))
        t0 = time.perf_counter()
        p = subprocess.run(
            [sys.executable, __file__, "conv-child", name, str(int(bench))],
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
        )
        wall = time.perf_counter() - t0
        row: dict[str, Any] = {"tag": tag, "logged": logged, "wall_s": wall, "rc": p.returncode}
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        if lines:
            row.update(json.loads(lines[-1]))
        else:
            row["stderr_tail"] = p.stderr[-2000:]
        log = out / f"{tag}.log"
        row["log_bytes"] = log.stat().st_size if log.exists() else None
        runs.append(row)
        print(
            f"{tag:55} rc={p.returncode} wall={wall:5.2f}s step={row.get('step_ms', 0):7.3f}ms "
            f"sha={str(row.get('sha256'))[:12]} log={row['log_bytes']}"
        )
    import torch

    return {
        "experiment": "cudnn_api_log",
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "runs": runs,
    }


def _nvml_sample(nvml: Any, h: Any) -> dict[str, Any]:
    reasons = (
        getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    return {
        "t": time.time(),
        "sm_mhz": nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM),
        "mem_mhz": nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM),
        "power_w": nvml.nvmlDeviceGetPowerUsage(h) / 1000,
        "temp_c": nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU),
        "throttle": int(reasons(h)),
    }


def _held(fn: Any, seconds: float, nvml: Any, h: Any) -> list[dict[str, Any]]:
    """fn repeated for `seconds`, timed in blocks of 0.1 s between CUDA events, NVML beside each."""
    import torch

    blocks = []
    t_end = time.perf_counter() + seconds
    per = 1
    while time.perf_counter() < t_end:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(per):
            fn()
        b.record()
        b.synchronize()
        ms = a.elapsed_time(b) / per
        blocks.append({"ms": ms, "n": per, **_nvml_sample(nvml, h)})
        per = max(1, int(100 / max(ms, 1e-3)))
    return blocks


def sustained(out: Path) -> dict[str, Any]:
    """An 8192^3 bf16 GEMM and a 1 GiB fp32 scale, each held 12 s after 2 s idle: the burst and
    the sustained rate, with the SM clock, power and throttle reasons beside each 0.1 s block;
    then triton's do_bench (CUDA events) at the end of the hold, for the same kernels."""
    import pynvml as nvml
    import torch

    nvml.nvmlInit()
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(256 * 2**20, device="cuda")
    y = torch.empty_like(x)
    kernels = {
        "gemm_bf16_8192": lambda: torch.mm(a, b),
        "scale_fp32_1gib": lambda: torch.mul(x, 1.5, out=y),
    }
    result: dict[str, Any] = {
        "experiment": "sustained",
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "kernels": {},
    }
    for name, fn in kernels.items():
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        time.sleep(2.0)
        idle = _nvml_sample(nvml, h)
        blocks = _held(fn, 12.0, nvml, h)
        entry: dict[str, Any] = {"idle": idle, "blocks": blocks}
        try:
            from triton.testing import do_bench

            entry["do_bench_ms"] = [
                do_bench(fn, warmup=100, rep=1000, return_mode="median") for _ in range(2)
            ]
        except Exception as e:
            entry["do_bench_ms"] = f"unavailable: {e}"
        first, last = blocks[0]["ms"], sorted(bl["ms"] for bl in blocks[-20:])[10]
        print(
            f"{name}: first block {first:.4f} ms, median of the last 2 s {last:.4f} ms, "
            f"do_bench {entry['do_bench_ms']}, "
            f"SM {blocks[0]['sm_mhz']}->{blocks[-1]['sm_mhz']} MHz, "
            f"power {blocks[0]['power_w']:.0f}->{blocks[-1]['power_w']:.0f} W, "
            f"throttle {blocks[-1]['throttle']:#x}"
        )
        result["kernels"][name] = entry
    return result


def watch(out: Path) -> None:
    """The GPU's compute processes every 50 ms, one JSON line whenever the set changes, until
    SIGTERM: which processes held the GPU while each record was timed."""
    import pynvml as nvml

    nvml.nvmlInit()
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    last: object = None
    with out.open("a") as f:
        while not stop:
            procs = []
            for p in nvml.nvmlDeviceGetComputeRunningProcesses(h):
                try:
                    cmd = (
                        Path(f"/proc/{p.pid}/cmdline")
                        .read_bytes()
                        .replace(b"\0", b" ")
                        .decode()[:200]
                    )
                except OSError:
                    cmd = "?"
                procs.append({"pid": p.pid, "mib": (p.usedGpuMemory or 0) // 2**20, "cmd": cmd})
            key = sorted(p["pid"] for p in procs)
            if key != last:
                f.write(json.dumps({"t": time.time(), "procs": procs}) + "\n")
                f.flush()
                last = key
            time.sleep(0.05)


def main(argv: list[str]) -> int:
    what = argv[0]
    if what == "conv-child":
        conv_child(argv[1], bool(int(argv[2])))
        return 0
    out = Path(argv[1])
    if what == "watch":
        watch(out)
        return 0
    if what == "cudnnlog":
        result = cudnnlog(out)
        (out / "runs.json").write_text(json.dumps(result, indent=1) + "\n")
        return 0
    if what == "sustained":
        out.write_text(json.dumps(sustained(out), indent=1) + "\n")
        return 0
    print(
        f"gpu_visit.py: unknown experiment {what!r} (cudnnlog, sustained, watch)", file=sys.stderr
    )
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
