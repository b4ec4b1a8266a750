"""The ``invariance`` suite with real kernels: every workload's row 0 is the same request at every
batch size, every ``<base>_invariant`` reference and the elementwise control are batch-invariant,
and the 512-wide fp32 matmul is not. Verdicts that depend on the CPU (an Intel Xeon and an AMD
EPYC disagree on the MLP and the decoder) are not asserted as values: the verdict is checked
against a direct bitwise comparison of the same outputs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from detbench.core import seeding
from detbench.core.workload import Context, Workload, load_file
from detbench.worker import invariance
from detbench.worker.measure import SettingUnsupported, classify

SUITE = Path(__file__).resolve().parent.parent / "suites" / "invariance.py"
WORKLOADS = {w.name: w for w in load_file(SUITE)}
CPU = torch.device("cpu")
BACKENDS = ("math", "flash", "efficient", "cudnn")
#: Workloads whose verdict depends on the CPU (its kernels' blocking and threads).
CPU_DEPENDENT = [
    "matmul_fp16", "matmul_bf16", "rmsnorm", "layernorm", "softmax", "sdpa_padded",
    "sdpa_padded_math", "sdpa_chunked_prefill", "embedding_mlp", "decoder_greedy",
]  # fmt: skip


def _build(w: Workload, b: int) -> Callable[[], Sequence[Any]]:
    seeding.seed_all(0)
    return w.factory(Context(CPU, "quick", 0, batch_size=b))


def _verdict(name: str) -> invariance.Verdict:
    w = WORKLOADS[name]
    assert w.batch_sizes is not None
    return invariance.check(
        lambda b: w.factory(Context(CPU, "quick", 0, batch_size=b)),
        w.batch_sizes,
        lambda: seeding.seed_all(0),
    )


def _raw(t: torch.Tensor) -> bytes:
    return (
        t.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes() + str(t.dtype).encode()
    )


def test_suite_declares_sizes_and_pairs_references() -> None:
    assert WORKLOADS and all(w.suite == "invariance" for w in WORKLOADS.values())
    for w in WORKLOADS.values():
        assert w.batch_sizes is not None and w.batch_sizes[0] == 1
        # the per-request decoder is timed at a small batch (its docstring says why)
        small = w.name == "decoder_greedy_invariant"
        assert w.batch_size == (4 if small else max(w.batch_sizes))
        ctx = Context(CPU, "quick", 0, batch_size=w.batch_size)
        assert w.items(ctx) % w.batch_size == 0  # the batch (times tokens per request)
        base = w.params.get("invariant_reference_of")
        assert (base is not None) == w.name.endswith("_invariant")
        if base is not None:
            assert w.name == f"{base}_invariant" and base in WORKLOADS
            # timed at the same batch, but for the decoder decoded request by request, whose
            # tokens/s do not depend on its batch
            assert small or WORKLOADS[base].batch_size == w.batch_size
    for base in ("matmul_fp32", "rmsnorm", "sdpa_chunked_prefill", "decoder_greedy"):
        assert f"{base}_invariant" in WORKLOADS
    assert "gelu" in WORKLOADS and "gelu_invariant" not in WORKLOADS
    assert WORKLOADS["sdpa_padded"].attention and WORKLOADS["decoder_greedy"].attention
    for level in BACKENDS:  # pinned inside sdpa_kernel: the sdpa_backend setting does not act
        w = WORKLOADS[f"sdpa_padded_{level}"]
        assert not w.attention and w.params["sdpa_backend"] == level
    dec = WORKLOADS["decoder_greedy"]
    assert dec.batch_sizes is not None and dec.params["requests"] == len(dec.batch_sizes) == 12
    assert not any(w.autocast for w in WORKLOADS.values())


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_row0_input_is_the_same_request_at_every_size(name: str) -> None:
    w = WORKLOADS[name]
    assert w.batch_sizes is not None
    small, large = w.batch_sizes[0], w.batch_sizes[-1]
    a, b = vars(_build(w, small))["inputs"], vars(_build(w, large))["inputs"]
    assert a and len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.shape[0] == small and y.shape[0] == large
        assert invariance.same_bits(x[0], y[0])


def test_decoder_batch_compositions_differ_beyond_row0() -> None:
    """Row 0 is the same request at every size; the other requests change with the size."""
    w = WORKLOADS["decoder_greedy"]
    p3, p4 = vars(_build(w, 3))["inputs"][0], vars(_build(w, 4))["inputs"][0]
    assert torch.equal(p3[0], p4[0]) and not torch.equal(p3[1:3], p4[1:3])


@pytest.mark.parametrize("name", sorted(n for n in WORKLOADS if n.endswith("_invariant")))
def test_every_reference_is_invariant(name: str) -> None:
    v = _verdict(name)
    assert v.invariant and v.first_variant_size is None and v.max_abs_diff == 0.0
    assert v.distinct == 1


def test_elementwise_control_is_invariant() -> None:
    v = _verdict("gelu")
    assert v.invariant and v.distinct == 1 and v.max_abs_diff == 0.0


def test_fp32_matmul_is_not_batch_invariant() -> None:
    """Row 0 of a 512-wide fp32 ``x @ W`` changes bits once other rows share its batch: from 2
    rows on an Intel Xeon, from 4 on an AMD EPYC."""
    w = WORKLOADS["matmul_fp32"]
    assert w.batch_sizes is not None
    v = _verdict("matmul_fp32")
    assert not v.invariant and v.first_variant_size in w.batch_sizes[1:]
    assert 0.0 < v.max_abs_diff < 1e-4 and v.distinct >= 2


@pytest.mark.parametrize("name", CPU_DEPENDENT)
def test_verdict_agrees_with_a_direct_comparison(name: str) -> None:
    """Whatever this CPU does: the verdict says what a direct bitwise comparison of the same
    outputs' row 0 says (per size, overall, the first variant size, and the distinct results of
    the first output: the decoder's completions)."""
    w = WORKLOADS[name]
    assert w.batch_sizes is not None
    outputs: dict[int, list[torch.Tensor]] = {}

    def build(b: int) -> Callable[[], list[torch.Tensor]]:
        step = w.factory(Context(CPU, "quick", 0, batch_size=b))

        def kept() -> list[torch.Tensor]:
            outputs[b] = [t.clone() for t in step()]
            return outputs[b]

        return kept

    v = invariance.check(build, w.batch_sizes, lambda: seeding.seed_all(0))
    ref = [_raw(t[0]) for t in outputs[1]]
    same = {b: [_raw(t[0]) for t in outputs[b]] == ref for b in w.batch_sizes}
    assert v.same == same and v.invariant == all(same.values())
    assert v.first_variant_size == next((b for b in w.batch_sizes if not same[b]), None)
    assert v.distinct == len({_raw(outputs[b][0][0]) for b in w.batch_sizes})
    assert (v.max_abs_diff == 0.0) == v.invariant


