"""Models for `detbench locate` on CPU, with real races and one without.

The races are `index_put_(accumulate=True)` with 2^21 values onto 64 slots (as in behaviour.py):
on 2+ CPU threads the order of the float additions follows thread timing, so nearly every fresh
process gets other bits, unless deterministic algorithms are on. The lines that race are marked
`# RACE`, so the tests can find them without hard-coding line numbers.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

import detbench

N = 1 << 15  # rows; x 64 features = 2^21 values racing onto 64 slots
SLOTS = 64


class SlotPool(nn.Module):
    """Sums each feature row into one of 64 slots: the forward pass races."""

    index: torch.Tensor

    def __init__(self, index: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("index", index)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(SLOTS, h.shape[1], device=h.device)
        return out.index_put_((self.index,), h, accumulate=True)  # RACE forward


class Encoder(nn.Module):
    def __init__(self, index: torch.Tensor) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 64)
        self.pool = SlotPool(index)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(torch.relu(self.proj(x)))


class PooledNet(nn.Module):
    def __init__(self, index: torch.Tensor) -> None:
        super().__init__()
        self.encoder = Encoder(index)
        self.head = nn.Linear(64, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


@detbench.workload(suite="locate", items_per_step=N, fingerprint_steps=2)
def pooled_forward(ctx: detbench.Context) -> Any:
    """The race in the forward pass of `encoder.pool`; the head and the loss only carry it."""
    index = torch.randint(0, SLOTS, (N,), device=ctx.device)
    model = PooledNet(index).to(ctx.device)
    x = torch.randn(N, 8, device=ctx.device)

    def step() -> list[torch.Tensor]:
        out = model(x)
        return [out, out.square().mean()]

    return step


class Gather(nn.Module):
    """Picks rows of a learned table with many repeats, each row scaled by its own weight: the
    backward of `table[index]` adds 2^21 different gradient values into 64 rows with
    index_put_(accumulate=True), and races. (Equal values would not show it: their sum comes
    out the same in nearly any order.)"""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(SLOTS, 64))

    def forward(self, index: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return self.table[index] * scale  # RACE backward


@detbench.workload(suite="locate", items_per_step=N, fingerprint_steps=2)
def gather_backward(ctx: detbench.Context) -> Any:
    """The race in the backward pass of `Gather.forward`'s indexing; the SGD step carries it."""
    gather, head = Gather().to(ctx.device), nn.Linear(64, 1).to(ctx.device)
    params = [*gather.parameters(), *head.parameters()]
    index = torch.randint(0, SLOTS, (N,), device=ctx.device)
    scale = torch.randn(N, 1, device=ctx.device)
    opt = torch.optim.SGD(params, lr=0.01)

    def step() -> list[torch.Tensor]:
        opt.zero_grad()
        loss = head(gather(index, scale)).mean()
        loss.backward()
        opt.step()
        return [loss.detach(), *(p.grad.clone() for p in params if p.grad is not None)]

    return step


@detbench.workload(suite="locate", items_per_step=32, fingerprint_steps=2)
def clean_training(ctx: detbench.Context) -> Any:
    """Reproducible: a seeded MLP trained with SGD, with views, an in-place op, an op with two
    outputs (max) and a custom autograd function along the way."""

    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            (x,) = ctx.saved_tensors
            return 2 * x * g

    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(ctx.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(32, 16, device=ctx.device)

    def step() -> list[torch.Tensor]:
        opt.zero_grad()
        y = model(x).view(8, 4, 4).transpose(1, 2)
        best, where = y.max(dim=2)
        loss = Square.apply(best).mean()
        loss.backward()
        opt.step()
        x.mul_(1.0)  # in place, unchanged values
        return [loss.detach(), where, *(p.detach() for p in model.parameters())]

    return step


@detbench.workload(suite="locate", items_per_step=N, fingerprint_steps=2)
def functional_race(ctx: detbench.Context) -> Any:
    """No nn.Module: plain functions, a race in a custom autograd function's backward."""

    class Scatter(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(index)
            ctx.rows = table.shape[0]
            return table[index]

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
            (index,) = ctx.saved_tensors
            grad = torch.zeros(ctx.rows, g.shape[1], device=g.device)
            return grad.index_put_((index,), g, accumulate=True), None  # RACE custom

    table = torch.randn(SLOTS, 64, device=ctx.device, requires_grad=True)
    index = torch.randint(0, SLOTS, (N,), device=ctx.device)
    scale = torch.randn(N, 1, device=ctx.device)

    def step() -> list[torch.Tensor]:
        rows = Scatter.apply(table, index) * scale
        (g,) = torch.autograd.grad(rows.sin().sum(), [table])
        return [g]

    return step


@detbench.workload(suite="locate", items_per_step=32, fingerprint_steps=1)
def compiled_mlp(ctx: detbench.Context) -> Any:
    """Calls torch.compile: under the recorder the compiled function runs eagerly."""
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU()).to(ctx.device)
    fast = torch.compile(model)  # COMPILE
    x = torch.randn(32, 16, device=ctx.device)
    return lambda: [fast(x)]


@detbench.workload(suite="locate", items_per_step=8, fingerprint_steps=1)
def reads_uninitialized(ctx: detbench.Context) -> Any:
    """Half of a torch.empty buffer is written, then all of it is summed: the sum reads memory
    that was never initialised (what it holds depends on the process)."""

    def step() -> list[torch.Tensor]:
        buf = torch.empty(1 << 12, device=ctx.device)  # UNINIT
        buf[: 1 << 11] = 1.0
        return [buf.sum()]  # READS

    return step
