"""Distributed workloads with real faults in one rank, for tests/test_distributed.py: rank 1
kills itself with SIGKILL at fingerprint step 2, hangs at step 1, or runs out of host memory while
it builds; rank 0 is left waiting in a collective each time. ``after`` is an ordinary workload:
the worker must go on to it."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import torch
import torch.distributed as dist

import detbench

#: The step at which rank 1 crashes or hangs.
CRASH_STEP = 2
HANG_STEP = 1


def _counting(ctx: detbench.Context, fault: Any, at: int) -> Any:
    """An all-reduce step that calls ``fault()`` on rank 1 at step ``at``."""
    x = torch.full((8,), float(ctx.rank + 1), device=ctx.device)
    calls = [0]

    def step() -> list[torch.Tensor]:
        if ctx.rank == 1 and calls[0] == at:
            fault()
        calls[0] += 1
        y = x.clone()
        dist.all_reduce(y)
        return [y]

    return step


@detbench.workload(suite="dfaults", items_per_step=8, distributed=True, fingerprint_steps=4)
def crash_at_step(ctx: detbench.Context) -> Any:
    return _counting(ctx, lambda: os.kill(os.getpid(), signal.SIGKILL), CRASH_STEP)


@detbench.workload(suite="dfaults", items_per_step=8, distributed=True, fingerprint_steps=4)
def hang_at_step(ctx: detbench.Context) -> Any:
    return _counting(ctx, lambda: time.sleep(3600), HANG_STEP)


@detbench.workload(suite="dfaults", items_per_step=8, distributed=True)
def oom_on_rank1(ctx: detbench.Context) -> Any:
    if ctx.rank == 1:  # 2**62 bytes: more than any host has; torch's CPU allocator refuses
        torch.empty(1 << 60, dtype=torch.float32)
    return _counting(ctx, lambda: None, -1)


@detbench.workload(suite="dfaults", items_per_step=8)
def after(ctx: detbench.Context) -> Any:
    x = torch.arange(8.0, device=ctx.device)
    return lambda: [torch.cumsum(x, 0)]
