"""One workload's record, measured in this process without workers: memory, precision, what a
failure keeps, how an exception becomes a status, and when the CUDA context is given up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from detbench.core.modes import get_mode
from detbench.core.seeding import seed_all
from detbench.core.workload import Context, Workload, builtin_suite_files, load_file
from detbench.worker.devenv import fp32_precision
from detbench.worker.flops import count_flops
from detbench.worker.measure import classify, is_device_error
from detbench.worker.passes import run_workload

from .conftest import ROOT, requires_cuda

MIB = 1 << 20
FINGERPRINT_STEPS = 2


def _job(tmp_path: Path, device: str = "cpu", **extra: Any) -> dict[str, Any]:
    return {
        "device": device,
        "seed": 0,
        "profile": "quick",
        "replicate": 0,
        "fingerprint_steps": FINGERPRINT_STEPS,
        "reference_dir": str(tmp_path / "reference"),
        "warmup_steps": 1,
        "budget": 0.02,
        "target_rel": 0.03,
        "min_samples": 5,
        "fingerprint": "device",
        **extra,
    }


def _workload(factory: Callable[[Context], Any], name: str = "w", **kw: Any) -> Workload:
    return Workload(suite="t", name=name, factory=factory, items_per_step=1, **kw)


def _run(w: Workload, tmp_path: Path, **extra: Any) -> tuple[dict[str, Any], bool]:
    return run_workload(w, _job(tmp_path, **extra), get_mode("default"))


def _small(ctx: Context) -> Callable[[], list[torch.Tensor]]:
    x = torch.arange(64.0, device=ctx.device)
    return lambda: [torch.cumsum(x * 2, 0)]


class CallCounter:
    """A step that works for ``works`` calls, then raises ``error``: a failure that comes only
    after the fingerprint pass."""

    def __init__(self, works: int, error: Exception) -> None:
        self.calls = 0
        self.works = works
        self.error = error

    def factory(self, ctx: Context) -> Callable[[], list[torch.Tensor]]:
        x = torch.arange(8.0, device=ctx.device)

        def step() -> list[torch.Tensor]:
            self.calls += 1
            if self.calls > self.works:
                raise self.error
            return [x.sum().reshape(1), x * 3]

        return step


# --- memory and precision on every record ------------------------------------------------------


def test_an_ok_record_has_its_memory_and_precision(tmp_path: Path) -> None:
    rec, lost = _run(_workload(_holding(32 * MIB)), tmp_path)  # 32 MiB touched in its build
    assert rec["status"] == "ok" and not lost
    memory = rec["memory"]
    assert set(memory) >= {"rss_before_bytes", "peak_rss_bytes", "rss_growth_bytes"}
    assert rec["peak_memory_bytes"] == memory["rss_growth_bytes"]
    if memory["peak_reset"]:  # Linux: the workload's own peak above the RSS it started from
        growth = memory["peak_rss_bytes"] - memory["rss_before_bytes"]
        assert memory["rss_growth_bytes"] == growth >= 30 * MIB, memory
    assert memory["peak_rss_bytes"] > 10 * MIB  # torch is loaded: tens of MB
    assert rec["precision"] == {"matmul_fp32": "ieee", "conv_fp32": "ieee"}
    assert rec["fingerprint_method"] == "device"
    # The verdict pass times nothing: the paired phase times the step beside the other modes.
    assert rec["timing"] is None and rec["timing_design"] == "paired"


HEAP_REUSE = """
import ctypes, json, torch
from detbench.worker.memory import PeakWatch
libc = ctypes.CDLL(None)
libc.mallopt(-3, 512 << 20)  # M_MMAP_THRESHOLD: large blocks come from the heap
libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD: free() gives nothing back by itself
earlier = torch.ones(96 << 20, dtype=torch.uint8)  # an earlier workload's memory
kept = torch.ones(1 << 20, dtype=torch.uint8)  # above it in the heap: the heap cannot shrink
del earlier  # freed, its pages still resident
watch = PeakWatch(torch.device("cpu"))
watch.start()
block = torch.ones(32 << 20, dtype=torch.uint8)  # this workload's 32 MiB, in the freed pages
print(json.dumps(watch.stop()[1]))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux's clear_refs")
def test_memory_an_earlier_workload_freed_counts_as_the_next_ones_own() -> None:
    """A worker's C heap keeps what an earlier workload freed, resident; the next workload that
    reuses it must still show its own growth (the watch gives free pages back first), not 0. In a
    fresh process: the allocator's thresholds are set there, where no other test shares them."""
    if not hasattr(__import__("ctypes").CDLL(None), "malloc_trim"):
        pytest.skip("the C library has no malloc_trim (not glibc)")
    proc = subprocess.run(
        [sys.executable, "-c", HEAP_REUSE], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    memory = json.loads(proc.stdout)
    assert memory["peak_reset"] and memory["rss_growth_bytes"] >= 30 * MIB, memory


def test_a_failed_record_has_its_memory_too(tmp_path: Path) -> None:
    def factory(ctx: Context) -> Callable[[], list[torch.Tensor]]:
        def step() -> list[torch.Tensor]:
            raise KeyError("no such layer: 'fc3'")

        return step

    rec, lost = _run(_workload(factory), tmp_path)
    assert rec["status"] == "error" and not lost
    assert rec["message"].startswith("fingerprint: KeyError")
    assert rec["peak_memory_bytes"] is not None and rec["memory"]["peak_rss_bytes"] > 0
    assert rec["precision"] == {"matmul_fp32": "ieee", "conv_fp32": "ieee"}


def _holding(nbytes: int) -> Callable[[Context], Any]:
    def factory(ctx: Context) -> Callable[[], list[torch.Tensor]]:
        # ones, not empty: the pages must be touched to be resident (RSS) on a CPU.
        block = torch.ones(nbytes, dtype=torch.uint8, device=ctx.device)
        return lambda: [block[:16].clone()]

    return factory


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux's clear_refs")
def test_cpu_peak_is_the_workloads_own(tmp_path: Path) -> None:
    big, _ = _run(_workload(_holding(192 * MIB), "big"), tmp_path)
    small, _ = _run(_workload(_holding(48 * MIB), "small"), tmp_path)
    assert big["memory"]["peak_reset"] and small["memory"]["peak_reset"]
    assert big["peak_memory_bytes"] >= 180 * MIB
    # Not the 192 MiB of the workload before it: the peak was reset when this one started.
    assert 44 * MIB <= small["peak_memory_bytes"] <= 100 * MIB, small["memory"]


# --- what a failure keeps ----------------------------------------------------------------------


def _fails_under_a_dispatch_mode(error: Exception) -> Callable[[Context], Any]:
    """A step that works, except under a Python dispatch mode (the FLOP counter), as an op
    without the counter's support would."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    def factory(ctx: Context) -> Callable[[], list[torch.Tensor]]:
        x = torch.ones(4, 4, device=ctx.device)

        def step() -> list[torch.Tensor]:
            y = x @ x
            if _get_current_dispatch_mode() is not None:
                raise error
            return [y]

        return step

    return factory


def test_a_failed_flop_count_costs_the_figure_not_the_record(tmp_path: Path) -> None:
    w = _workload(_fails_under_a_dispatch_mode(NotImplementedError("no formula for my_op")))
    rec, _ = _run(w, tmp_path)
    assert rec["status"] == "ok", rec["message"]
    assert rec["flops_per_step"] is None
    assert rec["flops_note"] == "FLOP count failed: NotImplementedError: no formula for my_op"


def test_an_oom_while_counting_is_the_workloads(tmp_path: Path) -> None:
    w = _workload(_fails_under_a_dispatch_mode(torch.cuda.OutOfMemoryError("CUDA out of memory")))
    rec, _ = _run(w, tmp_path)
    assert rec["status"] == "oom" and rec["message"].startswith("count: ")
    assert rec["fingerprint"] is not None  # the fingerprint pass had completed


def test_both_fingerprint_methods_in_one_record(tmp_path: Path) -> None:
    both, _ = _run(_workload(_small), tmp_path / "a", fingerprint="both")
    sha, _ = _run(_workload(_small), tmp_path / "b", fingerprint="sha256")
    device, _ = _run(_workload(_small), tmp_path / "c")
    assert both["fingerprint_method"] == "device" and sha["fingerprint_method"] == "sha256"
    assert both["fingerprint"] == device["fingerprint"] != sha["fingerprint"]
    assert both["fingerprint_sha256"] == sha["fingerprint"]
    assert both["step_fingerprints_sha256"] == sha["step_fingerprints"]


# --- how an exception becomes a status ---------------------------------------------------------

#: (exception, status, device error). The texts are those torch and the CUDA libraries raise.
CASES = [
    (RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
     "oom", False),
    (RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"), "oom", False),
    (RuntimeError("cuFFT error: CUFFT_ALLOC_FAILED"), "oom", False),
    (RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously "
                  "reported at some other API call"), "oom", False),
    (torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "oom", False),
    (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes"),
     "oom", False),
    (MemoryError(), "oom", False),
    (RuntimeError("CUDA error: an illegal memory access was encountered"), "error", True),
    (RuntimeError("CUDA error: device-side assert triggered"), "error", True),
    (RuntimeError("cuDNN error: CUDNN_STATUS_EXECUTION_FAILED"), "error", True),
    (RuntimeError("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( "
                  "handle, opa, opb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`"),
     "error", True),
    (RuntimeError("index_add_cuda_ does not have a deterministic implementation, but you set "
                  "'torch.use_deterministic_algorithms(True)'"), "unsupported", False),
    (KeyError("fc3"), "error", False),
    (RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x3 and 4x3)"), "error", False),
]  # fmt: skip
if hasattr(torch, "AcceleratorError"):  # torch >= 2.8 raises CUDA errors as this class
    CASES.append((torch.AcceleratorError("CUDA error: unspecified launch failure"), "error", True))


@pytest.mark.parametrize(("exc", "status", "device_error"), CASES)
def test_classify(exc: BaseException, status: str, device_error: bool) -> None:
    assert classify(exc)[0] == status
    assert is_device_error(exc) is device_error


def test_an_illegal_address_gives_the_device_up(tmp_path: Path) -> None:
    error = RuntimeError("CUDA error: an illegal memory access was encountered")
    rec, lost = _run(_workload(CallCounter(0, error).factory), tmp_path)
    assert lost and rec["device_lost"] is True
    assert rec["status"] == "error" and "illegal memory access" in rec["message"]
    assert rec["memory"] is not None


# --- precision: how torch's flags become "tf32" or "ieee" --------------------------------------


@pytest.fixture
def restore_tf32_flags() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        matmul = torch.get_float32_matmul_precision()
        conv = torch.backends.cudnn.allow_tf32
        yield
        torch.set_float32_matmul_precision(matmul)
        torch.backends.cudnn.allow_tf32 = conv


def test_cuda_precision_follows_torchs_flags(restore_tf32_flags: Any) -> None:
    cuda = torch.device("cuda")

    def precision(**kw: Any) -> tuple[str, str]:
        p = fp32_precision(cuda, **{"tf32_hardware": True, "environ": {}, **kw})
        return p["matmul_fp32"], p["conv_fp32"]

    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = True
    # torch's defaults: cuDNN convolutions in TF32, cuBLAS matmuls in full fp32.
    assert precision(cudnn_enabled=True) == ("ieee", "tf32")
    # cuDNN off: convolutions are native GEMMs, in the matmul's precision.
    assert precision(cudnn_enabled=False) == ("ieee", "ieee")
    assert precision(cudnn_enabled=True, environ={"NVIDIA_TF32_OVERRIDE": "0"}) == ("ieee", "ieee")
    assert precision(cudnn_enabled=True, tf32_hardware=False) == ("ieee", "ieee")
    torch.set_float32_matmul_precision("high")
    assert precision(cudnn_enabled=True) == ("tf32", "tf32")
    assert precision(cudnn_enabled=False) == ("tf32", "tf32")
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    assert precision(cudnn_enabled=True) == ("ieee", "ieee")
    assert fp32_precision(torch.device("cpu")) == {"matmul_fp32": "ieee", "conv_fp32": "ieee"}


# --- declared FLOPs of the LSTM language model -------------------------------------------------


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_lstm_language_model_flops_agree_with_torchs_counter(device: str) -> None:
    # The counter sees the LSTM as matmuls only without a fused kernel: with oneDNN off on a CPU
    # (cuDNN's counterpart), or on the meta device at full size (no arithmetic is done).
    w = {w.name: w for w in load_file(builtin_suite_files()["training"])}["lstm_language_model"]
    ctx = Context(torch.device(device), "quick" if device == "cpu" else "full", 0)
    seed_all(0)
    step = w.factory(ctx)
    declared = w.declared_flops(ctx)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # oneDNN's flags warn about Intel GPUs
        with torch.backends.mkldnn.flags(enabled=False):
            counted = count_flops(step)
    # The counter misses only the hidden-state gradient of the first time step (h0 is a
    # constant): 0.7 % at the quick size, 0.24 % at the full size.
    assert declared is not None and counted is not None
    assert 0 < (declared - counted) / counted < 0.02


def test_training_fingerprints_hold_batchnorm_statistics() -> None:
    w = {w.name: w for w in load_file(builtin_suite_files()["training"])}["resnet18_cifar"]
    suite = w.factory.__globals__  # the suite module's namespace: its model and sizes
    size = suite["RESNET"]["quick"]
    model = suite["ResNet"](size["width"], size["blocks"], classes=10)
    params, buffers = list(model.parameters()), list(model.named_buffers())
    seed_all(0)
    outputs = w.factory(Context(torch.device("cpu"), "quick", 0))()
    assert len(outputs) == 1 + len(params) + len(buffers)
    for (name, buffer), out in zip(buffers, outputs[1 + len(params) :], strict=True):
        assert out.shape == buffer.shape, name
        if name.endswith("running_mean"):  # moved from its initial zeros in one step
            assert float(out.abs().sum()) > 0, name
        if name.endswith("num_batches_tracked"):
            assert int(out) == 1, name


# --- on the GPU --------------------------------------------------------------------------------

DEVICE_ASSERT = textwrap.dedent(
    """
    import json, os, sys, torch
    from detbench.worker.passes import run_workload
    from detbench.core.modes import get_mode
    from detbench.core.workload import Workload

    def factory(ctx):
        x = torch.tensor([5.0], device=ctx.device)
        index = torch.tensor([10], device=ctx.device)
        return lambda: [x[index]]  # out of range: a device-side assert, raised asynchronously

    job = json.loads(sys.argv[1])
    w = Workload(suite="t", name="assert", factory=factory, items_per_step=1)
    torch.cuda.init()
    rec, lost = run_workload(w, job, get_mode("default"))
    print(json.dumps({"status": rec["status"], "message": rec["message"], "lost": lost}))
    sys.stdout.flush()
    os._exit(0)  # as the worker does: no teardown of a CUDA context that an assert broke
    """
)


@requires_cuda
def test_a_real_device_side_assert_gives_the_device_up(tmp_path: Path) -> None:
    # In a child process: the assert leaves its CUDA context unusable.
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", DEVICE_ASSERT, json.dumps(_job(tmp_path, "cuda"))],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["status"] == "error" and out["lost"] is True
    assert out["message"].startswith("fingerprint: ") and "CUDA" in out["message"]


@requires_cuda
def test_cuda_peak_is_the_workloads_own(tmp_path: Path) -> None:
    torch.cuda.init()
    big, _ = _run(_workload(_holding(1024 * MIB), "big"), tmp_path, device="cuda")
    small, _ = _run(_workload(_holding(256 * MIB), "small"), tmp_path, device="cuda")
    assert big["status"] == small["status"] == "ok"
    assert big["peak_memory_bytes"] >= 1024 * MIB
    # 256 MiB plus the step's few small tensors (above what other tests of this process left
    # allocated), not the 1 GiB of the workload before it.
    own = small["peak_memory_bytes"] - small["memory"]["allocated_at_start_bytes"]
    assert 256 * MIB <= own < 300 * MIB, small["memory"]
    assert small["peak_memory_bytes"] < big["peak_memory_bytes"]
    assert small["memory"]["peak_reserved_bytes"] >= small["memory"]["peak_allocated_bytes"]


@requires_cuda
def test_cuda_precision_is_what_ran(tmp_path: Path, restore_tf32_flags: Any) -> None:
    # The record says what fp32 ran in; the error of a real product against float64 says it
    # too: TF32 keeps 10 mantissa bits (relative error ~1e-4 here), IEEE fp32 23 (~1e-7).
    # "ieee" is a promise; "tf32" lets cuDNN choose a TF32 kernel, so for convolutions only
    # the promise is checked.
    device = torch.device("cuda")
    g = torch.Generator(device="cuda").manual_seed(0)
    a, b = (torch.randn(1024, 1024, device=device, generator=g) for _ in range(2))
    x = torch.randn(8, 64, 32, 32, device=device, generator=g)
    k = torch.randn(64, 64, 3, 3, device=device, generator=g)

    def rel_error(got: torch.Tensor, exact: torch.Tensor) -> float:
        return float((got.double() - exact).abs().max() / exact.abs().max())

    for matmul_precision in ("highest", "high"):
        torch.set_float32_matmul_precision(matmul_precision)
        rec, _ = _run(_workload(_small), tmp_path / matmul_precision, device="cuda")
        matmul = rel_error(a @ b, a.double() @ b.double())
        conv = rel_error(F.conv2d(x, k), F.conv2d(x.double(), k.double()))
        assert rec["precision"]["matmul_fp32"] == ("tf32" if matmul > 1e-5 else "ieee"), matmul
        if rec["precision"]["conv_fp32"] == "ieee":
            assert conv < 1e-5, conv
