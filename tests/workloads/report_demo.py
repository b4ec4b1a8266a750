"""A small run with every kind of result a report shows, made with genuine behaviour on CPU: a
training loop whose replicates diverge (a gradient accumulated by racing threads), a
reproducible model, an op with no deterministic implementation, and a workload named with HTML
markup (which the report must escape)."""

from __future__ import annotations

from typing import Any

import torch

import detbench


@detbench.workload(suite="demo", items_per_step=1 << 18, loss_output=0, fingerprint_steps=12)
def racing_embedding_training(ctx: detbench.Context) -> Any:
    """SGD on a lookup table read with advanced indexing: the backward of ``table[idx]`` adds
    2^18 gradient rows into 64 rows with index_put_(accumulate=True), whose float additions on
    2+ CPU threads happen in an order set by thread timing unless deterministic algorithms are
    on. The learning rate is far too high on purpose: the updates are unstable, so a difference
    in the last bit of one gradient grows step by step until the losses differ visibly (about
    1e-7 at step 2, 1e-3 by step 14), as in a long real training run."""
    table = torch.randn(64, 16, device=ctx.device, requires_grad=True)
    idx = torch.randint(0, 64, (1 << 18,), device=ctx.device)
    target = torch.randn(1 << 18, 16, device=ctx.device)
    opt = torch.optim.SGD([table], lr=3000.0, momentum=0.9)

    def step() -> list[torch.Tensor]:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(torch.tanh(table[idx]), target)
        loss.backward()
        opt.step()
        return [loss.detach(), table.detach()]

    return step


@detbench.workload(suite="demo", items_per_step=32)
def seeded_mlp(ctx: detbench.Context) -> Any:
    """Seeded weights, a matmul, a ReLU and a backward pass: bitwise reproducible."""
    w = torch.randn(128, 128, device=ctx.device, requires_grad=True)
    x = torch.randn(32, 128, device=ctx.device)

    def step() -> list[torch.Tensor]:
        y = (x @ w).relu()
        (g,) = torch.autograd.grad(y.sum(), [w])
        return [y, g]

    return step


@detbench.workload(suite="demo", items_per_step=2)
def put_without_accumulate(ctx: detbench.Context) -> Any:
    """Tensor.put_(accumulate=False): no deterministic implementation on CPU."""
    index = torch.tensor([1, 3], device=ctx.device)
    source = torch.tensor([1.0, 2.0], device=ctx.device)

    def step() -> list[torch.Tensor]:
        return [torch.zeros(8, device=ctx.device).put_(index, source, accumulate=False)]

    return step


@detbench.workload(suite="demo", name="<img src=x onerror=alert(1)>&co", items_per_step=1)
def markup_name(ctx: detbench.Context) -> Any:
    """A name and an error message with HTML in them: shown as text, never as markup."""

    def step() -> list[torch.Tensor]:
        raise ValueError("<script>alert('not escaped')</script>")

    return step
