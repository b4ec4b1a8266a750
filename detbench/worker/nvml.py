"""NVML (nvidia-ml-py) as a worker reads it during a timing pass: one session per process, opened
at the first use and left open (NVML counts its users; the process's exit closes it), and the
worker's own GPU found by its UUID, since NVML numbers every GPU of the host whatever
``CUDA_VISIBLE_DEVICES`` says.

``device_handle`` gives ``(nvml, handle)`` or the reason there is none, in one line: not a CUDA
device, nvidia-ml-py not installed, no driver library, a GPU NVML cannot find. Nothing here
raises, and nothing creates a CUDA context that the worker does not already have.
"""

from __future__ import annotations

import contextlib
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def _module() -> tuple[Any, str | None]:
    """The initialised pynvml module, or None and why not (one try per process)."""
    try:
        import pynvml as nvml  # nvidia-ml-py
    except ImportError:
        return None, "nvidia-ml-py (pynvml) is not installed"
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound on a host without the driver
        return None, f"NVML: {type(exc).__name__}: {exc}"[:200]
    return nvml, None


def device_handle(device: Any) -> tuple[Any, Any, str | None]:
    """``(nvml, handle, None)`` for the worker's ``device`` (a ``torch.device``), or
    ``(None, None, reason)``."""
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
    """The values of the driver's own sample buffer ``kind`` ("NVML_PROCESSOR_CLK_SAMPLES": SM
    clock, MHz; "NVML_TOTAL_POWER_SAMPLES": power, mW) taken between the two times (microseconds
    since the epoch, NVML's timestamps); [] where the driver keeps none. Read once, after the
    pass: nothing runs in the timed process while samples are taken."""
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
