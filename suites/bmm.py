"""bmm: batched matrix multiplication forward and backward, dense (float32 everywhere, float16 and
bfloat16 too) and sparse COO times dense.

Dense ``torch.bmm`` on CUDA is a cuBLAS batched GEMM. cuBLAS gives the same bits run to run on
the same GPU and library version, apart from the caveat about its per-stream workspaces that
``CUBLAS_WORKSPACE_CONFIG`` addresses (the modes with deterministic algorithms set it): the dense
cases show what the determinism settings cost where little or nothing should change, and how the
half-precision GEMMs behave. The float16 and bfloat16 cases run in their own dtype on the CPU as
well (recent torch has CPU kernels for both), at the same small quick sizes.

``torch.bmm(sparse, dense)`` with a 3-D sparse COO operand is on PyTorch's list of operations that
``torch.use_deterministic_algorithms(True)`` makes deterministic on CUDA (cuSPARSE's SpMM has
nondeterministic and deterministic algorithms). Its backward with respect to the dense operand is
another sparse-dense bmm, with the transposed sparse operand. It is memory-bound: it declares
``bytes_per_step``.

Every case returns the product and the gradients (of both operands for dense, of the dense
operand for sparse). ``items_per_step`` counts the matrices in the batch. The dense float32 cases
declare ``autocast=True`` (under the ``autocast`` setting their GEMMs run in half precision, as in
mixed-precision training); the float16 and bfloat16 cases are half already. The sparse case does not
declare it: autocast would cast its sparse operand too, and torch 2.13 has no half-precision
sparse-dense bmm on the CPU ("bmm_sparse_dense" not implemented for 'Half' or 'BFloat16').
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

import detbench


@dataclass(frozen=True)
class Size:
    batch: int
    m: int
    k: int
    n: int  # (batch, m, k) @ (batch, k, n) -> (batch, m, n)


@dataclass(frozen=True)
class Case:
    dtype: torch.dtype
    source: str  # where the shape comes from
    quick: Size
    full: Size


# Attention scores Q @ K^T of BERT-large: batch 32 x 16 heads, 512 tokens, 64 per head.
SCORES = "BERT-large attention scores"
SCORES_SIZES = {"quick": Size(16, 64, 32, 64), "full": Size(512, 512, 64, 512)}

CASES: dict[str, Case] = {
    "bmm_attention_scores_fp32": Case(torch.float32, SCORES, **SCORES_SIZES),
    "bmm_attention_scores_fp16": Case(torch.float16, SCORES, **SCORES_SIZES),
    "bmm_attention_scores_bf16": Case(torch.bfloat16, SCORES, **SCORES_SIZES),
    # Mixture-of-experts FFN up-projection, experts batched: 8 experts x 4096 tokens each,
    # d_model 1024 -> d_ff 4096. Large and compute-bound.
    "bmm_moe_experts_fp32": Case(
        torch.float32,
        "MoE expert FFN (8 experts)",
        quick=Size(4, 128, 64, 256),
        full=Size(8, 4096, 1024, 4096),
    ),
}


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _register(name: str, case: Case) -> None:
    sizes = {"quick": case.quick, "full": case.full}
    params: dict[str, Any] = {
        "op": "bmm",
        "from": case.source,
        "dtype": _dtype_name(case.dtype),
        **{p: {"batch": s.batch, "m": s.m, "k": s.k, "n": s.n} for p, s in sizes.items()},
    }

    @detbench.workload(
        suite="bmm",
        name=name,
        params=params,
        items_per_step={p: s.batch for p, s in sizes.items()},
        # float32 products are what autocast casts to half; the half cases already are.
        autocast=case.dtype == torch.float32,
    )
    def factory(ctx: detbench.Context) -> Any:
        s = sizes[ctx.profile]
        opts: dict[str, Any] = {"device": ctx.device, "dtype": case.dtype}
        a = torch.randn(s.batch, s.m, s.k, **opts, requires_grad=True)  # (B, M, K)
        b = torch.randn(s.batch, s.k, s.n, **opts, requires_grad=True)  # (B, K, N)
        grad_out = torch.randn(s.batch, s.m, s.n, **opts)  # (B, M, N)

        def step() -> list[torch.Tensor]:
            out = torch.bmm(a, b)
            grads = torch.autograd.grad(out, [a, b], grad_out)
            return [out.detach(), *grads]

        return step


for _name, _case in CASES.items():
    _register(_name, _case)


# Sparse COO x dense: a batch of graphs' adjacency matrices times node features, the propagation
# step of a graph convolution over a batch of graphs. (batch, nodes, nodes) @ (batch, nodes, feats)
@dataclass(frozen=True)
class GraphSize:
    batch: int  # graphs
    nodes: int
    degree: int  # nonzeros per adjacency row; divides nodes
    features: int

    @property
    def nnz(self) -> int:
        return self.batch * self.nodes * self.degree


GRAPHS = {"quick": GraphSize(4, 256, 8, 32), "full": GraphSize(64, 2048, 16, 256)}

INDEX_BYTES = 3 * 8  # (batch, row, col) as int64 per nonzero
VALUE_BYTES = FEATURE_BYTES = 4  # float32


def sparse_bytes_per_step(g: GraphSize) -> int:
    """Compulsory traffic of the two sparse-dense products of a step, each operand read once and
    each result written once: the forward reads the sparse matrix (indices and values) and the
    features and writes the product; the backward reads the transposed sparse matrix and the
    output gradient and writes the feature gradient. Not counted: the transposition and
    re-sorting of the sparse indices that the backward does first."""
    sparse = g.nnz * (INDEX_BYTES + VALUE_BYTES)
    dense = g.batch * g.nodes * g.features * FEATURE_BYTES  # features, product and gradients alike
    return 2 * (sparse + 2 * dense)


@detbench.workload(
    suite="bmm",
    items_per_step={p: g.batch for p, g in GRAPHS.items()},
    bytes_per_step={p: sparse_bytes_per_step(g) for p, g in GRAPHS.items()},
    params={
        "op": "bmm(sparse_coo, dense)",
        "from": "graph convolution over a batch of graphs",
        "dtype": "float32",
        "grads": "dense operand",
        **{
            p: {
                "batch": g.batch,
                "nodes": g.nodes,
                "degree": g.degree,
                "features": g.features,
                "nnz": g.nnz,
            }
            for p, g in GRAPHS.items()
        },
    },
)
def bmm_sparse_coo_fp32(ctx: detbench.Context) -> Any:
    g = GRAPHS[ctx.profile]
    # Every row gets one neighbour drawn in each of `degree` equal column ranges: the columns of a
    # row are distinct by construction, so the matrix has exactly g.nnz nonzeros, coalesced.
    graph, row, slot = torch.meshgrid(
        torch.arange(g.batch), torch.arange(g.nodes), torch.arange(g.degree), indexing="ij"
    )
    span = g.nodes // g.degree
    col = slot * span + torch.randint(0, span, slot.shape)
    indices = torch.stack([graph.flatten(), row.flatten(), col.flatten()])  # (3, nnz)
    values = torch.randn(g.nnz) / g.degree**0.5  # (nnz,)
    adjacency = torch.sparse_coo_tensor(
        indices, values, (g.batch, g.nodes, g.nodes), check_invariants=True
    )
    adjacency = adjacency.coalesce().to(ctx.device)  # (B, nodes, nodes), sparse COO
    # (B, nodes, feats)
    feats = torch.randn(g.batch, g.nodes, g.features, device=ctx.device, requires_grad=True)
    grad_out = torch.randn(g.batch, g.nodes, g.features, device=ctx.device)

    def step() -> list[torch.Tensor]:
        out = torch.bmm(adjacency, feats)  # dense (B, nodes, feats)
        (grad_feats,) = torch.autograd.grad(out, [feats], grad_out)
        return [out.detach(), grad_feats]

    return step
