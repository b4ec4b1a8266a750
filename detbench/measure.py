"""One workload measured in a worker: build, fingerprint pass, FLOP count, timing pass, and every
outcome turned into a record (a failure is a status and a message, never an exception)."""

from __future__ import annotations

import gc
import os
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from detbench import fingerprint as fp
from detbench.flops import count_flops
from detbench.memory import describe_memory, memory_figures
from detbench.modes import CUBLAS_ENV, Mode
from detbench.results import utc_now
from detbench.seeding import fresh_generators, seed_all
from detbench.timing import time_step
from detbench.workload import Context, Workload

UNSUPPORTED_MARKERS = ("does not have a deterministic implementation",)
#: torch's CPU allocator reports a failed allocation as a RuntimeError with these words.
CPU_OOM_MARKERS = ("DefaultCPUAllocator: can't allocate memory", "DefaultCPUAllocator: not enough")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def classify(exc: BaseException) -> tuple[str, str]:
    """(status, message) for an exception raised by a workload."""
    text = f"{type(exc).__name__}: {exc}".strip()
    if isinstance(exc, torch.cuda.OutOfMemoryError | MemoryError):
        return "oom", text
    if isinstance(exc, RuntimeError) and any(m in str(exc) for m in CPU_OOM_MARKERS):
        return "oom", text
    if isinstance(exc, RuntimeError) and any(m in str(exc) for m in UNSUPPORTED_MARKERS):
        return "unsupported", str(exc).strip()
    return "error", text


def reference_path(directory: Path, key: str, mode: str) -> Path:
    return directory / (key.replace("/", "__") + "@" + mode + ".npz")


def run_workload(w: Workload, job: dict[str, Any], mode: Mode) -> dict[str, Any]:
    """Both passes for one workload; every outcome is a record, never an exception."""
    device = torch.device(job["device"])
    seed = int(job["seed"])
    ctx = Context(device=device, profile=job["profile"], seed=seed)
    rec: dict[str, Any] = {
        "suite": w.suite,
        "workload": w.name,
        "params": w.params_for(ctx.profile),
        "mode": mode.name,
        "benchmark": mode.benchmark,
        "cudnn_deterministic": mode.cudnn_deterministic,
        "deterministic_algorithms": mode.deterministic_algorithms,
        "cudnn_enabled": mode.cudnn_enabled,
        "replicate": job["replicate"],
        "seed": seed,
        "device": device.type,
        "profile": ctx.profile,
        "num_threads": torch.get_num_threads(),
        CUBLAS_ENV.lower(): os.environ.get(CUBLAS_ENV),
        "status": "ok",
        "message": None,
        "fingerprint": None,
        "step_fingerprints": None,
        "max_abs_diff": None,
        "seconds_per_step": None,
        "items_per_second": None,
        "timing": None,
        "phases": {},
        "utc": None,
    }
    phases: dict[str, float] = rec["phases"]
    phase = "build"
    t0 = time.perf_counter()
    try:
        rec["items_per_step"] = w.items(ctx)
        rec["bytes_per_step"] = w.bytes(ctx)
        rec["seeding"] = w.seeding
        if w.seeding == "recipe":
            fresh_generators()
        else:
            seed_all(seed)
        step = w.factory(ctx)
        if not callable(step):
            raise TypeError(f"workload factory must return a step callable, got {type(step)}")
        _sync(device)
        phases["build"] = time.perf_counter() - t0

        phase = "fingerprint"
        t0 = time.perf_counter()
        digests = []
        losses: list[float] = []
        outputs: Any = None
        for _ in range(w.steps(ctx, int(job["fingerprint_steps"]))):
            outputs = list(step())
            digests.append(fp.step_digest(outputs))
            if w.loss_output is not None:
                losses.append(float(outputs[w.loss_output].item()))
        rec["step_fingerprints"] = digests
        if w.loss_output is not None:
            rec["losses"] = losses
        rec["fingerprint"] = fp.combine(digests)
        ref = reference_path(Path(job["reference_dir"]), w.key, mode.name)
        replicate = int(job["replicate"])
        diff = fp.diff_against_reference(ref, rec["fingerprint"], outputs, replicate)
        if diff is None:  # the first replicate to get here: the others compare with it
            fp.save_reference(ref, rec["fingerprint"], outputs, replicate)
            rec["diff_reference"] = "self"
        else:
            rec["max_abs_diff"] = diff.pop("max_abs_diff")
            rec["diff_reference"] = diff
        del outputs
        phases["fingerprint"] = time.perf_counter() - t0

        phase = "count"
        t0 = time.perf_counter()
        declared = w.declared_flops(ctx)
        rec["flops_source"] = "declared" if declared is not None else "counted"
        rec["flops_per_step"] = declared if declared is not None else count_flops(step)
        phases["count"] = time.perf_counter() - t0

        phase = "timing"
        t0 = time.perf_counter()
        timing = time_step(
            step, warmup_steps=int(job["warmup_steps"]), min_run_time=float(job["min_run_time"])
        )
        phases["timing"] = time.perf_counter() - t0
        rec["timing"] = timing.to_json()
        rec["seconds_per_step"] = timing.median
        rec["items_per_second"] = rec["items_per_step"] / timing.median
        for unit in ("flops", "bytes"):
            per_step = rec[f"{unit}_per_step"]
            rec[f"{unit}_per_second"] = per_step / timing.median if per_step else None
    except Exception as exc:  # a failing workload is data, never the end of the run
        phases[phase] = time.perf_counter() - t0
        status, message = classify(exc)
        if status == "oom":
            rec["memory"] = memory_figures(device)
            message += f" [{describe_memory(rec['memory'])}]"
        rec.update(status=status, message=f"{phase}: {message}")
        rec["traceback"] = traceback.format_exc(limit=-8)
        rec["fingerprint"] = rec["timing"] = None
        rec["seconds_per_step"] = rec["items_per_second"] = None
    finally:
        # Free this workload's tensors (reference cycles included) before the next is built.
        t0 = time.perf_counter()
        step = None  # type: ignore[assignment]
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        phases["cleanup"] = time.perf_counter() - t0
    rec["utc"] = utc_now()
    return rec
