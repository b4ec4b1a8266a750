"""The workloads of the ``ops`` suite whose result or cost depends on a setting rather than on
``use_deterministic_algorithms`` alone (``detbench settings`` lists the settings).

- ``sdpa_backward``, ``sdpa_causal_backward``: ``scaled_dot_product_attention`` forward and
  backward on float32 q, k, v (declare ``attention=True`` and ``autocast=True``). The
  ``sdpa_backend`` setting picks the kernel: math, flash, efficient (memory-efficient) or cudnn.
  A backend the device lacks for these inputs is recorded ``unsupported``: on a CPU only math and
  flash exist; on CUDA, flash and cuDNN attention take float16/bfloat16 only (so they run here
  under the ``autocast`` setting). The backward of the fused kernels is where attention's
  nondeterminism lives on CUDA (the memory-efficient backward accumulates with atomics).
- ``mm_fp16_splitk``, ``mm_bf16_splitk``: one GEMM with small M and N and a long K, the shape for
  which cuBLAS splits K across thread blocks and then adds the partial results. The
  ``fp16_reduced_precision_reduction`` and ``bf16_reduced_precision_reduction`` switches (and
  their ``_split_k`` forms) decide whether that addition may round to half precision.
- ``cat_into_empty``: a large output allocated with ``torch.empty`` and written whole by
  ``torch.cat(..., out=)``. With deterministic algorithms, ``fill_uninitialized_memory`` (on by
  default) first fills it with NaN: the same bits with the fill on or off, one more pass over
  the memory with it on.
- ``empty_uninitialized``: returns a ``torch.empty`` tensor that nothing wrote. With deterministic
  algorithms and the fill on, it holds NaN in every run; otherwise it holds whatever the
  allocator's memory held before (on a CPU: freed data and the allocator's own pointers, which
  differ from process to process), so its bits differ from run to run.

Not a suite (its name starts with "_"): ``suites/ops.py`` calls ``define`` with its own
``_register`` and ``_doc``, so each workload is registered as ``ops/NAME``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import detbench

Step = Callable[[], list[torch.Tensor]]
Sizes = dict[str, dict[str, Any]]
Builder = Callable[..., Step]
#: ``ops._register``: (name, op, doc, sizes, items, nbytes, **options) -> decorator of a builder.
Register = Callable[..., Callable[[Builder], Builder]]
#: ``ops._doc``: the catalog entries of (op, *condition parts) queries.
Doc = Callable[..., dict[str, Any]]
F4 = 4  # bytes per float32 element
HALF = 2  # bytes per float16 / bfloat16 element

SDPA: Sizes = {
    "quick": {"batch": 2, "heads": 4, "seq": 128, "head_dim": 32},
    "full": {"batch": 8, "heads": 16, "seq": 1024, "head_dim": 64},
}
# (m, k) @ (k, n): M = N = 64 and K 256 times larger, a split-K shape for cuBLAS.
SPLITK: Sizes = {"quick": {"m": 64, "k": 4096, "n": 64}, "full": {"m": 64, "k": 16384, "n": 64}}
# torch.cat of `chunks` float32 vectors of n elements into one torch.empty buffer.
CAT: Sizes = {"quick": {"chunks": 16, "n": 1 << 16}, "full": {"chunks": 16, "n": 1 << 24}}
# One float32 torch.empty tensor of n elements, returned unwritten.
EMPTY: Sizes = {"quick": {"n": 1 << 16}, "full": {"n": 1 << 26}}


def _sdpa(register: Register, doc: Doc, name: str, causal: bool) -> None:
    mask = "causal" if causal else "no mask"

    @register(
        name,
        f"torch.nn.functional.scaled_dot_product_attention ({mask}), forward and backward",
        doc(("torch.nn.functional.scaled_dot_product_attention",)),
        SDPA,
        lambda batch, heads, seq, head_dim: batch,  # sequences
        # forward: read q, k, v, write o; backward: read q, k, v, o, do, write dq, dk, dv.
        lambda batch, heads, seq, head_dim: 12 * batch * heads * seq * head_dim * F4,
        extra={
            "dtype": "float32",
            "is_causal": causal,
            "outputs": "output, grads of q, k and v",
            "settings": "sdpa_backend picks the kernel; autocast runs it in float16/bfloat16",
        },
        autocast=True,
        attention=True,
    )
    def build(ctx: detbench.Context, batch: int, heads: int, seq: int, head_dim: int) -> Step:
        shape = (batch, heads, seq, head_dim)
        q, k, v = (torch.randn(shape, device=ctx.device, requires_grad=True) for _ in "qkv")
        grad_out = torch.randn(shape, device=ctx.device)

        def step() -> list[torch.Tensor]:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            # Under autocast the output is half: its gradient is the same values, cast.
            grads = torch.autograd.grad(out, [q, k, v], grad_out.to(out.dtype))
            return [out.detach(), *grads]

        return step


def _splitk(register: Register, doc: Doc, dtype: torch.dtype, short: str) -> None:
    name = str(dtype).removeprefix("torch.")

    @register(
        f"mm_{short}_splitk",
        f"torch.mm ({name}, small M and N, long K: split-K on cuBLAS)",
        doc(("torch.mm",)),
        SPLITK,
        lambda m, k, n: m * n,  # output elements
        lambda m, k, n: (m * k + k * n + m * n) * HALF,  # read both operands, write the product
        extra={
            "dtype": name,
            "settings": f"{short}_reduced_precision_reduction and its _split_k form: may "
            f"cuBLAS add split-K partial sums in {name}",
        },
    )
    def build(ctx: detbench.Context, m: int, k: int, n: int) -> Step:
        a = torch.randn(m, k, device=ctx.device).to(dtype)  # made in half once, at build time
        b = torch.randn(k, n, device=ctx.device).to(dtype)
        return lambda: [torch.mm(a, b)]


def define(register: Register, doc: Doc) -> None:
    """Register the settings workloads with ``ops.py``'s ``register`` and ``doc``."""
    _sdpa(register, doc, "sdpa_backward", causal=False)
    _sdpa(register, doc, "sdpa_causal_backward", causal=True)
    _splitk(register, doc, torch.float16, "fp16")
    _splitk(register, doc, torch.bfloat16, "bf16")

    @register(
        "cat_into_empty",
        "torch.cat(..., out=torch.empty(...)): every element of the empty buffer written",
        doc(("torch.cat",)),
        CAT,
        lambda chunks, n: chunks * n,  # elements written
        lambda chunks, n: 2 * chunks * n * F4,  # read the chunks, write the buffer
        extra={
            "dtype": "float32",
            "settings": "fill_uninitialized_memory: same bits on or off; on, torch.empty first "
            "fills the buffer with NaN (one more write of it) when deterministic algorithms are on",
        },
    )
    def _cat(ctx: detbench.Context, chunks: int, n: int) -> Step:
        parts = [torch.randn(n, device=ctx.device) for _ in range(chunks)]

        def step() -> list[torch.Tensor]:
            out = torch.empty(chunks * n, device=ctx.device)
            return [torch.cat(parts, out=out)]

        return step

    @register(
        "empty_uninitialized",
        "torch.empty, returned unwritten",
        doc(("torch.empty",)),
        EMPTY,
        lambda n: n,  # elements allocated
        lambda n: n * F4,  # the tensor's size: what the fill writes when it is on
        extra={
            "dtype": "float32",
            "settings": "deterministic algorithms with fill_uninitialized_memory on: all NaN, "
            "reproducible; with the fill off or without deterministic algorithms: whatever the "
            "allocator's memory held, different from run to run",
        },
    )
    def _empty(ctx: detbench.Context, n: int) -> Step:
        return lambda: [torch.empty(n, device=ctx.device)]
