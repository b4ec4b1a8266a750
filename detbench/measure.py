"""One workload measured in a worker: build, fingerprint pass, FLOP count, timing pass, and every
outcome turned into a record (a failure is a status and a message, never an exception).

On CUDA, the last statement of a workload is a synchronisation, so an asynchronous error of its
kernels is charged to it and not to the next workload. An error that leaves the CUDA context
unusable (an illegal address, a device-side assert) is reported to the worker as ``device_lost``:
the worker sends the record and exits, and a fresh worker takes the workloads that remain.
"""

from __future__ import annotations

import gc
import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from detbench import fingerprint as fp
from detbench.devenv import fp32_precision
from detbench.flops import count_flops
from detbench.memory import PeakWatch, describe_memory, memory_figures
from detbench.modes import CUBLAS_ENV, Mode
from detbench.results import utc_now
from detbench.seeding import fresh_generators, seed_all
from detbench.timing import time_step
from detbench.workload import Context, Workload

UNSUPPORTED_MARKERS = ("does not have a deterministic implementation",)
#: torch's CPU allocator reports a failed allocation as a RuntimeError with these words.
CPU_OOM_MARKERS = ("DefaultCPUAllocator: can't allocate memory", "DefaultCPUAllocator: not enough")
#: Out of memory inside a CUDA library: raised as a RuntimeError, not as torch's
#: OutOfMemoryError, but a lack of memory all the same.
LIBRARY_OOM_MARKERS = (
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUDNN_STATUS_ALLOC_FAILED",
    "CUFFT_ALLOC_FAILED",
)
#: Words of a CUDA error that may leave the context unusable. Library statuses other than an
#: allocation failure count too: an execution failure in cuDNN or cuBLAS is usually a kernel
#: fault, and a fresh worker costs only its start-up.
DEVICE_ERROR_MARKERS = (
    "CUDA error",
    "CUDNN_STATUS_",
    "CUBLAS_STATUS_",
    "illegal memory access",
    "device-side assert",
)
#: torch >= 2.8 raises CUDA errors as ``torch.AcceleratorError`` (a RuntimeError).
ACCELERATOR_ERROR: type[BaseException] | None = getattr(torch, "AcceleratorError", None)

#: Phases after the fingerprint pass: a failure there keeps the fingerprint it completed.
AFTER_FINGERPRINT = ("count", "timing")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _is_cuda_oom_text(text: str) -> bool:
    if any(m in text for m in LIBRARY_OOM_MARKERS):
        return True
    return "out of memory" in text and ("CUDA" in text or "cuda" in text)


def classify(exc: BaseException) -> tuple[str, str]:
    """(status, message) for an exception raised by a workload."""
    text = f"{type(exc).__name__}: {exc}".strip()
    if isinstance(exc, torch.cuda.OutOfMemoryError | MemoryError):
        return "oom", text
    if isinstance(exc, RuntimeError) and any(m in str(exc) for m in CPU_OOM_MARKERS):
        return "oom", text
    if isinstance(exc, RuntimeError) and _is_cuda_oom_text(str(exc)):
        return "oom", text
    if isinstance(exc, RuntimeError) and any(m in str(exc) for m in UNSUPPORTED_MARKERS):
        return "unsupported", str(exc).strip()
    return "error", text


