"""The small decoder-only transformer of the ``invariance`` suite's ``decoder_greedy`` and its
greedy decoding, and the step that decodes a batch of requests together or each alone. Not a
suite (its name starts with "_"): ``suites/invariance.py`` imports it by path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    """A pre-LayerNorm decoder block: causal self-attention (``scaled_dot_product_attention``)
    and a GELU MLP."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (N, T, dim)
        n, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(n, t, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.proj(a.transpose(1, 2).reshape(n, t, d))
        return x + self.mlp(self.ln2(x))


class Decoder(nn.Module):
    def __init__(self, vocab: int, dim: int, heads: int, layers: int, context: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.blocks = nn.Sequential(*(Block(dim, heads) for _ in range(layers)))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # (N, T) -> (N, T, vocab)
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.head(self.ln(self.blocks(self.embed(ids) + self.pos(pos))))


def greedy(model: Decoder, prompts: torch.Tensor, new_tokens: int) -> list[torch.Tensor]:
    """Greedy decoding without a KV cache: (generated ids (N, new_tokens), last logits)."""
    ids = prompts
    logits = torch.empty(0)
    for _ in range(new_tokens):
        logits = model(ids)[:, -1]
        ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
    return [ids[:, prompts.shape[1] :], logits]


def prompts(ctx: Any, batch: int, vocab: int, prompt: int) -> torch.Tensor:
    """Row 0: the reference request (the global generator, after the weights); the other
    ``batch - 1`` rows: requests drawn from a generator seeded by ``batch`` (and the run's seed),
    so the other requests of the batch change with its size."""
    ref = torch.randint(0, vocab, (1, prompt), device=ctx.device)
    others = torch.Generator().manual_seed(ctx.seed * 1_000_003 + batch)
    rest = torch.randint(0, vocab, (batch - 1, prompt), generator=others).to(ctx.device)
    return torch.cat([ref, rest])


def build(
    ctx: Any,
    batch: int,
    per_row: bool,
    vocab: int,
    dim: int,
    heads: int,
    layers: int,
    prompt: int,
    new_tokens: int,
) -> Callable[[], list[torch.Tensor]]:
    """The step: greedy decoding of ``batch`` requests, batched, or each alone (``per_row``: the
    batch of 1's computation for every request, invariant by construction). Its prompts are
    on it as ``step.prompts``."""
    model = Decoder(vocab, dim, heads, layers, prompt + new_tokens).to(ctx.device).eval()
    ids = prompts(ctx, batch, vocab, prompt)

    def step() -> list[torch.Tensor]:
        with torch.no_grad():
            if not per_row:
                return greedy(model, ids, new_tokens)
            alone = [greedy(model, ids[i : i + 1], new_tokens) for i in range(len(ids))]
            return [torch.cat(out) for out in zip(*alone, strict=True)]

    setattr(step, "prompts", ids)  # noqa: B010 (a function attribute; mypy-clean)
    return step
