"""Two models for `detbench audit` on CPU: one calls ops that have no deterministic CPU
implementation (max_unpool2d, Tensor.put_ without accumulate), one only deterministic ops."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

import detbench


@detbench.workload(suite="audit", items_per_step=4)
def unpool_and_put(ctx: detbench.Context) -> Any:
    x = torch.randn(4, 3, 16, 16, device=ctx.device)
    index = torch.tensor([1, 3, 1], device=ctx.device)  # a repeated index: the last write wins
    source = torch.randn(3, device=ctx.device)

    def step() -> list[torch.Tensor]:
        pooled, where = F.max_pool2d(x, 2, return_indices=True)
        restored = F.max_unpool2d(pooled, where, (2, 2))  # AUDIT: max_unpool2d
        flat = torch.zeros(8, device=ctx.device).put_(index, source)  # AUDIT: put_
        return [restored, flat]

    return step


@detbench.workload(suite="audit", items_per_step=32)
def clean_mlp(ctx: detbench.Context) -> Any:
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x = torch.randn(32, 16, device=ctx.device)

    def step() -> list[torch.Tensor]:
        loss = model(x).square().mean()
        grads = torch.autograd.grad(loss, list(model.parameters()))
        return [loss.detach(), *grads]

    return step


@detbench.workload(suite="audit", items_per_step=1 << 22)
def racing_accumulate(ctx: detbench.Context) -> Any:
    """index_put_(accumulate=True) with 2^22 values onto 64 slots: nondeterministic on 2+ CPU
    threads by default, deterministic (and flagged by nothing) with deterministic algorithms."""
    idx = torch.randint(0, 64, (1 << 22,), device=ctx.device)
    vals = torch.randn(1 << 22, device=ctx.device)

    def step() -> list[torch.Tensor]:
        out = torch.zeros(64, device=ctx.device)
        return [out.index_put_((idx,), vals, accumulate=True)]  # LOCATE: the race

    return step
