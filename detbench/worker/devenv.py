"""What a worker reports about its device: torch's threads, GPU, cuDNN, cuBLAS, precision settings,
and the environment variables that change what the GPU does. A probe missing on some torch
release (2.2 to 2.13), driver or host reads None: the facts describe a run, never stop one.
"""

from __future__ import annotations

import ctypes
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from detbench.core.modes import CUBLAS_ENV
from detbench.store import gpustate

#: Environment variables that change what the GPU computes or how fast, as the worker sees them.
#: ``NVIDIA_TF32_OVERRIDE=0`` turns TF32 off in every NVIDIA library whatever torch's flags say.
GPU_ENV_VARS = (
    "CUDA_VISIBLE_DEVICES",
    "PYTORCH_CUDA_ALLOC_CONF",
    "NVIDIA_TF32_OVERRIDE",
    "CUDA_MODULE_LOADING",
    "CUDA_LAUNCH_BLOCKING",
    # Chooses the CPU kernels torch dispatches to ("default", "avx2", "avx512"): other bits.
    "ATEN_CPU_CAPABILITY",
)


def precision_settings() -> dict[str, Any]:
    """TF32 and related settings as torch has them (detbench never changes them)."""
    out: dict[str, Any] = {}
    getters: dict[str, Callable[[], Any]] = {
        "float32_matmul_precision": torch.get_float32_matmul_precision,
        "cuda_matmul_allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
        "cuda_matmul_fp32_precision": lambda: torch.backends.cuda.matmul.fp32_precision,
        "cudnn_fp32_precision": lambda: torch.backends.cudnn.fp32_precision,
        "cudnn_conv_fp32_precision": lambda: torch.backends.cudnn.conv.fp32_precision,  # type: ignore[attr-defined]
        "cudnn_rnn_fp32_precision": lambda: torch.backends.cudnn.rnn.fp32_precision,  # type: ignore[attr-defined]
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


def _new_api(*getters: Callable[[], Any]) -> str | None:
    """The first of torch 2.9+'s ``fp32_precision`` settings set to "tf32" or "ieee", else None."""
    for get in getters:
        try:
            value = str(get())
        except (AttributeError, RuntimeError):
            continue
        if value in ("tf32", "ieee"):
            return value
    return None


def _legacy(get: Callable[[], Any]) -> bool | None:
    try:
        return bool(get())
    except (AttributeError, RuntimeError):  # 2.9+ refuses to read a mix of old and new API
        return None


def fp32_precision(
    device: torch.device,
    *,
    cudnn_enabled: bool | None = None,
    tf32_hardware: bool | None = None,
    environ: dict[str, str] | None = None,
) -> dict[str, str]:
    """What fp32 matmuls and convolutions run in on ``device`` with torch's flags as they are now:
    ``{"matmul_fp32": "tf32" | "ieee", "conv_fp32": "tf32" | "ieee" | "n/a"}``.

    With cuDNN disabled, torch's native convolutions are cuBLAS GEMMs: they follow the matmul
    setting. Both are "ieee" before compute capability 8.0 or with ``NVIDIA_TF32_OVERRIDE=0``.
    ``cudnn_enabled``, ``tf32_hardware`` and ``environ`` default to the process's own state;
    tests pass them to reach the CUDA logic on a CPU.
    """
    if device.type == "cpu":
        return {"matmul_fp32": "ieee", "conv_fp32": "ieee"}
    if device.type != "cuda":
        return {"matmul_fp32": "n/a", "conv_fp32": "n/a"}
    env = os.environ if environ is None else environ
    if tf32_hardware is None:
        try:
            tf32_hardware = torch.cuda.get_device_capability(device)[0] >= 8
        except (AssertionError, RuntimeError):
            tf32_hardware = True  # unknown: report what the flags ask for
    if not tf32_hardware or env.get("NVIDIA_TF32_OVERRIDE") == "0":
        return {"matmul_fp32": "ieee", "conv_fp32": "ieee"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the old TF32 flags warn about their successors
        matmul = _new_api(
            lambda: torch.backends.cuda.matmul.fp32_precision,
            lambda: torch.backends.fp32_precision,  # type: ignore[attr-defined]
        )
        if matmul is None:
            allow = _legacy(lambda: torch.backends.cuda.matmul.allow_tf32)
            high = torch.get_float32_matmul_precision() in ("high", "medium")
            matmul = "tf32" if (allow or high) else "ieee"
        if cudnn_enabled is None:
            cudnn_enabled = bool(torch.backends.cudnn.enabled)
        if not cudnn_enabled:
            return {"matmul_fp32": matmul, "conv_fp32": matmul}
        conv = _new_api(
            lambda: torch.backends.cudnn.conv.fp32_precision,  # type: ignore[attr-defined]
            lambda: torch.backends.cudnn.fp32_precision,
            lambda: torch.backends.fp32_precision,  # type: ignore[attr-defined]
        )
        if conv is None:
            allow = _legacy(lambda: torch.backends.cudnn.allow_tf32)
            conv = "ieee" if allow is False else "tf32"  # torch's default: True
    return {"matmul_fp32": matmul, "conv_fp32": conv}


def cublas_version() -> str | None:
    """The loaded cuBLAS's version (``cublasGetProperty``), else its wheel's; None if neither."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        maps = ""
    paths = sorted({line.split()[-1] for line in maps.splitlines() if "libcublas.so" in line})
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
            parts = []
            for prop in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
                value = ctypes.c_int()
                if lib.cublasGetProperty(prop, ctypes.byref(value)) != 0:
                    raise OSError("cublasGetProperty failed")
                parts.append(str(value.value))
            return ".".join(parts)
        except (OSError, AttributeError):
            continue
    from importlib import metadata

    for dist in ("nvidia-cublas-cu12", "nvidia-cublas-cu13", "nvidia-cublas", "nvidia-cublas-cu11"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def _mig_mode(uuid: str | None) -> str | None:
    """The MIG mode ("Enabled"/"Disabled") of the GPU with this UUID, from NVML or nvidia-smi."""
    if uuid is None:
        return None
    gpus = gpustate.snapshot().get("gpus") or []
    for gpu in gpus:
        if gpu.get("uuid") and str(gpu["uuid"]).removeprefix("GPU-") == uuid.removeprefix("GPU-"):
            mode = gpu.get("mig_mode")
            return None if mode is None else str(mode)
    # CUDA names a MIG instance by the instance's own UUID, which no physical GPU has: a device
    # that matches none while a GPU of the host has MIG on is such an instance.
    if any(gpu.get("mig_mode") == "Enabled" for gpu in gpus):
        return "Enabled"
    return None


def _uuid_text(uuid: Any) -> str | None:
    """torch's device UUID in NVML's form ("GPU-..."), as ``gpustate.snapshot()`` has it."""
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith(("GPU-", "MIG-")) else "GPU-" + text


def cpu_capability() -> str:
    """The CPU instruction set torch's kernels were chosen for (other bits under another)."""
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except (AttributeError, RuntimeError) as exc:
        return f"unsupported: {type(exc).__name__}: {exc}"


def device_env(device: torch.device) -> dict[str, Any]:
    env: dict[str, Any] = {
        "device": device.type,
        "num_threads": torch.get_num_threads(),
        "num_interop_threads": torch.get_num_interop_threads(),
        "cudnn_version": torch.backends.cudnn.version() if torch.cuda.is_available() else None,
        "cuda_build": torch.version.cuda,
        CUBLAS_ENV: os.environ.get(CUBLAS_ENV),
        **{name: os.environ.get(name) for name in GPU_ENV_VARS},
        "precision": precision_settings(),
        "fp32": fp32_precision(device),
        "cpu_capability": cpu_capability(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        uuid = getattr(props, "uuid", None)  # torch >= 2.1
        env.update(
            gpu_name=props.name,
            gpu_capability=f"{props.major}.{props.minor}",
            gpu_memory_bytes=props.total_memory,
            gpu_count=torch.cuda.device_count(),
            # cuBLAS promises the same bits run to run only on GPUs with the same SM count.
            sm_count=props.multi_processor_count,
            gpu_uuid=_uuid_text(uuid),
            cublas_version=cublas_version(),
        )
        try:
            env["mig_mode"] = _mig_mode(env["gpu_uuid"])
        except Exception as exc:  # a fact we could not get, never a failed worker
            env["mig_mode"] = None
            env["mig_mode_error"] = f"{type(exc).__name__}: {exc}"
    return env
