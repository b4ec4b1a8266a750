"""What a worker reports about its device: torch's threads, GPU, cuDNN, precision settings."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import torch

from detbench.modes import CUBLAS_ENV


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
