"""The small decoder-only transformer of the ``invariance`` suite's ``decoder_greedy`` and its
greedy decoding. Not a suite (its name starts with "_"): ``suites/invariance.py`` imports it by
path."""

from __future__ import annotations

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
