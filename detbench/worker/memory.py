"""Memory figures of a worker: the peak memory of every workload (``PeakWatch``: what settings
cost in memory, beside time), and what torch and the OS say after an out-of-memory
(``memory_figures``).
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

GIB = float(1 << 30)
#: ru_maxrss is in KiB on Linux, in bytes on macOS.
_MAXRSS_UNIT = 1 if sys.platform == "darwin" else 1024


def _proc_bytes(field: str, path: str = "/proc/self/status") -> int | None:
    """A ``kB`` field of a /proc file (VmRSS, VmHWM) in bytes; None off Linux."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _available_bytes() -> int:
    got = _proc_bytes("MemAvailable", "/proc/meminfo")
    if got is not None:
        return got
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def _max_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * _MAXRSS_UNIT


def _reset_peak_rss() -> bool:
    """Set the peak RSS (VmHWM) back to the current RSS (Linux >= 4.0); False where impossible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@lru_cache(maxsize=1)
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim`` (None without it): giving the heap's free pages back keeps a
    workload that reuses an earlier one's freed memory from reading a peak of 0."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    return trim


class PeakWatch:
    """The peak memory of one workload, from ``start()`` to ``stop()``: on CUDA torch's
    allocator peaks, reset at the start; on a CPU the growth of the peak RSS, reset at the start
    where Linux allows, else ru_maxrss after minus before, 0 when an earlier workload peaked
    higher (``peak_reset`` says which)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.before: dict[str, Any] = {}

    def start(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            self.before = {"allocated_at_start_bytes": torch.cuda.memory_allocated(self.device)}
            return
        if (trim := _malloc_trim()) is not None:
            trim(0)
        reset = _reset_peak_rss()
        rss = _proc_bytes("VmRSS")
        self.before = {
            "rss_before_bytes": rss,
            "peak_reset": reset and rss is not None,
            "maxrss_before": _max_rss_bytes(),
        }

    def stop(self) -> tuple[int | None, dict[str, Any]]:
        """(peak_memory_bytes, memory): the record's two memory fields; never raises."""
        try:
            return self._stop()
        except Exception as exc:
            return None, {"error": f"{type(exc).__name__}: {exc}"}

    def _stop(self) -> tuple[int | None, dict[str, Any]]:
        if self.device.type == "cuda":
            # The allocator's own counters: readable even when the context is not.
            peak = int(torch.cuda.max_memory_allocated(self.device))
            memory = {
                **self.before,
                "peak_allocated_bytes": peak,
                "peak_reserved_bytes": int(torch.cuda.max_memory_reserved(self.device)),
            }
            return peak, memory
        before = dict(self.before)
        maxrss_before = before.pop("maxrss_before", None)
        hwm = _proc_bytes("VmHWM") if before.get("peak_reset") else None
        if hwm is not None and before.get("rss_before_bytes") is not None:
            peak_rss = hwm
            growth = max(0, hwm - int(before["rss_before_bytes"]))
        else:
            peak_rss = _max_rss_bytes()
            growth = max(0, peak_rss - int(maxrss_before or 0))
            before["peak_reset"] = False
        return growth, {**before, "peak_rss_bytes": peak_rss, "rss_growth_bytes": growth}


def free_bytes(device: torch.device) -> int | None:
    """Memory a new copy of a workload could take now (the GPU's, else the host's), or None."""
    try:
        if device.type == "cuda":
            return int(torch.cuda.mem_get_info(device)[0])
        return _available_bytes()
    except Exception:
        return None


def footprint_bytes(device: torch.device, rec_memory: dict[str, Any] | None) -> int | None:
    """What one copy of a workload holds at its peak (``PeakWatch``'s figures); None if unread."""
    key = "peak_reserved_bytes" if device.type == "cuda" else "rss_growth_bytes"
    got = (rec_memory or {}).get(key)
    return None if got is None else int(got)


def memory_figures(device: torch.device) -> dict[str, Any]:
    """What torch and the OS say about memory after an out-of-memory, each figure on its own."""
    figures: dict[str, Any] = {
        "process_peak_rss_bytes": _max_rss_bytes(),
        "available_bytes": _available_bytes(),
    }
    if device.type == "cuda":
        try:
            free, total = torch.cuda.mem_get_info(device)
            figures.update(cuda_free_bytes=int(free), cuda_total_bytes=int(total))
        except Exception as exc:
            figures["cuda_mem_get_info_error"] = f"{type(exc).__name__}: {exc}"
        try:
            figures.update(
                cuda_allocated_bytes=torch.cuda.memory_allocated(device),
                cuda_reserved_bytes=torch.cuda.memory_reserved(device),
                # The peak since this workload started (PeakWatch reset it).
                cuda_max_allocated_bytes=torch.cuda.max_memory_allocated(device),
            )
        except Exception as exc:
            figures["cuda_allocator_error"] = f"{type(exc).__name__}: {exc}"
    return figures


def describe_memory(f: dict[str, Any]) -> str:
    parts = []
    if "cuda_allocated_bytes" in f:
        gpu = (
            f"GPU: {f['cuda_allocated_bytes'] / GIB:.2f} GiB allocated and "
            f"{f['cuda_reserved_bytes'] / GIB:.2f} GiB reserved by torch (peak "
            f"{f['cuda_max_allocated_bytes'] / GIB:.2f})"
        )
        if "cuda_total_bytes" in f:
            gpu += (
                f", {f['cuda_free_bytes'] / GIB:.2f} GiB free of "
                f"{f['cuda_total_bytes'] / GIB:.2f} GiB"
            )
        parts.append(gpu)
    parts.append(
        f"host: worker peak RSS {f['process_peak_rss_bytes'] / GIB:.2f} GiB, "
        f"{f['available_bytes'] / GIB:.1f} GiB available"
    )
    return "; ".join(parts)


def warm_libraries(device: torch.device) -> dict[str, int]:
    """Create, before the first measured workload, the handles and workspaces cuBLAS, cuBLASLt
    and cuDNN keep for the whole process, so that the first workload's peak memory does not
    carry them alone. The bytes the allocator holds afterwards; {} on a CPU."""
    if device.type != "cuda":
        return {}
    for dtype in (torch.float32, torch.float16, torch.bfloat16):  # each may take its own path
        a = torch.randn(64, 64, device=device, dtype=dtype)
        torch.mm(a, a)
        torch.nn.functional.linear(a, a)
    x = torch.randn(2, 4, 8, 8, device=device, requires_grad=True)
    w = torch.randn(4, 4, 3, 3, device=device, requires_grad=True)
    torch.nn.functional.conv2d(x, w, padding=1).sum().backward()
    torch.cuda.synchronize(device)
    return {
        "allocated_bytes": int(torch.cuda.memory_allocated(device)),
        "reserved_bytes": int(torch.cuda.memory_reserved(device)),
    }
