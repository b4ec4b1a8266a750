"""training: one full training step (forward, loss, backward, optimizer step) of a small CNN
classifier on CIFAR-sized images: three conv-BatchNorm-ReLU blocks, global pooling, a linear head,
cross-entropy, SGD with momentum.

The step returns the loss, the logits and every parameter after the update, so a single differing
bit anywhere in the step shows in the fingerprint.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import detbench

SIZES = {"quick": {"batch": 16, "width": 16}, "full": {"batch": 256, "width": 64}}


def small_cnn(width: int, classes: int = 10) -> nn.Module:
    def block(cin: int, cout: int, stride: int) -> list[nn.Module]:
        return [
            nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
        ]

    return nn.Sequential(
        *block(3, width, 1),  # (N, w, 32, 32)
        *block(width, 2 * width, 2),  # (N, 2w, 16, 16)
        *block(2 * width, 4 * width, 2),  # (N, 4w, 8, 8)
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4 * width, classes),
    )


@detbench.workload(
    suite="training",
    items_per_step={p: s["batch"] for p, s in SIZES.items()},
    params={
        "model": "3-block CNN + BatchNorm",
        "image": "3x32x32",
        "classes": 10,
        "optimizer": "SGD(lr=0.05, momentum=0.9)",
        "dtype": "float32",
        **SIZES,
    },
)
def small_cnn_classifier(ctx: detbench.Context) -> Any:
    size = SIZES[ctx.profile]
    model = small_cnn(size["width"]).to(ctx.device).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(size["batch"], 3, 32, 32, device=ctx.device)  # (N, C, H, W)
    y = torch.randint(0, 10, (size["batch"],), device=ctx.device)

    def step() -> list[torch.Tensor]:
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        opt.step()
        return [loss.detach(), logits.detach(), *(p.detach() for p in model.parameters())]

    return step
