"""Workloads that meet detbench's settings: user code that changes them behind the benchmark's
back, an op with no deterministic implementation, memory read before anyone wrote it, and SDPA."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

import detbench


@detbench.workload(suite="settings_probe", items_per_step=1)
def turns_det_algos_off(ctx: detbench.Context) -> Any:
    """A training script's habit: use_deterministic_algorithms(False) in the model's set-up."""
    torch.use_deterministic_algorithms(False)
    x = torch.randn(64, device=ctx.device)

    def step() -> list[torch.Tensor]:
        return [x * 2]

    return step


@detbench.workload(suite="settings_probe", items_per_step=1)
def max_unpool_after(ctx: detbench.Context) -> Any:
    """max_unpool2d has no deterministic implementation: under deterministic algorithms it is
    unsupported, unless an earlier workload of the worker turned them off and nobody restored
    them."""
    x = torch.randn(1, 1, 8, 8, device=ctx.device)
    out, idx = F.max_pool2d(x, 2, return_indices=True)

    def step() -> list[torch.Tensor]:
        return [F.max_unpool2d(out, idx, [2, 2])]

    return step


@detbench.workload(suite="settings_probe", items_per_step=1)
def benchmark_on_in_step(ctx: detbench.Context) -> Any:
    """Sets cudnn.benchmark inside its step, after the build: caught after the last step."""
    x = torch.randn(64, device=ctx.device)

    def step() -> list[torch.Tensor]:
        torch.backends.cudnn.benchmark = True
        return [x + 1]

    return step


@detbench.workload(suite="settings_probe", items_per_step=1 << 20)
def empty_unwritten(ctx: detbench.Context) -> Any:
    """Returns torch.empty's memory unwritten: NaN with deterministic algorithms and the fill on;
    otherwise whatever the allocator held."""
    n = 1 << 20

    def step() -> list[torch.Tensor]:
        return [torch.empty(n, device=ctx.device)]

    return step


@detbench.workload(suite="settings_probe", items_per_step=2, attention=True)
def sdpa_fwd_bwd(ctx: detbench.Context) -> Any:
    q, k, v = (torch.randn(2, 2, 64, 16, device=ctx.device, requires_grad=True) for _ in "qkv")

    def step() -> list[torch.Tensor]:
        out = F.scaled_dot_product_attention(q, k, v)
        grads = torch.autograd.grad(out.sum(), [q, k, v])
        return [out, *grads]

    return step


@detbench.workload(suite="settings_probe", items_per_step=8, autocast=True)
def linear_amp(ctx: detbench.Context) -> Any:
    """A linear layer that declares it can run under autocast: its output dtype says so."""
    lin = torch.nn.Linear(32, 32).to(ctx.device)
    x = torch.randn(8, 32, device=ctx.device)

    def step() -> list[torch.Tensor]:
        return [lin(x)]

    return step


@detbench.workload(suite="settings_probe", items_per_step=8)
def linear_plain(ctx: detbench.Context) -> Any:
    """The same layer, with no autocast declaration."""
    lin = torch.nn.Linear(32, 32).to(ctx.device)
    x = torch.randn(8, 32, device=ctx.device)

    def step() -> list[torch.Tensor]:
        return [lin(x)]

    return step
