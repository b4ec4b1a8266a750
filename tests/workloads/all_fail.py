"""A user's own workloads that all fail: a shape error in the step, and a step that returns a
string among its tensors."""

import torch

import detbench


@detbench.workload(suite="custom", items_per_step=4)
def shape_typo(ctx):
    x = torch.randn(4, 8, device=ctx.device)
    w = torch.randn(7, 3, device=ctx.device)
    return lambda: {"y": x @ w}


@detbench.workload(suite="custom", items_per_step=4)
def returns_a_name(ctx):
    x = torch.randn(4, 8, device=ctx.device)
    return lambda: {"y": x.sum(), "name": "hello"}
