"""Workloads for the worker's life cycle: a plain one that is timed, one whose step fails the
way a lost CUDA context does, so its worker must end and hand the rest to a fresh one, and one
whose build takes seconds, time enough for the next worker to finish its imports beside it."""

from __future__ import annotations

import os
import time
from typing import Any

import torch

import detbench


@detbench.workload(suite="lifecycle", items_per_step=1)
def steady(ctx: detbench.Context) -> Any:
    x = torch.randn(64, 64, device=ctx.device)
    return lambda: [x @ x]


@detbench.workload(suite="lifecycle", items_per_step=1)
def loses_device(ctx: detbench.Context) -> Any:
    def step() -> list[torch.Tensor]:
        # The text torch gives an illegal memory access; on a CPU this is the only way to reach
        # the runner's handling of a worker whose device context is gone.
        raise RuntimeError(
            "CUDA error: an illegal memory access was encountered\n"
            "CUDA kernel errors might be asynchronously reported at some other API call"
        )

    return step


@detbench.workload(suite="lifecycle", items_per_step=1)
def after_loss(ctx: detbench.Context) -> Any:
    x = torch.arange(8.0, device=ctx.device)
    pid = torch.tensor([os.getpid()])  # which worker ran it: a fresh one after the loss
    return lambda: [x + 1, pid]


@detbench.workload(suite="lifecycle", items_per_step=1)
def slow_build(ctx: detbench.Context) -> Any:
    time.sleep(5.0)  # no timing pass runs meanwhile: the next worker starts up unpaused
    x = torch.randn(32, 32, device=ctx.device)
    return lambda: [x @ x]
