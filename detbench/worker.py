"""The worker: one fresh process for one (mode, replicate), running many workloads.

Started by the runner as ``python -m detbench.worker FD`` with a JSON job on stdin. It applies the
mode before any CUDA work, then for each workload: seeds every generator, builds the workload,
runs the fingerprint pass and the timing pass, and sends one record per workload to the runner as
a JSON line on file descriptor ``FD``. Its stdout and stderr (the workloads' own prints and
warnings) go to a log file the runner chose. The runner alone writes the results file.
"""

from __future__ import annotations

import faulthandler
import gc
import json
import math
import os
import random
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

from detbench import fingerprint as fp
from detbench.modes import CUBLAS_ENV, Mode, apply, current_flags
from detbench.results import utc_now
from detbench.timing import time_step
from detbench.workload import Context, Workload, load_file, registry

UNSUPPORTED_MARKERS = ("does not have a deterministic implementation",)
#: torch's CPU allocator reports a failed allocation as a RuntimeError with these words.
CPU_OOM_MARKERS = ("DefaultCPUAllocator: can't allocate memory", "DefaultCPUAllocator: not enough")
GIB = float(1 << 30)


def seed_all(seed: int) -> None:
    """Seed python ``random``, NumPy, torch and every CUDA device identically."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def fresh_generators() -> None:
    """Put every generator in the state a fresh process starts with: seeded from OS entropy
    (python ``random`` and NumPy's global generator at import, torch at start-up), so a recipe
    that seeds nothing sees what an unseeded script sees."""
    random.seed()
    np.random.seed()
    torch.seed()
    if torch.cuda.is_available():
        torch.cuda.seed_all()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def precision_settings() -> dict[str, Any]:
    """TF32 and related settings as torch has them (detbench never changes them)."""
    out: dict[str, Any] = {}
    getters: dict[str, Callable[[], Any]] = {
        "float32_matmul_precision": torch.get_float32_matmul_precision,
        "cuda_matmul_allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
        "cuda_matmul_fp32_precision": lambda: torch.backends.cuda.matmul.fp32_precision,
        "cudnn_fp32_precision": lambda: torch.backends.cudnn.fp32_precision,
        "fill_uninitialized_memory": lambda: (
            torch.utils.deterministic.fill_uninitialized_memory  # type: ignore[attr-defined]
        ),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the old TF32 flags warn about their successors
        for key, get in getters.items():
            try:
                value = get()
            except (AttributeError, RuntimeError):
                continue
            out[key] = value if isinstance(value, (bool, int, float, str)) else str(value)
    return out


def device_env(device: torch.device) -> dict[str, Any]:
    env: dict[str, Any] = {
        "device": device.type,
        "num_threads": torch.get_num_threads(),
        "num_interop_threads": torch.get_num_interop_threads(),
        "cudnn_version": torch.backends.cudnn.version() if torch.cuda.is_available() else None,
        "cuda_runtime": torch.version.cuda,
        CUBLAS_ENV: os.environ.get(CUBLAS_ENV),
        "precision": precision_settings(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(
            gpu_name=props.name,
            gpu_capability=f"{props.major}.{props.minor}",
            gpu_memory_bytes=props.total_memory,
            gpu_count=torch.cuda.device_count(),
        )
    return env


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


def _available_bytes() -> int:
    """Memory the kernel could give without swapping (MemAvailable), else free pages."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def memory_figures(device: torch.device) -> dict[str, int]:
    """What torch and the OS say about memory right after an out-of-memory failure."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    figures = {
        "process_peak_rss_bytes": int(peak * (1 if sys.platform == "darwin" else 1024)),
        "available_bytes": _available_bytes(),
    }
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        figures.update(
            cuda_allocated_bytes=torch.cuda.memory_allocated(device),
            cuda_reserved_bytes=torch.cuda.memory_reserved(device),
            cuda_max_allocated_bytes=torch.cuda.max_memory_allocated(device),
            cuda_free_bytes=int(free),
            cuda_total_bytes=int(total),
        )
    return figures


def describe_memory(f: dict[str, int]) -> str:
    parts = []
    if "cuda_total_bytes" in f:
        parts.append(
            f"GPU: {f['cuda_allocated_bytes'] / GIB:.2f} GiB allocated and "
            f"{f['cuda_reserved_bytes'] / GIB:.2f} GiB reserved by torch (peak "
            f"{f['cuda_max_allocated_bytes'] / GIB:.2f}), {f['cuda_free_bytes'] / GIB:.2f} GiB "
            f"free of {f['cuda_total_bytes'] / GIB:.2f} GiB"
        )
    parts.append(
        f"host: worker peak RSS {f['process_peak_rss_bytes'] / GIB:.2f} GiB, "
        f"{f['available_bytes'] / GIB:.1f} GiB available"
    )
    return "; ".join(parts)


def count_flops(step: Callable[[], Any]) -> int | None:
    """Floating-point operations of one step, forward and backward, by the formulas of
    ``torch.utils.flop_counter`` (matmuls, convolutions, attention; elementwise ops count 0).
    None when it counts nothing.

    ``FlopCounterMode`` itself also attributes FLOPs to modules with backward hooks that
    ``torch.autograd.grad`` on leaf tensors rejects, so the same registry is applied here in a
    plain dispatch mode that sees every op of the step.

    Two corrections: torch's formula for ``convolution_backward`` ignores ``groups`` and counts a
    depthwise convolution's backward ~channels times too high; each gradient of a convolution
    (input, weight) costs the forward's multiply-adds, so that is what is counted for it. And the
    formulas assume dense operands: an op with a sparse argument is not counted (declare
    ``flops_per_step`` or ``bytes_per_step`` for those)."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import conv_flop_count, flop_registry

    conv_backward = torch.ops.aten.convolution_backward

    class Counter(TorchDispatchMode):
        total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            packet = func._overloadpacket
            if packet is conv_backward:
                grad_out, x, weight, *_, transposed, _, _, mask = args
                forward = conv_flop_count(x.shape, weight.shape, grad_out.shape, transposed)
                self.total += forward * (int(mask[0]) + int(mask[1]))
            elif packet in flop_registry and not any(
                isinstance(a, torch.Tensor) and a.layout != torch.strided for a in args
            ):
                self.total += int(flop_registry[packet](*args, **kwargs, out_val=out))
            return out

    with Counter() as counter:
        step()
    return counter.total or None


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


def _jsonable(obj: Any) -> Any:
    """``obj`` as strict JSON: NaN and infinities become None, unknown objects (a torch.dtype in
    a workload's params) their ``str``."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if obj is None or isinstance(obj, str | int | bool):
        return obj
    return str(obj)


def _send(out: BinaryIO, msg: dict[str, Any]) -> None:
    out.write((json.dumps(_jsonable(msg), sort_keys=True, allow_nan=False) + "\n").encode())
    out.flush()  # a buffered writer's flush writes the whole message, however large


def _die_with_runner(runner_pid: int | None) -> None:
    """Ask Linux to kill this worker when the runner dies (even by SIGKILL), so an orphan never
    goes on measuring beside the run that resumes it."""
    if runner_pid is None or not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL))
    if os.getppid() != runner_pid:  # the runner died before the request was made
        os._exit(1)


def main(argv: list[str]) -> int:
    job = json.loads(sys.stdin.read())
    _die_with_runner(job.get("runner_pid"))
    # On SIGSEGV, SIGABRT, SIGFPE or SIGBUS, Python's stack goes to the log, whose tail the
    # runner puts in the 'crashed' record: the line of the workload that crashed.
    faulthandler.enable()
    out = os.fdopen(int(argv[0]), "wb")
    mode = Mode(**job["mode"])
    apply(mode)
    flags = current_flags()
    expected = {k: getattr(mode, k) for k in flags}
    if flags != expected:
        raise RuntimeError(f"mode {mode.name} did not apply: torch reports {flags}")
    device = torch.device(job["device"])
    if device.type == "cuda":
        torch.cuda.init()
        torch.empty(1, device=device)  # create the context now: it belongs to start-up
    for source in job["sources"]:
        load_file(source)
    workloads = registry()
    # Everything alive now (torch, the suites) lives as long as the process: move it out of the
    # collector's sight, so the collection after each workload scans only that workload's objects.
    gc.freeze()
    _send(
        out,
        {
            "type": "ready",
            "startup_seconds": time.time() - float(job["launched_at"]),
            "device_env": device_env(device),
            "pid": os.getpid(),
        },
    )
    for key in job["workloads"]:
        _send(out, {"type": "start", "workload": key})
        w = workloads.get(key)
        if w is None:
            raise RuntimeError(f"workload {key} is not defined in this worker's sources")
        _send(out, {"type": "record", "record": run_workload(w, job, mode)})
    _send(out, {"type": "done"})
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    # Everything is sent: skip the interpreter's teardown of torch (about a second on a CPU),
    # which would otherwise be paid once per (mode, replicate).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
