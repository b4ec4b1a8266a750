"""A workload that kills its own worker process, between two that work."""

from __future__ import annotations

import os
from typing import Any

import torch

import detbench


@detbench.workload(suite="crashing", items_per_step=1)
def before(ctx: detbench.Context) -> Any:
    x = torch.arange(8.0, device=ctx.device)
    return lambda: [x * 2]


@detbench.workload(suite="crashing", items_per_step=1)
def aborts(ctx: detbench.Context) -> Any:
    def step() -> list[torch.Tensor]:
        os.abort()

    return step


@detbench.workload(suite="crashing", items_per_step=1)
def after(ctx: detbench.Context) -> Any:
    x = torch.arange(8.0, device=ctx.device)
    return lambda: [x + 1]