def is_device_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a CUDA error other than an out-of-memory, one after which the worker's
    CUDA context may be unusable (the worker then makes way for a fresh one)."""
    if classify(exc)[0] != "error":
        return False
    if ACCELERATOR_ERROR is not None and isinstance(exc, ACCELERATOR_ERROR):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc) for m in DEVICE_ERROR_MARKERS)


def reference_path(directory: Path, key: str, mode: str) -> Path:
    return directory / (key.replace("/", "__") + "@" + mode + ".npz")


def _fingerprint_pass(
    w: Workload, ctx: Context, job: dict[str, Any], mode: Mode, step: Any, rec: dict[str, Any]
) -> None:
    """Run the fingerprint steps and fill the record's fingerprint fields (all at the end, so a
    pass that fails leaves none)."""
    method = rec["fingerprint_method"]
    both = job.get("fingerprint") == "both"
    digests: list[str] = []
    sha_digests: list[str] = []
    losses: list[float] = []
    outputs: Any = None
    for _ in range(w.steps(ctx, int(job["fingerprint_steps"]))):
        outputs = list(step())
        digests.append(fp.step_digest(outputs, method))
        if both:
            sha_digests.append(fp.step_digest(outputs, "sha256"))
        if w.loss_output is not None:
            losses.append(float(outputs[w.loss_output].item()))
    rec["step_fingerprints"] = digests
    if w.loss_output is not None:
        rec["losses"] = losses
    rec["fingerprint"] = fp.combine(digests)
    if both:
        rec["step_fingerprints_sha256"] = sha_digests
        rec["fingerprint_sha256"] = fp.combine(sha_digests)
    ref = reference_path(Path(job["reference_dir"]), w.key, mode.name)
    replicate = int(job["replicate"])
    diff = fp.diff_against_reference(ref, rec["fingerprint"], outputs, replicate)
    if diff is None:  # the first replicate to get here: the others compare with it
        fp.save_reference(ref, rec["fingerprint"], outputs, replicate)
        rec["diff_reference"] = "self"
    else:
        rec["max_abs_diff"] = diff.pop("max_abs_diff")
        rec["diff_reference"] = diff


def _count(w: Workload, ctx: Context, step: Any, rec: dict[str, Any], count: bool) -> None:
    """FLOPs per step: declared by the workload, else counted over one step. The counter leans
    on torch internals; its failure costs the FLOP figure (with a note), never the record. An
    out-of-memory or CUDA error of the step itself is the workload's and is raised.

    ``count`` False (replicates after the first): the same ops run in every replicate of a mode,
    so the runner copies the first replicate's count (``flops_source`` "counted"), and this
    worker spares the extra step under the dispatch mode."""
    declared = w.declared_flops(ctx)
    rec["flops_source"] = "declared" if declared is not None else "counted"
    if declared is not None:
        rec["flops_per_step"] = declared
        return
    if not count:
        rec["flops_per_step"] = None
        rec["flops_pending"] = True
        return
    try:
        rec["flops_per_step"] = count_flops(step)
    except Exception as exc:
        if classify(exc)[0] == "oom" or is_device_error(exc):
            raise
        rec["flops_per_step"] = None
        rec["flops_source"] = None
        rec["flops_note"] = f"FLOP count failed: {type(exc).__name__}: {exc}"


def run_workload(
    w: Workload,
    job: dict[str, Any],
    mode: Mode,
    notify: Callable[[str], None] | None = None,
) -> tuple[dict[str, Any], bool]:
    """Both passes for one workload: (record, device_lost). Every outcome is a record, never an
    exception. ``notify("timing")`` is called right before the timing pass and
    ``notify("timed")`` right after it, also when it fails. ``device_lost``: the workload failed
    with a CUDA error after which this process's CUDA context cannot be trusted."""
    device = torch.device(job["device"])
    seed = int(job["seed"])
    ctx = Context(device=device, profile=job["profile"], seed=seed)
    method = job.get("fingerprint") or "device"
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
        # "both" fingerprints with the device digest and also with sha256, as a cross-check.
        "fingerprint_method": "device" if method == "both" else method,
        "fingerprint": None,
        "step_fingerprints": None,
        "max_abs_diff": None,
        "seconds_per_step": None,
        "items_per_second": None,
        "timing": None,
        "peak_memory_bytes": None,
        "memory": None,
        "precision": None,
        "phases": {},
        "utc": None,
    }
    phases: dict[str, float] = rec["phases"]
    device_lost = False
    oom_figures: dict[str, Any] | None = None
    watch = PeakWatch(device)
    phase = "build"
    t0 = time.perf_counter()
    step: Any = None
    try:
        watch.start()
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
        _fingerprint_pass(w, ctx, job, mode, step, rec)
        phases["fingerprint"] = time.perf_counter() - t0

        phase = "count"
        t0 = time.perf_counter()
        _count(w, ctx, step, rec, bool(job.get("count_flops", True)))
        phases["count"] = time.perf_counter() - t0

        phase = "timing"
        if notify is not None:
            notify("timing")  # may wait while the runner pauses its other processes
        t0 = time.perf_counter()
        try:
            timing = time_step(
                step,
                warmup_steps=int(job["warmup_steps"]),
                budget=float(job["budget"]),
                target_rel=float(job["target_rel"]),
                min_samples=int(job["min_samples"]),
                device=device,
            )
        finally:
            if notify is not None:
                notify("timed")
        phases["timing"] = time.perf_counter() - t0
        rec["timing"] = timing.to_json()
        rec["seconds_per_step"] = timing.median
        rec["items_per_second"] = rec["items_per_step"] / timing.median
        for unit in ("flops", "bytes"):
            per_step = rec[f"{unit}_per_step"]
            rec[f"{unit}_per_second"] = per_step / timing.median if per_step else None
        # Last: an asynchronous error of this workload's kernels surfaces here, charged to it.
        _sync(device)
    except Exception as exc:  # a failing workload is data, never the end of the run
        phases[phase] = time.perf_counter() - t0  # t0: when the failing phase began
        status, message = classify(exc)
        device_lost = is_device_error(exc)
        if device.type == "cuda" and not device_lost:
            try:  # an error that broke the context shows here, if it did not say so itself
                torch.cuda.synchronize(device)
            except Exception as sync_exc:
                device_lost = True
                message += f" [then the device failed: {type(sync_exc).__name__}: {sync_exc}]"
        if status == "oom":
            oom_figures = memory_figures(device)
            message += f" [{describe_memory(oom_figures)}]"
        rec.update(status=status, message=f"{phase}: {message}")
        rec["traceback"] = traceback.format_exc(limit=-8)
        if phase not in AFTER_FINGERPRINT:  # a pass that failed has no fingerprint
            rec["fingerprint"] = rec["step_fingerprints"] = None
        rec["timing"] = rec["seconds_per_step"] = rec["items_per_second"] = None
        rec["flops_per_second"] = rec["bytes_per_second"] = None
        rec["device_lost"] = device_lost
    finally:
        rec["peak_memory_bytes"], rec["memory"] = watch.stop()
        # Free this workload's tensors (reference cycles included) before the next is built.
        t0 = time.perf_counter()
        step = None
        gc.collect()
        if device.type == "cuda" and not device_lost:
            try:
                torch.cuda.empty_cache()
            except Exception:  # the context failed after all: the next workload will say so
                device_lost = True
        phases["cleanup"] = time.perf_counter() - t0
    if oom_figures is not None:  # an oom's figures join the record's peaks under ``memory``
        rec["memory"] = {**(rec["memory"] or {}), **oom_figures}
    rec["precision"] = fp32_precision(device)  # torch's flags as the workload left them
    rec["utc"] = utc_now()
    return rec, device_lost
