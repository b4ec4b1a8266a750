"""ops: one workload per op of torch's determinism catalog, with inputs that reach the
nondeterministic path: many duplicate indices, large reductions, overlapping pooling windows.

The catalog is the docstring of the installed ``torch.use_deterministic_algorithms`` (parsed by
``detbench.catalog``): ops that act deterministically under ``mode=True`` and ops that raise.
Each workload's ``params["doc"]`` lists the entries it corresponds to, verbatim, and
``params["doc_list"]`` the list each came from; both are None when the installed docstring does
not name the op (in torch 2.13: embedding, embedding_bag with mode='sum' and
scaled_dot_product_attention).

Beside the catalog, ops whose result or cost depends on the settings (``detbench settings``):
``scaled_dot_product_attention`` forward and backward in float32 under each ``sdpa_backend``,
float16 and bfloat16 GEMMs shaped for split-K (what the reduced-precision reduction switches act
on), and memory from ``torch.empty``: written whole (what ``fill_uninitialized_memory`` costs) or
returned unwritten (what it makes reproducible). ``cumsum`` and the ``scatter_reduce`` cases are
plain functions that ``torch.compile`` compiles whole (the ``execution`` setting).

The spatial workloads are defined in ``_ops_spatial.py`` and the settings workloads in
``_ops_settings.py`` (files starting with "_" are not suites); every workload is registered from
this file, as ``ops/NAME``.

Work per step: ``bytes_per_step`` counts each tensor the step reads once and each tensor it writes
once (float32: 4 bytes, indices int64: 8), forward and backward, at the sizes of the profile;
caches and the zero-fill of an output are not counted. ``items_per_step`` is the number of updates
(indexed ops), of looked-up or pooled elements, or of sequences (losses), as each case says.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import detbench

Step = Callable[[], list[torch.Tensor]]
Sizes = dict[str, dict[str, Any]]
F4, I8 = 4, 8  # bytes per float32 and per int64 element


def _doc(*queries: tuple[str, ...]) -> dict[str, Any]:
    """The catalog entries a workload corresponds to: each query is (op, *condition parts)."""
    entries = [e for op, *parts in queries for e in detbench.catalog.find_all(op, *parts)]
    return {
        "doc": [e.raw for e in entries] or None,
        "doc_list": [e.kind for e in entries] or None,
    }


def _register(
    name: str,
    op: str,
    doc: dict[str, Any],
    sizes: Sizes,
    items: Callable[..., float],
    nbytes: Callable[..., float],
    *,
    extra: dict[str, Any] | None = None,
    autocast: bool = False,
    attention: bool = False,
) -> Callable[[Callable[..., Step]], Callable[..., Step]]:
    """Register ``build(ctx, **sizes[profile]) -> step`` as workload ``ops/name``; ``extra``
    params go between the catalog entries and the sizes, ``autocast`` and ``attention`` are the
    workload's declarations (``detbench.core.workload``)."""

    def deco(build: Callable[..., Step]) -> Callable[..., Step]:
        @detbench.workload(
            suite="ops",
            name=name,
            params={"op": op, **doc, **(extra or {}), **sizes},
            items_per_step={p: items(**s) for p, s in sizes.items()},
            bytes_per_step={p: nbytes(**s) for p, s in sizes.items()},
            autocast=autocast,
            attention=attention,
        )
        def factory(ctx: detbench.Context) -> Step:
            return build(ctx, **sizes[ctx.profile])

        return build

    return deco


_private = detbench.suite_helper


def _numel(shape: tuple[int, ...] | list[int]) -> int:
    return math.prod(shape)


def _grad(out: torch.Tensor, inputs: list[torch.Tensor], grad_out: torch.Tensor) -> list[Any]:
    return list(torch.autograd.grad(out, inputs, grad_out))


