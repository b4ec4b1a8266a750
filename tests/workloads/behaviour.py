"""Workloads with known run-to-run behaviour on CPU, made with genuine nondeterminism."""

from __future__ import annotations

import os
from typing import Any

import torch

import detbench


@detbench.workload(suite="behaviour", items_per_step=1)
def urandom_order_sum(ctx: detbench.Context) -> Any:
    """Float32 sums in an order drawn from os.urandom: different bits in every process, whatever
    the mode, because no seed reaches os.urandom. Sixteen partial sums, not one: two orders can
    give one sum the same bits by chance, sixteen at once practically never."""
    x = torch.randn(1 << 16, device=ctx.device)

    def step() -> list[torch.Tensor]:
        g = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little"))
        order = torch.randperm(x.numel(), generator=g).to(ctx.device)
        return [x[order].view(16, -1).sum(dim=1)]

    return step


@detbench.workload(suite="behaviour", items_per_step=1 << 22)
def index_put_accumulate(ctx: detbench.Context) -> Any:
    """index_put_(accumulate=True) with 2^22 values onto 64 slots: on 2+ CPU threads the order of
    the float additions depends on thread timing, unless deterministic algorithms are on. Large
    enough (tens of ms a step) that the threads overlap even on a busy machine."""
    idx = torch.randint(0, 64, (1 << 22,), device=ctx.device)
    vals = torch.randn(1 << 22, device=ctx.device)

    def step() -> list[torch.Tensor]:
        return [torch.zeros(64, device=ctx.device).index_put_((idx,), vals, accumulate=True)]

    return step


@detbench.workload(suite="behaviour", items_per_step=32)
def seeded_mlp(ctx: detbench.Context) -> Any:
    """Seeded weights, a matmul, a ReLU and a backward pass: bitwise reproducible."""
    w = torch.randn(128, 128, device=ctx.device, requires_grad=True)
    x = torch.randn(32, 128, device=ctx.device)

    def step() -> list[torch.Tensor]:
        y = (x @ w).relu()
        (g,) = torch.autograd.grad(y.sum(), [w])
        return [y, g]

    return step


@detbench.workload(suite="behaviour", items_per_step=2)
def put_without_accumulate(ctx: detbench.Context) -> Any:
    """Tensor.put_(accumulate=False) has no deterministic implementation on CPU: it raises under
    torch.use_deterministic_algorithms(True)."""
    index = torch.tensor([1, 3], device=ctx.device)
    source = torch.tensor([1.0, 2.0], device=ctx.device)

    def step() -> list[torch.Tensor]:
        return [torch.zeros(8, device=ctx.device).put_(index, source, accumulate=False)]

    return step


@detbench.workload(suite="behaviour", items_per_step=1)
def raises_value_error(ctx: detbench.Context) -> Any:
    """An ordinary bug in a workload: status 'error', and the run goes on."""

    def step() -> list[torch.Tensor]:
        raise ValueError("deliberate failure in a test workload")

    return step
