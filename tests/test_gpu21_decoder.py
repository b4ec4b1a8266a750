"""Issue 21, item 4: the per-request greedy decoder is timed at a small batch, with fewer
fingerprint steps, and its invariance verdict keeps every size. On the H100 a step at batch 64
took 2.35 s (results/20261124-084508-cuda-full-decoder)."""

from __future__ import annotations

from pathlib import Path

import torch

from detbench.core.workload import Context, load_file

SUITE = Path(__file__).resolve().parent.parent / "suites" / "invariance.py"
WORKLOADS = {w.name: w for w in load_file(SUITE)}


def test_the_invariant_decoder_is_timed_at_a_small_batch() -> None:
    w = WORKLOADS["decoder_greedy_invariant"]
    base = WORKLOADS["decoder_greedy"]
    assert w.batch_sizes == (1, 2, 4, 16, 64)  # the verdict's sizes are kept
    assert w.batch_size is not None and w.batch_size <= 4
    for profile in ("quick", "full"):
        ctx = Context(torch.device("cpu"), profile, 0, batch_size=w.batch_size)
        assert w.steps(ctx, 3) < 3  # fewer fingerprint steps than the run's 3
        # tokens per step: the batch times the tokens per request, so tokens/s stays per request
        new_tokens = w.params_for(profile)["new_tokens"]
        assert w.items(ctx) == w.batch_size * new_tokens
    # the base (one batched decode per step) keeps the largest batch and the run's steps
    assert base.batch_size == 64
    assert base.steps(Context(torch.device("cpu"), "full", 0, batch_size=64), 3) == 3


def test_a_step_at_the_timed_batch_decodes_that_many_requests() -> None:
    w = WORKLOADS["decoder_greedy_invariant"]
    assert w.batch_size is not None
    step = w.factory(Context(torch.device("cpu"), "quick", 0, batch_size=w.batch_size))
    ids = step()[0]
    assert ids.shape[0] == w.batch_size
