"""What the ``models`` suite's workloads share: importing the library a model comes from (or
saying why it cannot), building a model on the device, and a training step's result. Not a suite
(its name starts with "_"): ``suites/models.py`` imports it by path."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch
from torch import nn

import detbench

#: Steps in a training workload's fingerprint pass: at full, the training suite's 10 (on the H100
#: every nondeterministic model differed from its first step on; suites/training.py); at quick,
#: few, so the CPU matrix stays short.
TRAIN_STEPS = {"quick": 4, "full": 10}


#: How to get a library, in the reason of an ``unsupported`` record: the ``models`` extra has
#: those that never replace an installed torch; timm needs torchvision, whose wheel pins one
#: torch build.
_HINTS = {
    **dict.fromkeys(
        ("transformers", "diffusers", "torch_geometric"), " (pip install 'detbench[models]')"
    ),
    "timm": " (pip install timm: it needs the torchvision built for this torch)",
}


def library(name: str) -> ModuleType:
    """``import NAME``, or ``detbench.Unsupported`` saying that the workload needs it and why it
    cannot be had here (not installed, or failing to import: its own error), so the record is
    ``unsupported`` with that reason."""
    try:
        return importlib.import_module(name)
    except Exception as exc:  # an ImportError, or a library that breaks while importing
        hint = _HINTS.get(name, "")
        raise detbench.Unsupported(
            f"needs {name}, which does not import here{hint}: {type(exc).__name__}: {exc}"
        ) from None


def on_device(ctx: detbench.Context, make: Callable[[], nn.Module]) -> nn.Module:
    """``make()`` with its parameters created on the device (no copy from the host: a 124M
    parameter model is built in place), in training mode."""
    with ctx.device:
        model = make()
    return model.to(ctx.device).train()


def hf_model(ctx: detbench.Context, auto: str, config: Any, attn: str) -> nn.Module:
    """A Hugging Face Transformers model from ``config`` alone (random weights, drawn from the
    seeded generators; no download), through ``transformers.AUTO.from_config`` with the attention
    implementation ``attn`` ("sdpa": torch's ``scaled_dot_product_attention``, whose kernel the
    ``sdpa_backend`` setting picks; "eager": matmuls and softmax written out). The implementation
    the model really runs (``config._attn_implementation``) is noted for the record."""
    transformers = library("transformers")
    factory = getattr(transformers, auto)
    model: Any = on_device(ctx, lambda: factory.from_config(config, attn_implementation=attn))
    ctx.note(attn_implementation=model.config._attn_implementation)
    return model


def trained(loss: torch.Tensor, model: nn.Module) -> dict[str, Any]:
    """A training step's result: the loss first (``loss_output=0``), then every parameter after
    the update and every buffer (BatchNorm's running statistics), as a dict: one differing bit
    anywhere in the step shows in the fingerprint."""
    return {
        "loss": loss.detach(),
        "parameters": [p.detach() for p in model.parameters()],
        "buffers": [b.detach() for b in model.buffers()],
    }


def training_step(
    model: nn.Module, opt: torch.optim.Optimizer, loss_of: Callable[[], torch.Tensor]
) -> Callable[[], dict[str, Any]]:
    """One training step: zero the gradients, the forward with its loss, backward, the
    optimizer's update."""

    def step() -> dict[str, Any]:
        opt.zero_grad(set_to_none=True)
        loss = loss_of()
        loss.backward()
        opt.step()
        return trained(loss, model)

    return step
