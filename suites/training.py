"""training: full training steps (forward, loss, backward, optimizer step) of three models.

- ``resnet18_cifar``: a ResNet-18 (basic residual blocks, BatchNorm) on CIFAR-sized images, SGD
  with momentum: cuDNN convolutions and BatchNorm, forward and backward.
- ``lstm_language_model``: a 2-layer LSTM word-level language model (PTB-medium sizes in full),
  gradient clipping, SGD: cuDNN's RNN kernels and the embedding backward (an index_add).
- ``transformer_encoder``: a pre-LayerNorm Transformer encoder whose attention is
  ``F.scaled_dot_product_attention``, dropout, AdamW: cuBLAS matmuls and the fused attention
  backward.

Every step returns the loss first (recorded at every step of the fingerprint pass, so a report can
show where two runs first diverge), then every parameter after the update, then every buffer
(BatchNorm's running mean and variance, updated in the forward pass: they do not feed a training
forward, but they decide every evaluation and checkpoint): one differing bit anywhere in the step
shows in the fingerprint.

All three are float32 models that users train under automatic mixed precision: they declare
``autocast=True`` (the ``autocast`` setting runs each step under ``torch.autocast``). The
Transformer calls ``scaled_dot_product_attention`` and declares ``attention=True`` (the
``sdpa_backend`` setting picks its kernel).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import detbench

#: Steps in the fingerprint pass: enough to see how a divergence between runs grows. Full: 10. On
#: the H100 (results/20261124-085144-cuda-full-conv-rnn-training, 20 steps then) every model that
#: was not reproducible differed from its first step on, so 10 steps find the same verdicts, and
#: save about 0.9 s of each record's 3.0 s (docs/gpu-session.md, "The 15-minute matrix").
TRAIN_STEPS = {"quick": 8, "full": 10}


def _outputs(loss: torch.Tensor, model: nn.Module) -> list[torch.Tensor]:
    return [
        loss.detach(),
        *(p.detach() for p in model.parameters()),
        *(b.detach() for b in model.buffers()),
    ]


# --- ResNet-18 ---------------------------------------------------------------------------------


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:  # projection shortcut when the shape changes
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.shortcut(x))


class ResNet(nn.Module):
    """ResNet-18 for 32x32 images: a 3x3 stem, four stages of two basic blocks, global pooling."""

    def __init__(self, width: int, blocks: int, classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()
        )
        layers: list[nn.Module] = []
        cin = width
        for stage in range(4):
            cout = width * 2**stage
            for b in range(blocks):
                layers.append(BasicBlock(cin, cout, 2 if (b == 0 and stage > 0) else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (N, 3, H, W) -> (N, classes)
        y = self.layers(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


RESNET = {
    "quick": {"batch": 4, "width": 8, "blocks": 1, "image": 16},
    "full": {"batch": 256, "width": 64, "blocks": 2, "image": 32},  # ResNet-18 proper on CIFAR
}


@detbench.workload(
    suite="training",
    items_per_step={p: s["batch"] for p, s in RESNET.items()},
    loss_output=0,
    fingerprint_steps=TRAIN_STEPS,
    autocast=True,
    params={
        "model": "ResNet-18 (CIFAR stem)",
        "classes": 10,
        "optimizer": "SGD(lr=0.1, momentum=0.9, weight_decay=5e-4)",
        "dtype": "float32",
        **RESNET,
    },
)
def resnet18_cifar(ctx: detbench.Context) -> Any:
    size = RESNET[ctx.profile]
    model = ResNet(size["width"], size["blocks"], classes=10).to(ctx.device).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    hw = size["image"]
    x = torch.randn(size["batch"], 3, hw, hw, device=ctx.device)  # (N, C, H, W)
    y = torch.randint(0, 10, (size["batch"],), device=ctx.device)

    def step() -> list[torch.Tensor]:
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return _outputs(loss, model)

    return step


# --- LSTM language model -----------------------------------------------------------------------


class LSTMLanguageModel(nn.Module):
    def __init__(self, vocab: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.lstm = nn.LSTM(hidden, hidden, layers, batch_first=True, dropout=0.5)
        self.drop = nn.Dropout(0.5)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # (N, T) -> (N, T, vocab)
        h, _ = self.lstm(self.drop(self.embed(tokens)))
        return self.head(self.drop(h))


LSTM_LM = {
    "quick": {"batch": 4, "seq": 16, "vocab": 500, "hidden": 64},
    "full": {"batch": 64, "seq": 35, "vocab": 10000, "hidden": 650},  # PTB "medium"
}
LSTM_LAYERS = 2


def _lstm_lm_flops(ctx: detbench.Context) -> int:
    """Matrix-multiply FLOPs of one training step, from the shapes, as ``suites/rnn.py`` counts
    its RNNs: on CUDA with cuDNN the LSTM is one fused op that torch's FLOP counter cannot see
    into, without cuDNN it is plain matmuls, and the figure must not change with the mode.

    Per token (N * T of them): each LSTM layer does 4 gate projections of its input (H features)
    and of its hidden state (H): 2 * 4 * H * (H + H) FLOPs; the output layer 2 * H * V. The
    backward pass computes the gradients of the inputs and of the weights, each as costly as the
    forward: 3x in all. The embedding lookup and its backward (an index_add), dropout, the loss,
    gradient clipping and SGD are elementwise or gathers: 0, as in ``torch.utils.flop_counter``.
    """
    s = LSTM_LM[ctx.profile]
    tokens, hidden = s["batch"] * s["seq"], s["hidden"]
    lstm = LSTM_LAYERS * 2 * 4 * hidden * (hidden + hidden)
    head = 2 * hidden * s["vocab"]
    return 3 * tokens * (lstm + head)


@detbench.workload(
    suite="training",
    items_per_step={p: s["batch"] * s["seq"] for p, s in LSTM_LM.items()},  # tokens
    flops_per_step=_lstm_lm_flops,
    loss_output=0,
    fingerprint_steps=TRAIN_STEPS,
    autocast=True,
    params={
        "model": "2-layer LSTM LM, dropout 0.5",
        "optimizer": "SGD(lr=1) + clip_grad_norm(0.25)",
        "dtype": "float32",
        **LSTM_LM,
    },
)
def lstm_language_model(ctx: detbench.Context) -> Any:
    size = LSTM_LM[ctx.profile]
    model = LSTMLanguageModel(size["vocab"], size["hidden"], LSTM_LAYERS).to(ctx.device).train()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    # Next-token prediction on a fixed random batch: (N, T + 1) tokens.
    tokens = torch.randint(0, size["vocab"], (size["batch"], size["seq"] + 1), device=ctx.device)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    def step() -> list[torch.Tensor]:
        opt.zero_grad(set_to_none=True)
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, size["vocab"]), targets.reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        return _outputs(loss, model)

    return step


# --- Transformer encoder -----------------------------------------------------------------------


class EncoderLayer(nn.Module):
    """Pre-LayerNorm block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.dropout = dropout
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (N, T, D)
        n, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(n, t, 3, self.heads, d // self.heads).unbind(2)
        # (N, H, T, D/H) each
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0
        )
        x = x + self.drop(self.proj(a.transpose(1, 2).reshape(n, t, d)))
        return x + self.drop(self.mlp(self.ln2(x)))


