"""NVML (nvidia-ml-py) as a worker reads it: one session per process, opened at first use and
left open, and the worker's GPU found by its UUID, since NVML numbers every GPU of the host
whatever ``CUDA_VISIBLE_DEVICES`` says. Nothing here raises or creates a CUDA context.
"""

from __future__ import annotations

import contextlib
from functools import lru_cache
from typing import Any

from detbench.store.gpustate import open_nvml

#: One try per process; the session is left open.
_module = lru_cache(maxsize=1)(open_nvml)


def device_handle(device: Any) -> tuple[Any, Any, str | None]:
    """``(nvml, handle, None)`` for a ``torch.device``, or ``(None, None, reason)``."""
    if device is None:
        return None, None, "no device was named: the timing ran on the host's clock"
    if getattr(device, "type", str(device)) != "cuda":
        return None, None, "the device is not a CUDA GPU: NVML reads NVIDIA GPUs only"
    nvml, reason = _module()
    if nvml is None:
        return None, None, reason
    try:
        import torch

        index = device.index if device.index is not None else torch.cuda.current_device()
        uuid = str(torch.cuda.get_device_properties(index).uuid)
        handle = nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    except Exception as exc:
        return None, None, f"NVML could not find this GPU ({type(exc).__name__}: {exc})"[:200]
    return nvml, handle, None


def read(get: Any, unavailable: dict[str, str], field: str) -> Any:
    """``get()``, or None with the error noted under ``unavailable[field]``."""
    try:
        return get()
    except Exception as exc:  # NVMLError_NotSupported and friends: recorded, not raised
        unavailable[field] = f"{type(exc).__name__}: {exc}"[:200]
        return None


def samples(nvml: Any, handle: Any, kind: str, since_us: int, until_us: int) -> list[float]:
    """The driver's samples of ``kind`` (MHz, mW) between two epoch times in us; [] if none."""
    codes = {"NVML_TOTAL_POWER_SAMPLES": 0, "NVML_PROCESSOR_CLK_SAMPLES": 5}
    fields = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")  # nvmlValueType_t
    with contextlib.suppress(Exception):
        value_type, got = nvml.nvmlDeviceGetSamples(
            handle, getattr(nvml, kind, codes[kind]), since_us
        )
        field = fields[int(value_type)]
        return [
            float(getattr(s.sampleValue, field))
            for s in got
            if since_us < int(s.timeStamp) <= until_us
        ]
    return []
