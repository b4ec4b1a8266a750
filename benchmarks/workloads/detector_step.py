"""A user's own model with a training step of about 2 s on the 2-core development VM: the size of
issue 39's Faster R-CNN step (torchvision's wheel on that VM is a CUDA build, so the model is
written here in plain torch): a convolutional backbone over three 512x512 images, a
feature-pyramid-like merge, and a dense head scored against per-pixel targets, trained with SGD.
No suite figure prices it: the plan's probe measures a record of it.

    python -m detbench run --workload benchmarks/workloads/detector_step.py --device cpu \
        --mode default --mode det-algos --replicates 3 --out DIR
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

import detbench


def _stage(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=2, padding=1),
        nn.BatchNorm2d(cout),
        nn.ReLU(),
        nn.Conv2d(cout, cout, 3, padding=1),
        nn.BatchNorm2d(cout),
        nn.ReLU(),
    )


@detbench.workload(suite="user_detector", items_per_step=3, loss_output=0)
def detector_train_step(ctx: detbench.Context) -> Any:
    stages = nn.ModuleList([_stage(3, 64), _stage(64, 128), _stage(128, 256), _stage(256, 384)])
    lateral = nn.ModuleList([nn.Conv2d(c, 128, 1) for c in (64, 128, 256, 384)])
    head = nn.Sequential(nn.Conv2d(128, 128, 3, padding=1), nn.ReLU(), nn.Conv2d(128, 9, 1))
    model = nn.ModuleList([stages, lateral, head]).to(ctx.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = torch.randn(3, 3, 512, 512, device=ctx.device)  # (B, C, H, W)
    targets = torch.randint(0, 9, (3, 256, 256), device=ctx.device)  # a class per location

    def step() -> list[torch.Tensor]:
        opt.zero_grad()
        x, features = images, []
        for stage in stages:
            x = stage(x)
            features.append(x)
        # Top-down merge: each level upsampled onto the finer one (a feature pyramid's path).
        merged = lateral[-1](features[-1])
        for level in range(len(features) - 2, -1, -1):
            merged = nn.functional.interpolate(merged, scale_factor=2.0) + lateral[level](
                features[level]
            )
        loss = nn.functional.cross_entropy(head(merged), targets)
        loss.backward()
        opt.step()
        return [loss.detach()]

    return step