# --- Indexed updates of a 1-D float32 tensor, every index repeated many times. ----------------
# Accumulating ops (add, reduce): n updates onto a few hundred slots. On 2 CPU threads a quick
# step of index_put_/put_ with accumulate=True spans several scheduler ticks (10-20 ms), so the
# threads overlap, and the order of the additions varies, even on a busy machine.
# Overwriting ops (copy, put, scatter): 64 writes per slot, so that the last writes to a slot are
# spread over the whole index and which thread writes last differs from slot to slot (onto a few
# hundred slots the last writes all fall at the end of the index and one thread wins them all).
ACCUMULATE: Sizes = {"quick": {"n": 1 << 21, "slots": 256}, "full": {"n": 1 << 24, "slots": 512}}
OVERWRITE: Sizes = {
    "quick": {"n": 1 << 18, "slots": 1 << 12},
    "full": {"n": 1 << 24, "slots": 1 << 18},
}


def _scatter_items(n: int, slots: int) -> float:
    return n


def _scatter_bytes(n: int, slots: int) -> float:
    return n * (I8 + F4) + slots * F4  # read the index (8n) and the source (4n), write the slots


def _updates(ctx: detbench.Context, n: int, slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randint(0, slots, (n,), device=ctx.device), torch.randn(n, device=ctx.device)


def _indexed(
    name: str,
    op: str,
    doc: dict[str, Any],
    sizes: Sizes,
    fn: Callable[..., torch.Tensor],
    source: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> None:
    """A workload ``fn(zeros(slots), index, source) -> result``; ``source`` turns the random
    updates into the op's inputs once, when the workload is built, so the step times (and its
    fingerprint judges) the op alone."""

    @_register(name, op, doc, sizes, _scatter_items, _scatter_bytes)
    def build(ctx: detbench.Context, n: int, slots: int) -> Step:
        idx, src = _updates(ctx, n, slots)
        if source is not None:
            src = source(src)
        return lambda: [fn(torch.zeros(slots, device=ctx.device), idx, src)]


_indexed(
    "index_add_",
    "torch.Tensor.index_add_",
    _doc(("torch.index_add",)),
    ACCUMULATE,
    lambda t, i, s: t.index_add_(0, i, s),
)
_indexed(
    "scatter_add_",
    "torch.Tensor.scatter_add_",
    _doc(("torch.Tensor.scatter_add_",)),
    ACCUMULATE,
    lambda t, i, s: t.scatter_add_(0, i, s),
)
_indexed(
    "index_put_accumulate",
    "torch.Tensor.index_put_ (accumulate=True)",
    _doc(("torch.Tensor.index_put", "accumulate=True")),
    ACCUMULATE,
    lambda t, i, s: t.index_put_((i,), s, accumulate=True),
)
_indexed(
    "put_accumulate",
    "torch.Tensor.put_ (accumulate=True)",
    _doc(("torch.Tensor.put_", "accumulate=True")),
    ACCUMULATE,
    lambda t, i, s: t.put_(i, s, accumulate=True),
)
for _reduce in ("sum", "mean", "prod"):
    _indexed(
        f"scatter_reduce_{_reduce}",
        f"torch.Tensor.scatter_reduce_ (reduce={_reduce!r})",
        _doc(("torch.Tensor.scatter_reduce", f"'{_reduce}'")),
        ACCUMULATE,
        (lambda t, i, s: t.add_(1).scatter_reduce_(0, i, s, "prod"))
        if _reduce == "prod"
        else (lambda t, i, s, r=_reduce: t.scatter_reduce_(0, i, s, r)),
        # prod: ones times (1 + 1e-3 * N(0, 1)) factors, so thousands per slot stay finite. Made
        # once at build time with plain arithmetic: they were exp(1e-3 * N(0, 1)) computed in the
        # step, and torch.exp (MKL's vector exp) gave different bits on the first step in some
        # processes on an Intel Xeon (up to 8 ulp on one thread's half of the tensor), a
        # nondeterminism of exp that was charged to scatter_reduce.
        source=(lambda s: s * 1e-3 + 1) if _reduce == "prod" else None,
    )
_indexed(
    "index_put",
    "torch.Tensor.index_put_ (accumulate=False, duplicate indices)",
    _doc(("torch.Tensor.index_put", "accumulate=False")),
    OVERWRITE,
    lambda t, i, s: t.index_put_((i,), s, accumulate=False),
)
_indexed(
    "index_copy_",
    "torch.Tensor.index_copy_ (duplicate indices)",
    _doc(("torch.Tensor.index_copy",)),
    OVERWRITE,
    lambda t, i, s: t.index_copy_(0, i, s),
)
_indexed(
    "put_",
    "torch.Tensor.put_ (accumulate=False, duplicate indices)",
    _doc(("torch.Tensor.put_", "accumulate=False")),
    OVERWRITE,
    lambda t, i, s: t.put_(i, s, accumulate=False),
)
_indexed(
    "scatter_",
    "torch.Tensor.scatter_ (src tensor, duplicate indices)",
    _doc(("torch.Tensor.scatter", "src")),
    OVERWRITE,
    lambda t, i, s: t.scatter_(0, i, s),
)


@_register(
    "gather_backward",
    "torch.gather, backward",
    _doc(("torch.gather",)),
    ACCUMULATE,
    _scatter_items,
    # forward: read the index, gather n values, write n; backward: read the grad and the index,
    # write x's grad.
    lambda n, slots: n * (2 * I8 + 3 * F4) + slots * F4,
)
def _gather(ctx: detbench.Context, n: int, slots: int) -> Step:
    idx, grad_out = _updates(ctx, n, slots)
    x = torch.randn(slots, device=ctx.device, requires_grad=True)
    return lambda: _grad(torch.gather(x, 0, idx), [x], grad_out)


@_register(
    "getitem_backward",
    "torch.Tensor.__getitem__ with a list of index tensors, backward",
    _doc(("torch.Tensor.__getitem__", "list of tensors")),
    {
        "quick": {"n": 1 << 21, "shape": (16, 16)},
        "full": {"n": 1 << 24, "shape": (16, 32)},
    },
    lambda n, shape: n,
    # forward: read both indices, gather n values, write n; backward: read the grad and both
    # indices, write x's grad.
    lambda n, shape: n * (4 * I8 + 3 * F4) + _numel(shape) * F4,
)
def _getitem(ctx: detbench.Context, n: int, shape: tuple[int, int]) -> Step:
    index = [torch.randint(0, s, (n,), device=ctx.device) for s in shape]
    x = torch.randn(*shape, device=ctx.device, requires_grad=True)
    grad_out = torch.randn(n, device=ctx.device)
    return lambda: _grad(x[tuple(index)], [x], grad_out)


# --- Row lookups: n rows of width `dim` from a table of a few hundred rows. -------------------
ROWS: Sizes = {
    "quick": {"n": 1 << 14, "rows": 256, "dim": 32},
    "full": {"n": 1 << 20, "rows": 512, "dim": 128},
}


def _rows_bytes(n: int, rows: int, dim: int, out_rows: int | None = None) -> float:
    # forward: read the index and n rows, write out_rows rows; backward: read the grad and the
    # index, write the table's grad.
    out = n if out_rows is None else out_rows
    return 2 * n * I8 + n * dim * F4 + 2 * out * dim * F4 + rows * dim * F4


@_register(
    "index_select_backward",
    "torch.index_select, backward",
    _doc(("torch.index_select",)),
    ROWS,
    lambda n, rows, dim: n,
    _rows_bytes,
)
def _index_select(ctx: detbench.Context, n: int, rows: int, dim: int) -> Step:
    idx = torch.randint(0, rows, (n,), device=ctx.device)
    x = torch.randn(rows, dim, device=ctx.device, requires_grad=True)
    grad_out = torch.randn(n, dim, device=ctx.device)
    return lambda: _grad(torch.index_select(x, 0, idx), [x], grad_out)


@_register(
    "repeat_interleave_backward",
    "torch.repeat_interleave with a repeats tensor, backward",
    _doc(("torch.repeat_interleave",)),
    ROWS,
    lambda n, rows, dim: n,
    _rows_bytes,
)
def _repeat_interleave(ctx: detbench.Context, n: int, rows: int, dim: int) -> Step:
    # Random repeats summing to n: each row is repeated n/rows times on average.
    cuts = torch.sort(torch.randint(0, n + 1, (rows - 1,), device=ctx.device)).values
    bounds = torch.cat([cuts.new_zeros(1), cuts, cuts.new_full((1,), n)])
    repeats = bounds.diff()
    x = torch.randn(rows, dim, device=ctx.device, requires_grad=True)
    grad_out = torch.randn(n, dim, device=ctx.device)
    return lambda: _grad(torch.repeat_interleave(x, repeats, 0, output_size=n), [x], grad_out)


@_register(
    "embedding_backward",
    "torch.nn.functional.embedding, backward",
    _doc(("torch.nn.Embedding",), ("torch.nn.functional.embedding",)),
    ROWS,
    lambda n, rows, dim: n,
    _rows_bytes,
)
def _embedding(ctx: detbench.Context, n: int, rows: int, dim: int) -> Step:
    idx = torch.randint(0, rows, (n,), device=ctx.device)
    w = torch.randn(rows, dim, device=ctx.device, requires_grad=True)
    grad_out = torch.randn(n, dim, device=ctx.device)
    return lambda: _grad(F.embedding(idx, w), [w], grad_out)


BAG = 16  # lookups per bag


def _embedding_bag(mode: str, doc: dict[str, Any]) -> None:
    @_register(
        f"embedding_bag_{mode}_backward",
        f"torch.nn.functional.embedding_bag (mode={mode!r}, bags of {BAG}), backward",
        doc,
        ROWS,
        lambda n, rows, dim: n,
        lambda n, rows, dim: _rows_bytes(n, rows, dim, n // BAG),
    )
    def build(ctx: detbench.Context, n: int, rows: int, dim: int) -> Step:
        idx = torch.randint(0, rows, (n,), device=ctx.device)
        offsets = torch.arange(0, n, BAG, device=ctx.device)
        w = torch.randn(rows, dim, device=ctx.device, requires_grad=True)
        grad_out = torch.randn(n // BAG, dim, device=ctx.device)
        return lambda: _grad(F.embedding_bag(idx, w, offsets, mode=mode), [w], grad_out)


_embedding_bag("sum", _doc(("torch.nn.EmbeddingBag", "mode='sum'")))
_embedding_bag("max", _doc(("torch.nn.EmbeddingBag", "mode='max'")))


# --- Spatial ops, forward and backward: in suites/_ops_spatial.py. -------------------------
_private("_ops_spatial").define(_register, _doc)


# --- Losses. --------------------------------------------------------------------------------
@_register(
    "ctc_loss_backward",
    "torch.nn.functional.ctc_loss, backward",
    _doc(("torch.nn.CTCLoss",)),
    {
        "quick": {"time": 64, "batch": 8, "classes": 32, "target": 24},
        "full": {"time": 512, "batch": 64, "classes": 96, "target": 128},
    },
    lambda time, batch, classes, target: batch,
    # read the log-probs twice (forward, backward), write their grad; alpha and beta tables.
    lambda time, batch, classes, target: (
        3 * time * batch * classes * F4 + 2 * time * batch * (2 * target + 1) * F4
    ),
)
def _ctc(ctx: detbench.Context, time: int, batch: int, classes: int, target: int) -> Step:
    dev = ctx.device
    log_probs = torch.randn(time, batch, classes, device=dev).log_softmax(2).requires_grad_()
    targets = torch.randint(1, classes, (batch, target), device=dev)
    in_lens = torch.full((batch,), time, dtype=torch.long, device=dev)
    tgt_lens = torch.randint(target // 2, target + 1, (batch,), device=dev)

    def step() -> list[torch.Tensor]:
        loss = F.ctc_loss(log_probs, targets, in_lens, tgt_lens)
        return [loss, *torch.autograd.grad(loss, [log_probs])]

    return step


@_register(
    "nll_loss2d",
    "torch.nn.functional.nll_loss on (N, C, H, W) log-probs (mean), forward and backward",
    _doc(("torch.nn.NLLLoss",)),
    {"quick": {"shape": (4, 21, 64, 64)}, "full": {"shape": (16, 21, 512, 512)}},
    lambda shape: shape[0],
    # forward: read the target (8) and one log-prob per pixel; backward: write the grad.
    lambda shape: _numel(shape[:1] + shape[2:]) * (2 * I8 + F4) + _numel(shape) * F4,
)
def _nll(ctx: detbench.Context, shape: tuple[int, ...]) -> Step:
    x = torch.randn(*shape, device=ctx.device).log_softmax(1).requires_grad_()
    target = torch.randint(0, shape[1], shape[:1] + shape[2:], device=ctx.device)

    def step() -> list[torch.Tensor]:
        loss = F.nll_loss(x, target)
        return [loss, *torch.autograd.grad(loss, [x])]

    return step


# --- Reductions and scans over a long 1-D float32 tensor. -----------------------------------
def _long(**extra: int) -> Sizes:
    return {"quick": {"n": 1 << 18, **extra}, "full": {"n": 1 << 26, **extra}}


def _reduction(
    name: str,
    op: str,
    doc: dict[str, Any],
    sizes: Sizes,
    nbytes: Callable[..., float],
    fn: Callable[..., Any],
) -> None:
    @_register(name, op, doc, sizes, lambda n, bins=0: n, nbytes)
    def build(ctx: detbench.Context, n: int, bins: int = 0) -> Step:
        x = torch.randn(n, device=ctx.device)
        idx = torch.randint(0, max(bins, 1), (n,), device=ctx.device)
        return lambda: [fn(x, idx, bins)]


_reduction(
    "cumsum",
    "torch.cumsum (float32)",
    _doc(("torch.cumsum",)),
    _long(),
    lambda n: 2 * n * F4,  # read n, write n
    lambda x, i, b: x.cumsum(0),
)
_reduction(
    "histc",
    "torch.histc",
    _doc(("torch.histc",)),
    _long(bins=256),
    lambda n, bins: n * F4 + bins * F4,  # read n, write the bins
    lambda x, i, b: torch.histc(x, b, -4, 4),
)
_reduction(
    "bincount_weights",
    "torch.bincount with weights",
    _doc(("torch.bincount", "weights")),
    _long(bins=256),
    lambda n, bins: n * (I8 + F4) + bins * F4,  # read n indices and n weights, write the bins
    lambda x, i, b: torch.bincount(i, x, b),
)


@_register(
    "median_indices",
    "torch.median along a dim, values and indices (many ties)",
    _doc(("torch.median", "indices")),
    {"quick": {"shape": (256, 1023)}, "full": {"shape": (8192, 8191)}},
    lambda shape: _numel(shape),
    lambda shape: _numel(shape) * F4 + shape[0] * (F4 + I8),
)
def _median(ctx: detbench.Context, shape: tuple[int, int]) -> Step:
    # Small integers: each row holds many copies of its median, so which index is returned is
    # a choice among ties.
    x = torch.randint(0, 16, shape, device=ctx.device).float()

    def step() -> list[torch.Tensor]:
        values, indices = torch.median(x, dim=1)
        return [values, indices]

    return step


@_register(
    "scaled_dot_product_attention_backward",
    "torch.nn.functional.scaled_dot_product_attention, backward",
    _doc(("torch.nn.functional.scaled_dot_product_attention",)),
    {
        "quick": {"shape": (2, 4, 128, 32), "dtype": "float32"},
        "full": {"shape": (4, 16, 2048, 64), "dtype": "bfloat16"},
    },
    lambda shape, dtype: shape[0],
    # forward: read q, k, v, write o; backward: read q, k, v, o, do, write dq, dk, dv.
    lambda shape, dtype: 12 * _numel(shape) * (2 if dtype == "bfloat16" else 4),
    attention=True,
)
def _sdpa(ctx: detbench.Context, shape: tuple[int, ...], dtype: str) -> Step:
    dt = getattr(torch, dtype)
    q, k, v = (torch.randn(*shape, device=ctx.device, dtype=dt, requires_grad=True) for _ in "qkv")
    grad_out = torch.randn(*shape, device=ctx.device, dtype=dt)
    return lambda: _grad(F.scaled_dot_product_attention(q, k, v), [q, k, v], grad_out)


# --- Settings: SDPA per backend, split-K half GEMMs, torch.empty. In suites/_ops_settings.py. ---
_private("_ops_settings").define(_register, _doc)
