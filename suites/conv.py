"""conv: Conv2d forward and backward at shapes taken from ResNet-50 (float32, NCHW).

The backward pass is where cuDNN's nondeterministic algorithms live (ConvolutionBackwardFilter and
ConvolutionBackwardData use atomics in some algorithms), so every case returns the output and the
gradients of the input, the weight and the bias.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

import detbench

# name: (in_channels, out_channels, kernel, stride, padding, {profile: (batch, height=width)})
CASES: dict[str, tuple[int, int, int, int, int, dict[str, tuple[int, int]]]] = {
    # The stem: 7x7/2 on the 224x224 image.
    "conv2d_resnet50_stem": (3, 64, 7, 2, 3, {"quick": (2, 64), "full": (64, 224)}),
    # conv2_x 3x3 at 56x56.
    "conv2d_resnet50_stage1_3x3": (64, 64, 3, 1, 1, {"quick": (4, 28), "full": (64, 56)}),
    # conv4_x 1x1 reduction at 14x14.
    "conv2d_resnet50_stage3_1x1": (1024, 256, 1, 1, 0, {"quick": (4, 7), "full": (64, 14)}),
    # conv5_x 3x3 at 7x7: many channels, small images.
    "conv2d_resnet50_stage4_3x3": (512, 512, 3, 1, 1, {"quick": (2, 7), "full": (64, 7)}),
}


def _register(
    name: str, cin: int, cout: int, k: int, stride: int, pad: int, sizes: dict[str, tuple[int, int]]
) -> None:
    params: dict[str, Any] = {
        "op": "Conv2d",
        "in_channels": cin,
        "out_channels": cout,
        "kernel": k,
        "stride": stride,
        "padding": pad,
        "dtype": "float32",
        **{p: {"batch": b, "height": hw, "width": hw} for p, (b, hw) in sizes.items()},
    }

    @detbench.workload(
        suite="conv", name=name, params=params, items_per_step={p: b for p, (b, _) in sizes.items()}
    )
    def factory(ctx: detbench.Context) -> Any:
        batch, hw = sizes[ctx.profile]
        conv = nn.Conv2d(cin, cout, k, stride=stride, padding=pad).to(ctx.device)
        x = torch.randn(batch, cin, hw, hw, device=ctx.device, requires_grad=True)  # (N, C, H, W)
        with torch.no_grad():
            grad_out = torch.randn_like(conv(x))
        inputs: list[torch.Tensor] = [x, conv.weight, conv.bias]  # type: ignore[list-item]

        def step() -> list[torch.Tensor]:
            out = conv(x)
            grads = torch.autograd.grad(out, inputs, grad_out)
            return [out, *grads]

        return step


for _name, (_cin, _cout, _k, _s, _p, _sizes) in CASES.items():
    _register(_name, _cin, _cout, _k, _s, _p, _sizes)
