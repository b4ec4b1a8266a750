"""invariance: does the same request give the same bits in a different batch?

Every workload declares ``batch_sizes`` (``SIZES``, one tuple for both profiles: the declaration
is not per profile) and reads ``ctx.batch_size``. Row 0 is the same request at every size: every
input is the first ``b`` rows of one seeded tensor built at the largest size, drawn after the
weights, so neither depends on ``b``. detbench builds each workload at every size, runs a step
and compares row 0 of every batch-first output bitwise (``detbench.invariance``). Each step keeps
its batch-first inputs in ``step.inputs`` (for the suite's tests: row 0 of the input is the same
at every size).

- ``matmul_fp32``, ``matmul_fp16``, ``matmul_bf16``: ``x @ W``, a linear layer without bias.
- ``rmsnorm`` (``torch.nn.RMSNorm`` where the installed torch has it, else written out),
  ``layernorm``, ``softmax`` over a long last dimension.
- ``sdpa_padded``: a batch of requests of different lengths padded to the longest, keys masked
  per request; request 0 is the longest, so the padded length (the shape) is the same at every
  size and only the batch changes.
- ``sdpa_chunked_prefill``: the second chunk of a chunked prefill (the last ``chunk`` queries of
  every request against its ``2 * chunk`` keys: the cached first chunk plus its own, an explicit
  causal mask) beside the same query rows of the one-shot causal prefill of the whole prompt.
  Both are batch-first outputs, so detbench compares each across batch sizes; whether the two
  agree with each other (a different KV split of the same attention) is not a batch question
  and is checked in ``tests/test_suite_invariance.py`` (on a 2-thread CPU, torch 2.13, quick
  size: the same bits).
- ``embedding_mlp``: an embedding lookup and a 2-layer MLP on token ids.
- ``decoder_greedy``: a small decoder-only transformer (seeded weights) that greedily decodes
  ``new_tokens`` tokens, without a KV cache, for a batch of prompts (row 0 the reference prompt,
  the others other prompts). It returns the generated ids and the last logits, batch first: the
  study's measure, the number of distinct completions of one request decoded in different batch
  compositions, is the number of distinct row-0 completions across the sizes. ``items_per_step``
  is the tokens generated, so the throughput is tokens per second.

The price of invariance: ``<base>_invariant`` computes the same thing as ``<base>`` row by row
(each row alone, as in a batch of 1), so row 0's reduction order cannot depend on the batch; its
``params["invariant_reference_of"]`` names the base, and its throughput relative to the base is
the price. ``sdpa_*`` declare ``attention=True`` (the ``sdpa_backend`` setting picks the kernel).
No workload declares ``autocast`` (the dtypes are the case).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import detbench

SIZES = (1, 2, 4, 16, 64)
LARGEST = max(SIZES)
Step = Callable[[], list[torch.Tensor]]
Sizes = dict[str, dict[str, Any]]


def _batch(ctx: detbench.Context) -> int:
    return ctx.batch_size if ctx.batch_size is not None else LARGEST


def _rows(ctx: detbench.Context, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The first ``b`` rows of one seeded ``(LARGEST, *shape)`` tensor: row 0 is the same request
    at every batch size."""
    x = torch.randn(LARGEST, *shape, device=ctx.device, dtype=torch.float32)
    return x[: _batch(ctx)].to(dtype).contiguous()


def _ids(ctx: detbench.Context, vocab: int, *shape: int) -> torch.Tensor:
    x = torch.randint(0, vocab, (LARGEST, *shape), device=ctx.device)
    return x[: _batch(ctx)].contiguous()


def _per_row(fn: Callable[..., torch.Tensor], *batched: torch.Tensor) -> torch.Tensor:
    """``fn`` on each request alone (its rows ``i:i+1`` of every batched input), concatenated:
    the batch of 1's computation for every row, whatever the batch, so invariant by
    construction."""
    n = batched[0].shape[0]
    return torch.cat([fn(*(t[i : i + 1] for t in batched)) for i in range(n)])


def _expose(step: Step, *inputs: torch.Tensor) -> Step:
    """Keep the step's batch-first inputs on it (``step.inputs``) for tests."""
    setattr(step, "inputs", list(inputs))  # noqa: B010 (a function attribute; mypy-clean)
    return step


def _register(
    name: str,
    sizes: Sizes,
    *,
    per_item: Callable[[dict[str, Any]], int] | None = None,
    reference_of: str | None = None,
    attention: bool = False,
    extra: dict[str, Any] | None = None,
) -> Callable[[Callable[..., Step]], Callable[..., Step]]:
    """Register ``build(ctx, **sizes[profile]) -> step`` as ``invariance/name``. Items per step:
    the batch, times ``per_item(sizes[profile])`` (tokens per request) where given."""

    def items(ctx: detbench.Context) -> float:
        return _batch(ctx) * (per_item(sizes[ctx.profile]) if per_item else 1)

    params: dict[str, Any] = {**(extra or {}), **sizes}
    if reference_of is not None:
        params["invariant_reference_of"] = reference_of

    def deco(build: Callable[..., Step]) -> Callable[..., Step]:
        @detbench.workload(
            suite="invariance",
            name=name,
            params=params,
            items_per_step=items,
            batch_sizes=SIZES,
            attention=attention,
        )
        def factory(ctx: detbench.Context) -> Step:
            with torch.no_grad():
                return build(ctx, **sizes[ctx.profile])

        return build

    return deco


