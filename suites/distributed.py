"""distributed: data-parallel training steps under ``torchrun``, and the all-reduce on its own.

Each record is one fresh launch of ``world_size`` ranks (the setting; 2 by default): ``gloo`` on
CPU, ``nccl`` on CUDA with one GPU per rank (see ``detbench.distributed.launch``). The gradient
all-reduce is where data parallelism adds a source of difference: its algorithm (ring, tree,
NVLS) and DDP's bucketing decide the order of the floating-point additions of every gradient.

- ``ddp_convnet``: DDP around a small convolutional classifier (conv, BatchNorm, pooling), SGD
  with momentum: cuDNN convolutions plus the bucketed all-reduce of their gradients.
- ``ddp_transformer_block``: DDP around a pre-LayerNorm Transformer block (attention through
  ``scaled_dot_product_attention``, MLP), AdamW.
- ``allreduce_gradient``: ``all_reduce`` (sum) of one large gradient-shaped float32 tensor, alone,
  as DDP does it for one bucket: the collective's own determinism and bandwidth.

Every rank is seeded alike (DDP broadcasts rank 0's parameters at construction anyway) and draws
its batch from a generator seeded with the run's seed and its rank, so the ranks' gradients differ
and the all-reduce does real work. A training step returns the loss first, then every parameter
after the update, then the buffers (BatchNorm's running statistics: each rank's own, from its own
batch). ``items_per_step`` is one rank's batch: the record's is the sum over ranks.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import detbench

#: Steps in the fingerprint pass: enough to see a difference grow through the optimizer.
TRAIN_STEPS = {"quick": 4, "full": 20}


def _rank_generator(ctx: detbench.Context) -> torch.Generator:
    """A generator for this rank's data: the same per (seed, rank) in every replicate."""
    g = torch.Generator(device=ctx.device)
    g.manual_seed(ctx.seed * 1_000_003 + ctx.rank + 1)
    return g


def _outputs(loss: torch.Tensor, model: nn.Module) -> list[torch.Tensor]:
    return [
        loss.detach(),
        *(p.detach() for p in model.parameters()),
        *(b.detach() for b in model.buffers()),
    ]


# --- DDP around a convolutional model ---------------------------------------------------------


class ConvNet(nn.Module):
    """Three conv-BN-ReLU stages (stride 2 after the first), global pooling, a linear head."""

    def __init__(self, width: int, classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for i, cout in enumerate((width, 2 * width, 4 * width)):
            layers += [
                nn.Conv2d(cin, cout, 3, stride=1 if i == 0 else 2, padding=1, bias=False),
                nn.BatchNorm2d(cout),
                nn.ReLU(),
            ]
            cin = cout
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (N, 3, H, W) -> (N, classes)
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


CONV = {
    "quick": {"batch": 4, "width": 8, "image": 16},
    "full": {"batch": 64, "width": 64, "image": 64},
}


@detbench.workload(
    suite="distributed",
    items_per_step={p: s["batch"] for p, s in CONV.items()},
    loss_output=0,
    fingerprint_steps=TRAIN_STEPS,
    distributed=True,
    params={
        "model": "3-stage conv-BN-ReLU classifier",
        "classes": 10,
        "optimizer": "SGD(lr=0.05, momentum=0.9)",
        "dtype": "float32",
        "batch": "per rank",
        **CONV,
    },
)
def ddp_convnet(ctx: detbench.Context) -> Any:
    size = CONV[ctx.profile]
    model = ctx.ddp(ConvNet(size["width"], classes=10).to(ctx.device).train())
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = _rank_generator(ctx)
    hw = size["image"]
    x = torch.randn(size["batch"], 3, hw, hw, device=ctx.device, generator=g)  # (N, C, H, W)
    y = torch.randint(0, 10, (size["batch"],), device=ctx.device, generator=g)

    def step() -> list[torch.Tensor]:
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()  # DDP all-reduces the gradients, bucket by bucket, during backward
        opt.step()
        return _outputs(loss, model)

    return step


# --- DDP around a Transformer block -----------------------------------------------------------


class Block(nn.Module):
    """Pre-LayerNorm Transformer block: causal self-attention (SDPA) and a 4x MLP."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, D) -> (B, T, D)
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D/H)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


BLOCK = {
    "quick": {"batch": 2, "seq": 16, "dim": 32, "heads": 2},
    "full": {"batch": 8, "seq": 512, "dim": 1024, "heads": 16},
}


@detbench.workload(
    suite="distributed",
    items_per_step={p: s["batch"] * s["seq"] for p, s in BLOCK.items()},
    loss_output=0,
    fingerprint_steps=TRAIN_STEPS,
    distributed=True,
    attention=True,
    params={
        "model": "pre-LN Transformer block, causal SDPA",
        "optimizer": "AdamW(lr=1e-3)",
        "dtype": "float32",
        "items": "tokens per rank",
        **BLOCK,
    },
)
def ddp_transformer_block(ctx: detbench.Context) -> Any:
    size = BLOCK[ctx.profile]
    model = ctx.ddp(Block(size["dim"], size["heads"]).to(ctx.device).train())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = _rank_generator(ctx)
    x = torch.randn(size["batch"], size["seq"], size["dim"], device=ctx.device, generator=g)
    target = torch.randn(x.shape, device=ctx.device, generator=g)  # (B, T, D)

    def step() -> list[torch.Tensor]:
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        return _outputs(loss, model)

    return step


# --- the all-reduce alone ---------------------------------------------------------------------

#: Elements of the gradient: ResNet-50's 25.6 M parameters in full, 64 Ki at the quick size.
ALLREDUCE = {"quick": {"numel": 1 << 16}, "full": {"numel": 25_557_032}}


@detbench.workload(
    suite="distributed",
    items_per_step={p: s["numel"] for p, s in ALLREDUCE.items()},
    bytes_per_step={p: 4 * s["numel"] for p, s in ALLREDUCE.items()},
    distributed=True,
    params={"op": "all_reduce(SUM)", "dtype": "float32", "items": "elements per rank", **ALLREDUCE},
)
def allreduce_gradient(ctx: detbench.Context) -> Any:
    import torch.distributed as dist

    numel = ALLREDUCE[ctx.profile]["numel"]
    # A gradient of mixed magnitudes, different on every rank: the order of the additions
    # shows in the bits of the sum.
    grad = torch.randn(numel, device=ctx.device, generator=_rank_generator(ctx))
    grad *= torch.logspace(-4, 4, numel, device=ctx.device)
    buf = torch.empty_like(grad)

    def step() -> list[torch.Tensor]:
        buf.copy_(grad)  # the same input at every step: each step is the same all-reduce
        dist.all_reduce(buf)
        return [buf]

    return step
