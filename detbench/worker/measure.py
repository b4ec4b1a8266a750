"""The pieces of the measurement passes (``detbench.worker.passes`` runs them in order), and how
a failure reads (``classify``: a status and a message, never an exception).

An error that leaves the CUDA context unusable (an illegal address, a device-side assert) is
reported to the worker as ``device_lost``: the worker sends the record and exits, and a fresh
worker takes the workloads that remain.
"""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from detbench.core.modes import Mode
from detbench.core.seeding import seed_workload
from detbench.core.settings import MODE_FLAGS
from detbench.core.workload import Context, Unsupported, Workload
from detbench.store import record
from detbench.store.schema import Status
from detbench.worker import invariance
from detbench.worker.applied import WorkerSettings, changed, columns, differ, read_all
from detbench.worker.flops import count_flops
from detbench.worker.memory import PeakWatch

UNSUPPORTED_MARKERS = (
    "does not have a deterministic implementation",
    # torch's refusal of cuBLAS under deterministic algorithms without CUBLAS_WORKSPACE_CONFIG
    "because it uses CuBLAS",
    # an SDPA backend the device (or these inputs) cannot use, under sdpa_backend=...
    "No viable backend for scaled_dot_product_attention",
    "No available kernel",
)


class SettingUnsupported(Unsupported):
    """A workload that cannot run under its mode's settings: recorded ``unsupported``, unbuilt."""


#: torch's CPU allocator reports a failed allocation as a RuntimeError with these words.
CPU_OOM_MARKERS = ("DefaultCPUAllocator: can't allocate memory", "DefaultCPUAllocator: not enough")
#: Out of memory inside a CUDA library: a RuntimeError, not torch's OutOfMemoryError.
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
AFTER_FINGERPRINT = ("count", "invariance")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def classify(exc: BaseException) -> tuple[str, str]:
    """(status, message) for an exception raised by a workload."""
    text = f"{type(exc).__name__}: {exc}".strip()
    if isinstance(exc, Unsupported):  # the settings', or the workload's own (a library)
        return Status.UNSUPPORTED, str(exc)
    if isinstance(exc, torch.cuda.OutOfMemoryError | MemoryError):
        return Status.OOM, text
    said = str(exc)
    cuda_oom = "out of memory" in said and ("CUDA" in said or "cuda" in said)
    oom = cuda_oom or any(m in said for m in (*CPU_OOM_MARKERS, *LIBRARY_OOM_MARKERS))
    if isinstance(exc, RuntimeError) and oom:
        return Status.OOM, text
    if isinstance(exc, RuntimeError) and any(m in str(exc) for m in UNSUPPORTED_MARKERS):
        return Status.UNSUPPORTED, str(exc).strip()
    return Status.ERROR, text


def is_device_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a CUDA error, not an out-of-memory, that may break the context."""
    if classify(exc)[0] != Status.ERROR:
        return False
    if ACCELERATOR_ERROR is not None and isinstance(exc, ACCELERATOR_ERROR):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc) for m in DEVICE_ERROR_MARKERS)


def reference_path(directory: Path, key: str, mode: str) -> Path:
    return directory / (key.replace("/", "__") + "@" + mode + ".npz")


def count_pass(w: Workload, ctx: Context, step: Any, rec: dict[str, Any], count: bool) -> None:
    """FLOPs per step: declared, else counted over one step. The counter leans on torch
    internals: its failure costs the figure (with a note); the step's own oom or CUDA error is
    raised. ``count`` False (later replicates): the runner copies the first replicate's count."""
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
        if classify(exc)[0] == Status.OOM or is_device_error(exc):
            raise
        rec["flops_per_step"] = None
        rec["flops_source"] = None
        rec["flops_note"] = f"FLOP count failed: {type(exc).__name__}: {exc}"


def build_step(w: Workload, ctx: Context) -> Any:
    """``w``'s step as every pass builds it: seeded, its factory run and checked, synchronised."""
    seed_workload(w.seeding, ctx.seed)
    step = w.factory(ctx)
    if not callable(step):
        raise TypeError(f"workload factory must return a step callable, got {type(step)}")
    sync(ctx.device)
    return step


def with_settings(step: Any, mode: Mode, device: torch.device) -> Any:
    """``step`` as the mode's workload settings run it: each call under ``torch.autocast``
    (entered per step, as a training loop does: its cache of cast weights lives for one region),
    then through ``torch.compile``."""
    given = mode.overrides
    out = step
    autocast = given.get("autocast", "off")
    if autocast != "off":
        dtype = torch.float16 if autocast == "fp16" else torch.bfloat16

        def out() -> Any:
            with torch.autocast(device.type, dtype=dtype):
                return step()

    return torch.compile(out) if given.get("execution", "eager") == "compile" else out


