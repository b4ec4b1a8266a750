"""Workloads whose batch invariance is known on this CPU (torch 2.13, 2 threads): a 512x512 fp32
matmul, whose row 0 changes bits once other rows share its batch, and an elementwise op, which
cannot change. Row 0 is the same request at every batch size: the inputs are the first rows of
one seeded tensor."""

from __future__ import annotations

from typing import Any

import torch

import detbench

SIZES = (1, 2, 4, 16)


def _rows(ctx: detbench.Context) -> torch.Tensor:
    assert ctx.batch_size is not None
    return torch.randn(max(SIZES), 512, device=ctx.device)[: ctx.batch_size]


@detbench.workload(suite="invariance_probe", items_per_step=16, batch_sizes=SIZES)
def matmul_rows(ctx: detbench.Context) -> Any:
    w = torch.randn(512, 512, device=ctx.device)
    x = _rows(ctx)

    def step() -> list[torch.Tensor]:
        return [x @ w]

    return step


@detbench.workload(suite="invariance_probe", items_per_step=16, batch_sizes=SIZES)
def elementwise_rows(ctx: detbench.Context) -> Any:
    x = _rows(ctx)

    def step() -> list[torch.Tensor]:
        return [x * 2.0 + 1.0]

    return step


@detbench.workload(suite="invariance_probe", items_per_step=1)
def no_sizes(ctx: detbench.Context) -> Any:
    x = torch.randn(8, device=ctx.device)

    def step() -> list[torch.Tensor]:
        return [x + 1]

    return step
