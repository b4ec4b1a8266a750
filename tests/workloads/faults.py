"""One workload per kind of fault, each a real fault in the real worker process, between
workloads that work: the run must record every fault as a status and measure the others."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import torch

import detbench


def _working(ctx: detbench.Context, scale: float) -> Any:
    x = torch.arange(64.0, device=ctx.device)
    return lambda: [torch.cumsum(x * scale, 0)]


@detbench.workload(suite="faults", items_per_step=64)
def works_first(ctx: detbench.Context) -> Any:
    return _working(ctx, 2.0)


@detbench.workload(suite="faults", items_per_step=1)
def aborts(ctx: detbench.Context) -> Any:
    """os.abort(): the worker dies of SIGABRT."""

    def step() -> list[torch.Tensor]:
        os.abort()

    return step


@detbench.workload(suite="faults", items_per_step=1)
def segfaults(ctx: detbench.Context) -> Any:
    """The worker sends itself SIGSEGV, as a crash in native code would."""

    def step() -> list[torch.Tensor]:
        os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(10)  # the signal is delivered before this returns
        return []

    return step


@detbench.workload(suite="faults", items_per_step=1)
def exits(ctx: detbench.Context) -> Any:
    """A library that calls exit(3) deep inside: the worker ends with a non-zero status."""

    def step() -> list[torch.Tensor]:
        os._exit(3)

    return step


@detbench.workload(suite="faults", items_per_step=1)
def hangs(ctx: detbench.Context) -> Any:
    """A step that never finishes in reasonable time: past --timeout the worker is killed."""

    def step() -> list[torch.Tensor]:
        time.sleep(600)
        return []

    return step


@detbench.workload(suite="faults", items_per_step=1)
def cpu_out_of_memory(ctx: detbench.Context) -> Any:
    """A real allocation of 1 PiB: torch's CPU allocator refuses it."""

    def step() -> list[torch.Tensor]:
        return [torch.empty(1 << 50, dtype=torch.uint8)]

    return step


@detbench.workload(suite="faults", items_per_step=1)
def python_memory_error(ctx: detbench.Context) -> Any:
    """A real MemoryError: Python cannot allocate 2^60 bytes."""

    def step() -> list[torch.Tensor]:
        return [torch.frombuffer(bytearray(1 << 60), dtype=torch.uint8)]

    return step


@detbench.workload(suite="faults", items_per_step=1)
def cuda_out_of_memory(ctx: detbench.Context) -> Any:
    """torch.cuda.OutOfMemoryError as torch raises it. On a GPU this workload asks for far more
    than the device holds, for real; without one it raises the exception class itself, which is
    what the worker sees in either case."""

    def step() -> list[torch.Tensor]:
        if ctx.device.type == "cuda":
            _free, total = torch.cuda.mem_get_info(ctx.device)
            return [torch.empty(4 * total, dtype=torch.uint8, device=ctx.device)]
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 PiB")

    return step


@detbench.workload(suite="faults", items_per_step=64)
def works_after_oom(ctx: detbench.Context) -> Any:
    """Right after the out-of-memory failures: the worker that ran them must still measure."""
    return _working(ctx, 5.0)


@detbench.workload(suite="faults", items_per_step=1)
def device_assert(ctx: detbench.Context) -> Any:
    """An index out of range. On a CPU an IndexError; on a GPU a real device-side assert,
    raised asynchronously, after which the worker's CUDA context is unusable: the worker must
    hand the workloads after it to a fresh worker."""
    x = torch.tensor([5.0], device=ctx.device)
    index = torch.tensor([10], device=ctx.device)
    return lambda: [x[index]]


@detbench.workload(suite="faults", items_per_step=1)
def raises(ctx: detbench.Context) -> Any:
    """An ordinary bug in a step."""

    def step() -> list[torch.Tensor]:
        raise KeyError("no such layer: 'fc3'")

    return step


@detbench.workload(suite="faults", items_per_step=1)
def factory_raises(ctx: detbench.Context) -> Any:
    """The factory itself fails while building the workload."""
    raise FileNotFoundError("weights.pt")


@detbench.workload(suite="faults", items_per_step=64)
def works_last(ctx: detbench.Context) -> Any:
    return _working(ctx, 3.0)
