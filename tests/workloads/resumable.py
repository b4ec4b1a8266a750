"""Workloads whose results are the same bits in every process, so two runs can be compared in
everything but timings, slow enough that a run can be interrupted in the middle: an MLP step, a
small training loop that records its losses, and an op with no deterministic implementation
(status 'unsupported' under deterministic algorithms).

They are exact by construction, not by luck. CI once saw a plain fp32 ``tanh(x @ w)`` step come
out with different bits in one of its fresh processes on a 2-core CPU (BLAS and vectorised
math are free to split their work differently from one process to the next), and the resume test
failed on a difference that had nothing to do with resuming. Here every value is an
integer held in float64, far below 2**53, and every op (matmul, ReLU, L1 loss, SGD with lr=1)
keeps it one, so every order of the additions gives the same bits."""

from __future__ import annotations

from typing import Any

import torch

import detbench


def _ints(*shape: int, device: str | torch.device) -> torch.Tensor:
    return torch.randint(-3, 4, shape, device=device).double()


@detbench.workload(suite="resumable", items_per_step=64)
def mlp_step(ctx: detbench.Context) -> Any:
    w = _ints(256, 256, device=ctx.device).requires_grad_()
    x = _ints(64, 256, device=ctx.device)

    def step() -> list[torch.Tensor]:
        y = torch.relu(x @ w)
        (g,) = torch.autograd.grad(y.square().sum(), [w])
        return [y, g]

    return step


@detbench.workload(suite="resumable", items_per_step=32, loss_output=0, fingerprint_steps=4)
def tiny_training(ctx: detbench.Context) -> Any:
    # One layer, so the integer weights grow by at most 32 * 3 per step, not geometrically.
    model = torch.nn.Linear(32, 10, bias=False).to(ctx.device, torch.float64)
    with torch.no_grad():
        model.weight.copy_(_ints(10, 32, device=ctx.device))
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    x = _ints(32, 32, device=ctx.device)
    y = _ints(32, 10, device=ctx.device)

    def step() -> list[torch.Tensor]:
        opt.zero_grad()
        loss = torch.nn.functional.l1_loss(model(x), y, reduction="sum")
        loss.backward()
        opt.step()
        return [loss.detach(), *(p.detach() for p in model.parameters())]

    return step


@detbench.workload(suite="resumable", items_per_step=2)
def put_without_accumulate(ctx: detbench.Context) -> Any:
    index = torch.tensor([1, 3], device=ctx.device)
    source = torch.tensor([1.0, 2.0], device=ctx.device)
    return lambda: [torch.zeros(8, device=ctx.device).put_(index, source, accumulate=False)]
