"""Deterministic workloads (so two runs can be compared in everything but timings), slow enough
that a run can be interrupted in the middle: a seeded MLP step, a small training loop that records
its losses, and an op with no deterministic implementation (status 'unsupported' under
deterministic algorithms)."""

from __future__ import annotations

from typing import Any

import torch

import detbench


@detbench.workload(suite="resumable", items_per_step=64)
def mlp_step(ctx: detbench.Context) -> Any:
    w = torch.randn(256, 256, device=ctx.device, requires_grad=True)
    x = torch.randn(64, 256, device=ctx.device)

    def step() -> list[torch.Tensor]:
        y = torch.tanh(x @ w)
        (g,) = torch.autograd.grad(y.square().sum(), [w])
        return [y, g]

    return step


@detbench.workload(suite="resumable", items_per_step=32, loss_output=0, fingerprint_steps=4)
def tiny_training(ctx: detbench.Context) -> Any:
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)
    ).to(ctx.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(32, 32, device=ctx.device)
    y = torch.randint(0, 10, (32,), device=ctx.device)

    def step() -> list[torch.Tensor]:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return [loss.detach(), *(p.detach() for p in model.parameters())]

    return step


@detbench.workload(suite="resumable", items_per_step=2)
def put_without_accumulate(ctx: detbench.Context) -> Any:
    index = torch.tensor([1, 3], device=ctx.device)
    source = torch.tensor([1.0, 2.0], device=ctx.device)
    return lambda: [torch.zeros(8, device=ctx.device).put_(index, source, accumulate=False)]
