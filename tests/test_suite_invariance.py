"""The ``invariance`` suite on this CPU, with real kernels: every workload's row 0 is the same
request at every batch size, every ``<base>_invariant`` reference is batch-invariant, and the
verdicts observed here (stable over repeated runs, torch 2.13, 2 threads) hold."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from detbench import invariance, seeding
from detbench.workload import Context, Workload, load_file

SUITE = Path(__file__).resolve().parent.parent / "suites" / "invariance.py"
WORKLOADS = {w.name: w for w in load_file(SUITE)}
CPU = torch.device("cpu")


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


def test_suite_declares_sizes_and_pairs_references() -> None:
    assert WORKLOADS and all(w.suite == "invariance" for w in WORKLOADS.values())
    for w in WORKLOADS.values():
        assert w.batch_sizes is not None and w.batch_sizes[0] == 1
        assert w.batch_size == max(w.batch_sizes)
        ctx = Context(CPU, "quick", 0, batch_size=w.batch_size)
        assert w.items(ctx) % w.batch_size == 0  # the batch (times tokens per request)
        base = w.params.get("invariant_reference_of")
        assert (base is not None) == w.name.endswith("_invariant")
        if base is not None:
            assert w.name == f"{base}_invariant" and base in WORKLOADS
    for base in ("matmul_fp32", "rmsnorm"):
        assert f"{base}_invariant" in WORKLOADS
    assert WORKLOADS["sdpa_padded"].attention and WORKLOADS["decoder_greedy"].attention
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


@pytest.mark.parametrize("name", sorted(n for n in WORKLOADS if n.endswith("_invariant")))
def test_every_reference_is_invariant(name: str) -> None:
    v = _verdict(name)
    assert v.invariant and v.first_variant_size is None and v.max_abs_diff == 0.0


def test_fp32_matmul_is_not_batch_invariant_on_this_cpu() -> None:
    """Row 0 of a 512-wide fp32 ``x @ W`` changes bits once other rows share its batch: from 2
    rows on this Intel Xeon (from 4 on an AMD EPYC, per issue 13)."""
    v = _verdict("matmul_fp32")
    assert not v.invariant and v.first_variant_size in (2, 4)
    assert 0.0 < v.max_abs_diff < 1e-4


def test_embedding_mlp_is_not_batch_invariant_on_this_cpu() -> None:
    v = _verdict("embedding_mlp")
    assert not v.invariant and v.first_variant_size in (2, 4)


@pytest.mark.parametrize(
    "name",
    ["rmsnorm", "layernorm", "softmax", "sdpa_padded", "sdpa_chunked_prefill", "decoder_greedy"],
)
def test_row_wise_kernels_are_invariant_on_this_cpu(name: str) -> None:
    """Observed on this CPU: normalisation, softmax, CPU attention and the small decoder (whose
    matmuls are 64 wide) keep row 0's bits at every batch size."""
    assert _verdict(name).invariant


def test_decoder_gives_one_completion_across_batch_compositions() -> None:
    """The study's measure: distinct completions of the reference request (row 0) decoded in
    batches of every declared size. On this CPU, at the quick size: one."""
    w = WORKLOADS["decoder_greedy"]
    assert w.batch_sizes is not None
    completions = {tuple(_build(w, b)()[0][0].tolist()) for b in w.batch_sizes}
    assert len(completions) == 1


def test_chunked_prefill_against_one_shot_prefill() -> None:
    """The second prefill chunk against its cached keys and the same queries of the one-shot
    causal prefill: the same attention split differently. On this CPU (math kernel, quick size)
    the two have the same bits."""
    chunked, oneshot = _build(WORKLOADS["sdpa_chunked_prefill"], 4)()
    assert chunked.shape == oneshot.shape
    assert invariance.same_bits(chunked, oneshot)
