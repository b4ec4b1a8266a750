"""batchnorm: BatchNorm1d/2d/3d in training mode (forward and backward) and in eval mode (forward
and the input gradient), float32, at activation shapes taken from real networks.

Batch norm is memory-bound: each case declares ``bytes_per_step`` and reports bandwidth rather
than FLOPs. Training mode is a per-channel reduction over (N, *spatial) in the forward (the batch
statistics) and two more in the backward (the weight and bias gradients); how a kernel splits and
combines those sums is where run-to-run differences could come from. On CUDA, torch hands inputs
with 3 or more dimensions to cuDNN's batch-norm kernels when cuDNN is enabled (channels-last
training inputs to its "spatial persistent" mode), and 2-D (N, C) inputs, or any input with cuDNN
disabled, to its native kernels; the cases cover each of these paths.

Training cases return the output, the gradients of the input, the weight and the bias, and the
running mean and variance after the step's update. The modules start from "trained" values (weight
near 1, bias near 0, nonzero running statistics) drawn from the seeded generator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, TypedDict

import torch
from torch import nn

import detbench

FLOAT32_BYTES = 4


@dataclass(frozen=True)
class Case:
    op: type[nn.modules.batchnorm._BatchNorm]
    source: str  # the network the activation comes from
    train: bool
    quick: tuple[int, ...]  # (N, C, *spatial)
    full: tuple[int, ...]
    channels_last: bool = False


class Shapes(TypedDict):
    """An activation's shape (N, C, *spatial) at each profile, shared by several cases."""

    quick: tuple[int, ...]
    full: tuple[int, ...]


# ResNet-50 conv2_x block output: 256 channels at 56x56. (N, C, H, W).
RESNET50_CONV2: Shapes = {"quick": (4, 64, 28, 28), "full": (64, 256, 56, 56)}
# R3D-18 conv2_x (video): 64 channels, 8 frames of 56x56. (N, C, T, H, W).
R3D18_CONV2: Shapes = {"quick": (1, 16, 4, 14, 14), "full": (8, 64, 8, 56, 56)}

CASES: dict[str, Case] = {
    # SimCLR projection head: BatchNorm1d on 2048 features, batch 4096. (N, C): native kernels.
    "batchnorm1d_train_simclr_head": Case(
        nn.BatchNorm1d, "SimCLR projection head", train=True, quick=(256, 256), full=(4096, 2048)
    ),
    # QuartzNet 15x5 (speech): 512 channels over 800 frames (16 s at 20 ms). (N, C, L).
    "batchnorm1d_train_quartznet": Case(
        nn.BatchNorm1d, "QuartzNet 15x5 block", train=True, quick=(4, 64, 128), full=(32, 512, 800)
    ),
    "batchnorm2d_train_resnet50_stage1": Case(
        nn.BatchNorm2d, "ResNet-50 conv2_x", train=True, **RESNET50_CONV2
    ),
    # The same in channels-last memory, as mixed-precision ResNet training recipes use.
    "batchnorm2d_train_resnet50_stage1_channels_last": Case(
        nn.BatchNorm2d, "ResNet-50 conv2_x", train=True, **RESNET50_CONV2, channels_last=True
    ),
    "batchnorm3d_train_r3d18_stage1": Case(
        nn.BatchNorm3d, "R3D-18 conv2_x", train=True, **R3D18_CONV2
    ),
    # Inference (or frozen-BN fine-tuning) on the same activations: a per-channel affine map.
    "batchnorm2d_eval_resnet50_stage1": Case(
        nn.BatchNorm2d, "ResNet-50 conv2_x", train=False, **RESNET50_CONV2
    ),
    "batchnorm3d_eval_r3d18_stage1": Case(
        nn.BatchNorm3d, "R3D-18 conv2_x", train=False, **R3D18_CONV2
    ),
}


def bytes_per_step(shape: tuple[int, ...], train: bool) -> int:
    """Bytes one step moves, counted from the element count E of the activation (float32).

    Training, the usual two-pass kernels: the forward reads x for the statistics, then reads x and
    writes y (3E); the backward reads x and dy for the two reductions, then reads x and dy and
    writes dx (5E): 8E in all. Eval: the forward reads x and writes y, the input gradient reads dy
    and writes dx: 4E. Per-channel vectors (C elements each) are left out: C is at most E/256
    here, so they are well under 1% of the total.
    """
    return (8 if train else 4) * math.prod(shape) * FLOAT32_BYTES


def _register(name: str, case: Case) -> None:
    shapes = {"quick": case.quick, "full": case.full}
    params: dict[str, Any] = {
        "op": case.op.__name__,
        "from": case.source,
        "module_mode": "train" if case.train else "eval",
        "grads": "input+weight+bias" if case.train else "input",
        **({"memory_format": "channels_last"} if case.channels_last else {}),
        "dtype": "float32",
        **{
            p: {
                "batch": s[0],
                "channels": s[1],
                **({"input": "x".join(map(str, s[2:]))} if s[2:] else {}),
            }
            for p, s in shapes.items()
        },
    }

    @detbench.workload(
        suite="batchnorm",
        name=name,
        params=params,
        items_per_step={p: s[0] for p, s in shapes.items()},
        bytes_per_step={p: bytes_per_step(s, case.train) for p, s in shapes.items()},
    )
    def factory(ctx: detbench.Context) -> Any:
        shape = shapes[ctx.profile]
        channels = shape[1]
        bn = case.op(channels).to(ctx.device).train(case.train)
        mean, var = bn.running_mean, bn.running_var  # (C,): live buffers, updated by training
        assert mean is not None and var is not None  # track_running_stats is on
        with torch.no_grad():  # "trained" parameters and statistics, not the 1/0 defaults
            bn.weight.copy_(1 + 0.1 * torch.randn(channels))
            bn.bias.copy_(0.1 * torch.randn(channels))
            mean.copy_(0.1 * torch.randn(channels))
            var.copy_(0.5 + torch.rand(channels))
        x = torch.randn(shape, device=ctx.device)  # (N, C, *spatial)
        if case.channels_last:
            x = x.to(memory_format=torch.channels_last)
        x.requires_grad_(True)
        grad_out = torch.randn_like(x)  # same memory format as x, like a real upstream gradient
        inputs = [x, bn.weight, bn.bias] if case.train else [x]

        def step() -> list[torch.Tensor]:
            out = bn(x)
            grads = torch.autograd.grad(out, inputs, grad_out)
            if not case.train:
                return [out.detach(), *grads]
            # The running statistics are updated in place by every step: they are fingerprinted
            # as they stand right after this one.
            return [out.detach(), *grads, mean, var]

        return step


for _name, _case in CASES.items():
    _register(_name, _case)