# --- matmul ------------------------------------------------------------------------------------

MATMUL: Sizes = {"quick": {"dim": 512}, "full": {"dim": 4096}}
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _matmul(dtype: torch.dtype, per_row: bool) -> Callable[..., Step]:
    def build(ctx: detbench.Context, dim: int) -> Step:
        w = torch.randn(dim, dim, device=ctx.device).div_(dim**0.5).to(dtype)
        x = _rows(ctx, dim, dtype=dtype)

        def step() -> list[torch.Tensor]:
            return [_per_row(lambda r: r @ w, x) if per_row else x @ w]

        return _expose(step, x)

    return build


for _tag, _dtype in DTYPES.items():
    _register(f"matmul_{_tag}", MATMUL, extra={"op": "x @ W", "dtype": str(_dtype)[6:]})(
        _matmul(_dtype, per_row=False)
    )
for _tag, _dtype in DTYPES.items():
    _register(
        f"matmul_{_tag}_invariant",
        MATMUL,
        reference_of=f"matmul_{_tag}",
        extra={"op": "x[i:i+1] @ W for each row i", "dtype": str(_dtype)[6:]},
    )(_matmul(_dtype, per_row=True))


# --- normalisation and softmax -----------------------------------------------------------------

NORM: Sizes = {"quick": {"tokens": 4, "hidden": 1024}, "full": {"tokens": 128, "hidden": 4096}}
SOFTMAX: Sizes = {"quick": {"length": 8192}, "full": {"length": 131072}}


