"""Small workloads whose bits depend, or do not, on the CPU capability torch dispatches to
(``ATEN_CPU_CAPABILITY``: default, avx2, avx512). On an x86 host with AVX2, ``exp``, ``tanh``,
``softmax``, a matmul and even ``randn`` give other bits under ``default`` than under ``avx2``;
integer arithmetic does not. Runs under two capabilities are two machines' arithmetic on one host.
"""

from __future__ import annotations

from typing import Any

import torch

import detbench


@detbench.workload(suite="capability", items_per_step=64)
def softmax_exp(ctx: detbench.Context) -> Any:
    """exp, tanh and softmax of a (64, 512) float32 tensor: vectorised per capability."""
    x = torch.randn(64, 512, device=ctx.device)

    def step() -> list[torch.Tensor]:
        return [x.exp(), x.tanh(), torch.softmax(x, dim=-1)]

    return step


@detbench.workload(suite="capability", items_per_step=64)
def matmul(ctx: detbench.Context) -> Any:
    """A (64, 512) @ (512, 512) float32 matmul."""
    x = torch.randn(64, 512, device=ctx.device)
    w = torch.randn(512, 512, device=ctx.device)

    def step() -> list[torch.Tensor]:
        return [x @ w]

    return step


@detbench.workload(suite="capability", items_per_step=4096)
def integer_ops(ctx: detbench.Context) -> Any:
    """Integer arithmetic, a cumulative sum and copies of int64 values: exact in every kernel."""
    i = torch.randint(-1000, 1000, (4096,), device=ctx.device)

    def step() -> list[torch.Tensor]:
        return [i * 3 + 7, i.cumsum(0), i.flip(0).clone()]

    return step
