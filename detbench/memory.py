"""Memory figures of a worker: torch's GPU allocator and the process's host memory."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

GIB = float(1 << 30)


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