def compile_stats() -> dict[str, Any] | None:
    """Dynamo's counters for this worker's compilations so far (graphs, graph breaks)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return None
    return {
        "unique_graphs": int(counters["stats"].get("unique_graphs", 0)),
        "graph_breaks": int(sum(counters["graph_break"].values())),
    }


def read_back(rec: dict[str, Any], ws: WorkerSettings, when: str) -> None:
    """Compare the flags and settings now with what the worker applied: a change the workload
    made goes to ``settings_changes`` and ``settings_changed``, and the record's columns take
    the values read now, so they say what the steps last ran under (torch's own changes too)."""
    now = read_all()
    # Also what the workload changed at the build and has put back since.
    moved = set(differ(ws.applied, now)) | set(rec.get("settings_changes", ()))
    if not moved:
        return
    for name in changed(ws.applied, now):
        changes = rec.setdefault("settings_changes", {})
        changes.setdefault(name, {"applied": ws.applied[name]})[when] = now[name]
        if name not in rec["settings_changed"]:
            rec["settings_changed"].append(name)
    rec.update({k: now[k] for k in moved if k in MODE_FLAGS})
    rec.update({k: v for k, v in columns(now, ws.mode).items() if k in moved})


def invariance_pass(w: Workload, ctx: Context, mode: Mode, rec: dict[str, Any]) -> None:
    """The batch-invariance verdict (``worker.invariance``) into ``rec``. A failure there (an
    out-of-memory at the largest size, outputs that cannot be compared) is ``batch_note`` and
    leaves the record's own verdict alone; a CUDA error is the workload's."""
    assert w.batch_sizes is not None

    def build(b: int) -> Any:
        return with_settings(w.factory(replace(ctx, batch_size=b)), mode, ctx.device)

    reseed = functools.partial(seed_workload, w.seeding, ctx.seed)
    try:
        rec.update(invariance.check(build, w.batch_sizes, reseed).to_record())
    except invariance.InvarianceError as exc:
        rec["batch_note"] = str(exc)
    except Exception as exc:
        if is_device_error(exc):
            raise
        status, message = classify(exc)
        rec["batch_note"] = f"{status}: {message}"


def context(w: Workload, job: Mapping[str, Any]) -> Context:
    """The workload's context as the job gives it: its device, profile and seed."""
    device, seed = torch.device(job["device"]), int(job["seed"])
    return Context(device=device, profile=job["profile"], seed=seed, batch_size=w.batch_size)


def new_record(
    w: Workload, ctx: Context, job: Mapping[str, Any], mode: Mode, ws: WorkerSettings, threads: int
) -> dict[str, Any]:
    """``w``'s record before its passes, with every setting as the worker read it back."""
    method = job.get("fingerprint") or "device"
    return record.measured(
        suite=w.suite,
        workload=w.name,
        params=w.params_for(ctx.profile),
        mode=mode,
        settings=columns(ws.applied, mode),
        replicate=int(job["replicate"]),
        seed=ctx.seed,
        device=ctx.device.type,
        profile=ctx.profile,
        num_threads=threads,
        batch_size=w.batch_size,
        # "both" fingerprints with the device digest and also with sha256, as a cross-check.
        fingerprint_method="device" if method == "both" else method,
    )


def release(mode: Mode, device: torch.device, empty_cache: bool = True) -> bool:
    """Free a dropped workload before the next is built; False where emptying CUDA's cache fails."""
    if mode.overrides.get("execution") == "compile":
        with contextlib.suppress(Exception):
            torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda" and empty_cache:
        try:
            torch.cuda.empty_cache()
        except Exception:
            return False
    return True


def build_pass(
    w: Workload, ctx: Context, ws: WorkerSettings, mode: Mode, rec: dict[str, Any]
) -> Any:
    """Build ``w``'s step, read the settings back into ``rec``, wrap it in the mode's execution."""
    reason = ws.unsupported(w)
    if reason is not None:
        raise SettingUnsupported(reason)
    step = build_step(w, ctx)
    read_back(rec, ws, "after_build")
    return with_settings(step, mode, ctx.device)


def finish_pass(rec: dict[str, Any], ws: WorkerSettings, watch: PeakWatch) -> None:
    """After the passes, whatever happened: peak memory, settings read back, the mode restored."""
    rec["peak_memory_bytes"], rec["memory"] = watch.stop()
    read_back(rec, ws, "after_steps")
    if rec["settings_changed"]:
        ws.restore()