class HandRMSNorm(nn.Module):
    """RMSNorm written out: ``x / sqrt(mean(x^2) + eps) * weight``, for a torch without
    ``nn.RMSNorm``."""

    def __init__(self, hidden: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rmsnorm_module(hidden: int) -> nn.Module:
    if hasattr(nn, "RMSNorm"):
        return nn.RMSNorm(hidden, eps=1e-6)
    return HandRMSNorm(hidden)


def _norm(kind: str, per_row: bool) -> Callable[..., Step]:
    def build(ctx: detbench.Context, tokens: int, hidden: int) -> Step:
        norm = _rmsnorm_module(hidden) if kind == "rms" else nn.LayerNorm(hidden)
        norm = norm.to(ctx.device)
        with torch.no_grad():  # seeded, not the identity: weight 1 + N(0, 0.1), bias N(0, 0.1)
            for pname, p in norm.named_parameters():
                p.copy_(torch.randn_like(p).mul_(0.1).add_(1.0 if pname == "weight" else 0.0))
        x = _rows(ctx, tokens, hidden)

        def step() -> list[torch.Tensor]:
            with torch.no_grad():
                return [_per_row(norm, x) if per_row else norm(x)]

        return _expose(step, x)

    return build


_RMS_OP = "torch.nn.RMSNorm" if hasattr(nn, "RMSNorm") else "RMSNorm written out"
_register("rmsnorm", NORM, per_item=lambda s: s["tokens"], extra={"op": _RMS_OP})(
    _norm("rms", per_row=False)
)
_register(
    "rmsnorm_invariant",
    NORM,
    per_item=lambda s: s["tokens"],
    reference_of="rmsnorm",
    extra={"op": f"{_RMS_OP}, each request alone"},
)(_norm("rms", per_row=True))
_register("layernorm", NORM, per_item=lambda s: s["tokens"], extra={"op": "torch.nn.LayerNorm"})(
    _norm("layer", per_row=False)
)
_register(
    "layernorm_invariant",
    NORM,
    per_item=lambda s: s["tokens"],
    reference_of="layernorm",
    extra={"op": "torch.nn.LayerNorm, each request alone"},
)(_norm("layer", per_row=True))


def _softmax(per_row: bool) -> Callable[..., Step]:
    def build(ctx: detbench.Context, length: int) -> Step:
        x = _rows(ctx, length)

        def step() -> list[torch.Tensor]:
            f = torch.nn.Softmax(dim=-1)
            return [_per_row(f, x) if per_row else f(x)]

        return _expose(step, x)

    return build


_register("softmax", SOFTMAX, extra={"op": "torch.softmax(x, dim=-1)"})(_softmax(per_row=False))
_register(
    "softmax_invariant",
    SOFTMAX,
    reference_of="softmax",
    extra={"op": "torch.softmax(x, dim=-1), each request alone"},
)(_softmax(per_row=True))


# --- attention ---------------------------------------------------------------------------------

SDPA: Sizes = {
    "quick": {"heads": 4, "head_dim": 32, "length": 64},
    "full": {"heads": 8, "head_dim": 64, "length": 512},
}
CHUNKED: Sizes = {
    "quick": {"heads": 4, "head_dim": 32, "chunk": 32},
    "full": {"heads": 8, "head_dim": 64, "chunk": 256},
}


def _sdpa_padded(per_row: bool) -> Callable[..., Step]:
    def build(ctx: detbench.Context, heads: int, head_dim: int, length: int) -> Step:
        q, k, v = (_rows(ctx, heads, length, head_dim) for _ in range(3))
        # Request lengths: request 0 is the longest (the padded length does not change with b).
        lengths = torch.randint(length // 4, length + 1, (LARGEST,), device=ctx.device)
        lengths[0] = length
        lengths = lengths[: _batch(ctx)]
        keep = torch.arange(length, device=ctx.device) < lengths[:, None]  # (b, length) keys
        mask = keep[:, None, None, :]  # (b, 1, 1, length): every query sees its request's keys

        def attend(
            q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor
        ) -> torch.Tensor:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=m)

        def step() -> list[torch.Tensor]:
            return [_per_row(attend, q, k, v, mask) if per_row else attend(q, k, v, mask)]

        return _expose(step, q, k, v)

    return build


_SDPA_OP = "scaled_dot_product_attention, key padding mask"
_register("sdpa_padded", SDPA, attention=True, extra={"op": _SDPA_OP, "dtype": "float32"})(
    _sdpa_padded(per_row=False)
)
_register(
    "sdpa_padded_invariant",
    SDPA,
    attention=True,
    reference_of="sdpa_padded",
    extra={"op": f"{_SDPA_OP}, each request alone", "dtype": "float32"},
)(_sdpa_padded(per_row=True))


@_register(
    "sdpa_chunked_prefill",
    CHUNKED,
    attention=True,
    extra={"op": "scaled_dot_product_attention, second prefill chunk vs one-shot prefill",
           "dtype": "float32"},
)  # fmt: skip
def sdpa_chunked_prefill(ctx: detbench.Context, heads: int, head_dim: int, chunk: int) -> Step:
    prompt = 2 * chunk
    q, k, v = (_rows(ctx, heads, prompt, head_dim) for _ in range(3))
    # Query i of the second chunk is position chunk + i: it sees keys 0 .. chunk + i.
    pos = torch.arange(prompt, device=ctx.device)
    mask = pos[None, :] <= (chunk + torch.arange(chunk, device=ctx.device))[:, None]

    def step() -> list[torch.Tensor]:
        chunked = F.scaled_dot_product_attention(q[:, :, chunk:], k, v, attn_mask=mask)
        oneshot = F.scaled_dot_product_attention(q, k, v, is_causal=True)[:, :, chunk:]
        return [chunked, oneshot.contiguous()]

    return _expose(step, q, k, v)


# --- embedding + MLP ---------------------------------------------------------------------------

EMBED: Sizes = {
    "quick": {"vocab": 1000, "dim": 128, "tokens": 8},
    "full": {"vocab": 32000, "dim": 1024, "tokens": 64},
}


def _embedding_mlp(per_row: bool) -> Callable[..., Step]:
    def build(ctx: detbench.Context, vocab: int, dim: int, tokens: int) -> Step:
        embed = nn.Embedding(vocab, dim).to(ctx.device)
        mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        mlp = mlp.to(ctx.device)
        ids = _ids(ctx, vocab, tokens)

        def block(t: torch.Tensor) -> torch.Tensor:
            return mlp(embed(t))

        def step() -> list[torch.Tensor]:
            with torch.no_grad():
                return [_per_row(block, ids) if per_row else block(ids)]

        return _expose(step, ids)

    return build


_register("embedding_mlp", EMBED, per_item=lambda s: s["tokens"], extra={"dtype": "float32"})(
    _embedding_mlp(per_row=False)
)
_register(
    "embedding_mlp_invariant",
    EMBED,
    per_item=lambda s: s["tokens"],
    reference_of="embedding_mlp",
    extra={"op": "embedding + MLP, each request alone", "dtype": "float32"},
)(_embedding_mlp(per_row=True))


# --- a small decoder, greedy decoding ------------------------------------------------------------

DECODER: Sizes = {
    "quick": {"vocab": 256, "dim": 64, "heads": 4, "layers": 2, "prompt": 4, "new_tokens": 8},
    "full": {"vocab": 8192, "dim": 512, "heads": 8, "layers": 4, "prompt": 64, "new_tokens": 32},
}


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


@_register(
    "decoder_greedy",
    DECODER,
    per_item=lambda s: s["new_tokens"],
    attention=True,
    extra={"model": "decoder-only transformer, pre-LayerNorm", "dtype": "float32"},
)
def decoder_greedy(
    ctx: detbench.Context,
    vocab: int,
    dim: int,
    heads: int,
    layers: int,
    prompt: int,
    new_tokens: int,
) -> Step:
    model = Decoder(vocab, dim, heads, layers, prompt + new_tokens).to(ctx.device).eval()
    prompts = _ids(ctx, vocab, prompt)

    def step() -> list[torch.Tensor]:
        with torch.no_grad():
            return greedy(model, prompts, new_tokens)

    return _expose(step, prompts)