def test_chunked_prefill_is_one_shot_at_batch_1_and_chunked_beyond() -> None:
    """Batch 1: one chunk, the one-shot causal prefill. Batch 4: 4 chunks, each chunk's queries
    against the keys so far; the same attention, so close to the one-shot (whether bitwise equal
    is the verdict's, and depends on the CPU)."""
    w = WORKLOADS["sdpa_chunked_prefill"]
    assert w.params["chunks"] == {"1": 1, "2": 2, "4": 4, "16": 8, "64": 8}
    one = _build(w, 1)
    q, k, v = vars(one)["inputs"]
    assert invariance.same_bits(one()[0], F.scaled_dot_product_attention(q, k, v, is_causal=True))
    four = _build(w, 4)
    q, k, v = vars(four)["inputs"]
    prompt = q.shape[2]
    parts = []
    for s in range(0, prompt, prompt // 4):
        e = s + prompt // 4
        mask = torch.tensor([[j <= i for j in range(e)] for i in range(s, e)])
        parts.append(F.scaled_dot_product_attention(q[:, :, s:e], k[:, :, :e], v[:, :, :e], mask))
    out = four()[0]
    assert out.shape == (4, *q.shape[1:]) and invariance.same_bits(out, torch.cat(parts, dim=2))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))


@pytest.mark.parametrize("level", BACKENDS)
def test_pinned_backend_runs_or_is_unsupported(level: str) -> None:
    """Each backend inside ``sdpa_kernel``: the padded attention's values, or ``unsupported`` with
    torch's reason. A CPU has neither the memory-efficient nor the cuDNN kernel."""
    try:
        got = _build(WORKLOADS[f"sdpa_padded_{level}"], 2)()[0]
    except (RuntimeError, SettingUnsupported) as exc:
        assert classify(exc)[0] == "unsupported", exc
        return
    finally:
        assert torch.backends.cuda.math_sdp_enabled()  # the context restored the flags
    assert level in ("math", "flash"), f"{level} ran on a CPU"
    if level == "flash":  # bf16, causal, right padding (suites/invariance.py HALF_PINNED)
        return
    torch.testing.assert_close(got, _build(WORKLOADS["sdpa_padded"], 2)()[0])
