"""The ``models`` suite's workloads from diffusers, PyTorch Geometric and timm: a diffusion
UNet's noise-prediction step, two graph networks' node classification, and a timm CNN.

Not a suite (its name starts with "_"): ``suites/models.py`` calls ``define`` with its own
``_train`` (the decorator that registers a training step as ``models/NAME``), so every workload
is registered from ``models.py``, under its ``models/`` name, and each library is imported by the
workload's factory through ``_models.library`` (``unsupported`` with the reason where it does not
import).

What each exercises on CUDA:

- ``diffusers_unet2d``: GroupNorm, 3x3 convolutions, self-attention at one resolution (diffusers'
  ``AttnProcessor2_0``, torch's ``scaled_dot_product_attention``), and nearest-neighbour
  upsampling (``F.interpolate(mode="nearest")``), whose backward sums each input pixel's 2x2
  gradients.
- ``pyg_gcn``, ``pyg_sage``: message passing, whose sum and mean aggregations scatter-add every
  edge's message into its target node (``Tensor.scatter_add_``, in PyG 2.8 without
  torch-scatter; ``GCNConv`` also scatter-adds the degrees of its normalization), and whose
  backward adds each node's gradient from all its edges (the backward of ``index_select``). On
  CUDA those are atomic adds in whatever order the threads arrive: the classic nondeterminism of
  graph networks.
- ``timm_mobilenetv3``: timm's ``mobilenetv3_large_100`` (depthwise convolutions,
  squeeze-excitation, hard-swish, BatchNorm), with ``pretrained=False``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import detbench

Sizes = dict[str, dict[str, Any]]
#: ``models._train``: (name, library, sizes, items, what, attention) -> decorator of a builder.
Train = Callable[..., Callable[[Callable[..., Any]], Callable[..., Any]]]
DIFFUSERS, PYG, TIMM = "diffusers", "torch_geometric", "timm"

UNET: Sizes = {
    # 0.18M parameters: 0.08 s a step on one thread of the development CPU.
    "quick": {
        "batch": 2,
        "image": 16,
        "channels": [16, 32],
        "norm_groups": 8,
        "layers_per_block": 1,
        "down": ["DownBlock2D", "AttnDownBlock2D"],
        "up": ["AttnUpBlock2D", "UpBlock2D"],
        "timesteps": 1000,
    },
    # The DDPM CIFAR-10 UNet's sizes (35.7M parameters), at its training batch of 128.
    "full": {
        "batch": 128,
        "image": 32,
        "channels": [128, 256, 256, 256],
        "norm_groups": 32,
        "layers_per_block": 2,
        "down": ["DownBlock2D", "AttnDownBlock2D", "DownBlock2D", "DownBlock2D"],
        "up": ["UpBlock2D", "UpBlock2D", "AttnUpBlock2D", "UpBlock2D"],
        "timesteps": 1000,
    },
}

#: A seeded random graph: ``edges`` directed edges between uniformly drawn nodes, Gaussian
#: features. At full, ogbn-arxiv's sizes (169,343 nodes, 1,166,243 edges, 128 features, 40
#: classes).
GRAPH: Sizes = {
    "quick": {"nodes": 2000, "edges": 20000, "features": 32, "hidden": 64, "classes": 8},
    "full": {"nodes": 169343, "edges": 1166243, "features": 128, "hidden": 256, "classes": 40},
}

TIMM_CNN: Sizes = {
    "quick": {"batch": 2, "image": 32, "classes": 10},
    "full": {"batch": 128, "image": 224, "classes": 1000},
}


def define(train: Train, m: Any) -> None:
    """Register this module's workloads through ``train`` (``models._train``); ``m`` is the
    suite's helper module ``_models`` (``library``, ``on_device``, ``training_step``)."""

    def batch(s: dict[str, Any]) -> int:
        return int(s["batch"])

    def nodes(s: dict[str, Any]) -> int:
        return int(s["nodes"])

    @train(
        "diffusers_unet2d",
        DIFFUSERS,
        UNET,
        batch,
        {
            "model": "diffusers UNet2DModel (GroupNorm, self-attention, nearest upsampling)",
            "task": (
                "DDPM noise prediction: MSE against the noise of a seeded noisy batch "
                "(DDPMScheduler.add_noise, linear betas, 1000 steps)"
            ),
            "optimizer": "AdamW(lr=1e-4)",
            "dtype": "float32",
        },
    )
    def diffusers_unet2d(ctx: detbench.Context, **s: Any) -> Any:
        diffusers = m.library(DIFFUSERS)
        model = m.on_device(
            ctx,
            lambda: diffusers.UNet2DModel(
                sample_size=s["image"],
                in_channels=3,
                out_channels=3,
                block_out_channels=tuple(s["channels"]),
                norm_num_groups=s["norm_groups"],
                layers_per_block=s["layers_per_block"],
                down_block_types=tuple(s["down"]),
                up_block_types=tuple(s["up"]),
            ),
        )
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        scheduler = diffusers.DDPMScheduler(num_train_timesteps=s["timesteps"])
        shape = (s["batch"], 3, s["image"], s["image"])  # (N, C, H, W)
        clean = torch.randn(shape, device=ctx.device)
        noise = torch.randn(shape, device=ctx.device)
        t = torch.randint(0, s["timesteps"], (s["batch"],), device=ctx.device)
        noisy = scheduler.add_noise(clean, noise, t)  # once: the step is the model's alone

        def loss() -> torch.Tensor:
            return F.mse_loss(model(noisy, t).sample, noise)

        return m.training_step(model, opt, loss)

    def graph(ctx: detbench.Context, s: dict[str, Any]) -> tuple[torch.Tensor, ...]:
        n = s["nodes"]
        edge_index = torch.randint(0, n, (2, s["edges"]), device=ctx.device)  # (2, E)
        x = torch.randn(n, s["features"], device=ctx.device)  # (nodes, features)
        return x, edge_index, torch.randint(0, s["classes"], (n,), device=ctx.device)

    def gnn(name: str, cls: str, what: str) -> None:
        @train(
            name,
            PYG,
            GRAPH,
            nodes,
            {
                "model": what,
                "task": "node classification on a seeded random graph, every node labelled",
                "optimizer": "Adam(lr=0.01, weight_decay=5e-4)",
                "dtype": "float32",
            },
            attention=False,
        )
        def build(ctx: detbench.Context, **s: Any) -> Any:
            models = m.library(PYG).nn.models
            model = m.on_device(
                ctx,
                lambda: getattr(models, cls)(
                    in_channels=s["features"],
                    hidden_channels=s["hidden"],
                    num_layers=2,
                    out_channels=s["classes"],
                    dropout=0.5,
                ),
            )
            opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
            x, edge_index, y = graph(ctx, s)
            return m.training_step(model, opt, lambda: F.cross_entropy(model(x, edge_index), y))

    gnn(
        "pyg_gcn",
        "GCN",
        "PyTorch Geometric GCN: 2 GCNConv layers (symmetric normalization, "
        "sum aggregation), ReLU, dropout 0.5",
    )
    gnn(
        "pyg_sage",
        "GraphSAGE",
        "PyTorch Geometric GraphSAGE: 2 SAGEConv layers (mean aggregation), ReLU, dropout 0.5",
    )

    @train(
        "timm_mobilenetv3",
        TIMM,
        TIMM_CNN,
        batch,
        {
            "model": (
                "timm mobilenetv3_large_100, pretrained=False (depthwise convolutions, "
                "squeeze-excitation, hard-swish, BatchNorm)"
            ),
            "task": "image classification, label smoothing 0.1",
            "optimizer": "AdamW(lr=1e-3, weight_decay=0.05)",
            "dtype": "float32",
        },
        attention=False,
    )
    def timm_mobilenetv3(ctx: detbench.Context, **s: Any) -> Any:
        timm = m.library(TIMM)
        model = m.on_device(
            ctx,
            lambda: timm.create_model(
                "mobilenetv3_large_100", pretrained=False, num_classes=s["classes"]
            ),
        )
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
        x = torch.randn(s["batch"], 3, s["image"], s["image"], device=ctx.device)
        y = torch.randint(0, s["classes"], (s["batch"],), device=ctx.device)

        def loss() -> torch.Tensor:
            return F.cross_entropy(model(x), y, label_smoothing=0.1)

        return m.training_step(model, opt, loss)
