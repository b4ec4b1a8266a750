"""A model whose build writes code to a temporary file and imports it, as torch-geometric does
(``torch_geometric.template.module_from_template``: a ``propagate`` generated per layer, written
to a ``tempfile.NamedTemporaryFile`` and imported with ``importlib``). The file's name differs in
each process, so every op it calls carries another file name in each process, while its bits are
the same: `run`, `audit` and `locate` must all call it reproducible.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from typing import Any

import torch
from torch import nn

import detbench

#: The generated module: a message-passing step (gather rows, scale, sum onto each node in a
#: fixed order) as torch-geometric generates one for a GCN layer.
SOURCE = """
import torch


def propagate(x, src, dst, weight, nodes):
    messages = x.index_select(0, src) * weight.unsqueeze(1)  # GENERATED gather
    out = torch.zeros(nodes, x.shape[1], dtype=x.dtype, device=x.device)
    return out.index_add(0, dst, messages)  # GENERATED scatter
"""


def module_from_template(prefix: str) -> Any:
    """Write ``SOURCE`` to a new temporary file and import it (its name differs per process)."""
    with tempfile.NamedTemporaryFile("w", prefix=prefix, suffix=".py", delete=False) as f:
        f.write(SOURCE)
    name = f.name.rsplit("/", 1)[-1].removesuffix(".py")
    spec = importlib.util.spec_from_file_location(name, f.name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    # torch-geometric leaves its files behind; a test does not (a worker may end without running
    # atexit). The code keeps the file's name, which is what differs from process to process.
    os.unlink(f.name)
    return module


class GraphConv(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.lin = nn.Linear(width, width)
        self.generated = module_from_template("detbench_graphconv_")

    def forward(self, x: torch.Tensor, edges: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        return self.generated.propagate(h, edges[0], edges[1], weight, x.shape[0])


@detbench.workload(suite="generated", items_per_step=64, fingerprint_steps=2)
def graph_conv(ctx: detbench.Context) -> Any:
    """Two graph convolutions trained with SGD, their message passing in generated code."""
    nodes, width = 64, 16
    layers = nn.ModuleList([GraphConv(width), GraphConv(width)]).to(ctx.device)
    opt = torch.optim.SGD(layers.parameters(), lr=0.1)
    x = torch.randn(nodes, width, device=ctx.device)
    edges = torch.randint(0, nodes, (2, 256), device=ctx.device)
    weight = torch.rand(256, device=ctx.device)

    def step() -> list[torch.Tensor]:
        opt.zero_grad()
        h = x
        for layer in layers:
            h = torch.relu(layer(h, edges, weight))
        loss = h.square().mean()
        loss.backward()
        opt.step()
        return [loss.detach(), *(p.detach() for p in layers.parameters())]

    return step
