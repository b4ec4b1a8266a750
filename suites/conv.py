"""conv: convolutions forward and backward at shapes taken from real networks (float32).

The backward pass is where cuDNN's nondeterministic algorithms live (ConvolutionBackwardFilter
and ConvolutionBackwardData accumulate with atomics in some algorithms), and where
``cudnn.deterministic`` and ``cudnn.benchmark`` change which algorithm runs. Dilated and grouped
convolutions are in the published complaints: their deterministic algorithms can be much slower.
Every case returns the output and the gradients of the input, the weight and the bias. Every
case is float32 and declares ``autocast=True``: under the ``autocast`` setting its convolutions run
in float16 or bfloat16, as in mixed-precision training.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

import detbench


@dataclass(frozen=True)
class Size:
    batch: int
    in_channels: int
    out_channels: int
    spatial: tuple[int, ...]  # (L,), (H, W) or (T, H, W)


@dataclass(frozen=True)
class Case:
    op: type[nn.Module]
    source: str  # the network the shape comes from
    kernel: int
    quick: Size
    full: Size
    options: dict[str, int] = field(default_factory=dict)  # stride, padding, dilation, groups


CASES: dict[str, Case] = {
    # wav2vec 2.0 feature encoder: Conv1d 512->512, kernel 3, stride 2, on ~1 s of 16 kHz audio.
    "conv1d_wav2vec2_feature": Case(
        nn.Conv1d,
        "wav2vec 2.0 feature encoder",
        kernel=3,
        quick=Size(2, 64, 64, (512,)),
        full=Size(32, 512, 512, (3199,)),
        options={"stride": 2},
    ),
    # ResNet-50 stem: 7x7 stride 2 on the 224x224 image.
    "conv2d_resnet50_stem": Case(
        nn.Conv2d,
        "ResNet-50 conv1",
        kernel=7,
        quick=Size(2, 3, 64, (64, 64)),
        full=Size(64, 3, 64, (224, 224)),
        options={"stride": 2, "padding": 3},
    ),
    # ResNet-50 conv2_x 3x3 at 56x56.
    "conv2d_resnet50_stage1_3x3": Case(
        nn.Conv2d,
        "ResNet-50 conv2_x",
        kernel=3,
        quick=Size(4, 64, 64, (28, 28)),
        full=Size(64, 64, 64, (56, 56)),
        options={"padding": 1},
    ),
    # ResNet-50 conv4_x 1x1 reduction at 14x14.
    "conv2d_resnet50_stage3_1x1": Case(
        nn.Conv2d,
        "ResNet-50 conv4_x",
        kernel=1,
        quick=Size(4, 1024, 256, (7, 7)),
        full=Size(64, 1024, 256, (14, 14)),
    ),
    # ResNet-50 conv5_x 3x3 at 7x7: many channels, small images.
    "conv2d_resnet50_stage4_3x3": Case(
        nn.Conv2d,
        "ResNet-50 conv5_x",
        kernel=3,
        quick=Size(2, 512, 512, (7, 7)),
        full=Size(64, 512, 512, (7, 7)),
        options={"padding": 1},
    ),
    # DeepLabv3 ASPP branch: 3x3 dilated convolution at output stride 16.
    "conv2d_dilated_deeplabv3": Case(
        nn.Conv2d,
        "DeepLabv3 ASPP (rate 12)",
        kernel=3,
        quick=Size(2, 64, 64, (16, 16)),
        full=Size(16, 2048, 256, (33, 33)),
        options={"padding": 12, "dilation": 12},
    ),
    # ResNeXt-50 32x4d conv3_x: grouped 3x3, 32 groups.
    "conv2d_grouped_resnext50": Case(
        nn.Conv2d,
        "ResNeXt-50 32x4d conv3_x",
        kernel=3,
        quick=Size(2, 64, 64, (14, 14)),
        full=Size(64, 256, 256, (28, 28)),
        options={"padding": 1, "groups": 32},
    ),
    # MobileNetV2 inverted residual: depthwise 3x3 (groups == channels).
    "conv2d_depthwise_mobilenetv2": Case(
        nn.Conv2d,
        "MobileNetV2 block 4",
        kernel=3,
        quick=Size(4, 96, 96, (14, 14)),
        full=Size(64, 384, 384, (28, 28)),
        options={"padding": 1, "groups": -1},  # -1: one group per channel
    ),
    # R3D-18 (video) conv2_x: 3x3x3 on 8 frames of 56x56.
    "conv3d_r3d18_stage1": Case(
        nn.Conv3d,
        "R3D-18 conv2_x",
        kernel=3,
        quick=Size(1, 16, 16, (4, 14, 14)),
        full=Size(8, 64, 64, (8, 56, 56)),
        options={"padding": 1},
    ),
    # 3D U-Net encoder level 2 (volumetric segmentation).
    "conv3d_unet3d_level2": Case(
        nn.Conv3d,
        "3D U-Net encoder",
        kernel=3,
        quick=Size(1, 8, 16, (12, 12, 12)),
        full=Size(2, 64, 128, (64, 64, 64)),
        options={"padding": 1},
    ),
    # DCGAN generator: 4x4 stride-2 transposed convolution, 16x16 -> 32x32.
    "convtranspose2d_dcgan": Case(
        nn.ConvTranspose2d,
        "DCGAN generator",
        kernel=4,
        quick=Size(4, 64, 32, (8, 8)),
        full=Size(128, 256, 128, (16, 16)),
        options={"stride": 2, "padding": 1},
    ),
}


def _conv_options(case: Case, size: Size) -> dict[str, int]:
    opts = dict(case.options)
    if opts.get("groups") == -1:
        opts["groups"] = size.in_channels
    return opts


def _register(name: str, case: Case) -> None:
    sizes = {"quick": case.quick, "full": case.full}
    params: dict[str, Any] = {
        "op": case.op.__name__,
        "from": case.source,
        "kernel": case.kernel,
        "dtype": "float32",
        **{k: ("depthwise" if v == -1 else v) for k, v in case.options.items()},
        **{
            p: {
                "batch": s.batch,
                "in_channels": s.in_channels,
                "out_channels": s.out_channels,
                "input": "x".join(map(str, s.spatial)),
            }
            for p, s in sizes.items()
        },
    }

    @detbench.workload(
        suite="conv",
        name=name,
        params=params,
        items_per_step={p: s.batch for p, s in sizes.items()},
        autocast=True,  # float32 convolutions: what AMP training casts to half
    )
    def factory(ctx: detbench.Context) -> Any:
        s = sizes[ctx.profile]
        conv = case.op(s.in_channels, s.out_channels, case.kernel, **_conv_options(case, s))
        conv = conv.to(ctx.device)
        # (N, C, *spatial)
        x = torch.randn(s.batch, s.in_channels, *s.spatial, device=ctx.device, requires_grad=True)
        with torch.no_grad():
            grad_out = torch.randn_like(conv(x))
        inputs: list[torch.Tensor] = [x, conv.weight, conv.bias]  # type: ignore[list-item]

        def step() -> list[torch.Tensor]:
            out = conv(x)
            grads = torch.autograd.grad(out, inputs, grad_out)
            return [out, *grads]

        return step


for _name, _case in CASES.items():
    _register(_name, _case)