class TransformerEncoder(nn.Module):
    def __init__(
        self, vocab: int, dim: int, heads: int, layers: int, seq: int, classes: int
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(seq, dim) * 0.02)
        self.layers = nn.Sequential(*(EncoderLayer(dim, heads, 0.1) for _ in range(layers)))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # (N, T) -> (N, classes)
        h = self.layers(self.embed(tokens) + self.pos)
        return self.head(self.ln(h).mean(dim=1))


TRANSFORMER = {
    "quick": {"batch": 4, "seq": 32, "vocab": 256, "dim": 32, "heads": 2, "layers": 2},
    "full": {"batch": 32, "seq": 512, "vocab": 30522, "dim": 768, "heads": 12, "layers": 6},
}


@detbench.workload(
    suite="training",
    items_per_step={p: s["batch"] for p, s in TRANSFORMER.items()},  # sequences
    loss_output=0,
    fingerprint_steps=TRAIN_STEPS,
    autocast=True,
    attention=True,
    params={
        "model": "pre-LN Transformer encoder, SDPA attention, dropout 0.1",
        "task": "sequence classification, 10 classes",
        "optimizer": "AdamW(lr=3e-4)",
        "dtype": "float32",
        **TRANSFORMER,
    },
)
def transformer_encoder(ctx: detbench.Context) -> Any:
    size = TRANSFORMER[ctx.profile]
    model = (
        TransformerEncoder(
            size["vocab"], size["dim"], size["heads"], size["layers"], size["seq"], classes=10
        )
        .to(ctx.device)
        .train()
    )
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    tokens = torch.randint(0, size["vocab"], (size["batch"], size["seq"]), device=ctx.device)
    labels = torch.randint(0, 10, (size["batch"],), device=ctx.device)

    def step() -> list[torch.Tensor]:
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(tokens), labels)
        loss.backward()
        opt.step()
        return _outputs(loss, model)

    return step
