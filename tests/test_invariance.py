"""The batch-invariance verdict: the comparison of row 0 across batch sizes on real tensors, the
declaration, and a run whose workloads' behaviour is known on this CPU (real kernels, no mocks)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import detbench
from detbench.core.workload import WorkloadError
from detbench.worker import invariance

from .conftest import WORKLOADS, detbench_cli, requires_cuda


def test_row0_keeps_only_batch_first_outputs() -> None:
    out = [torch.arange(6.0).view(3, 2), torch.tensor(5.0), torch.zeros(2, 3)]
    rows = invariance.row0(out, 3)
    assert len(rows) == 1 and torch.equal(rows[0], torch.tensor([0.0, 1.0]))


def test_same_bits_is_bitwise() -> None:
    nan = torch.tensor([float("nan"), 1.0])
    assert invariance.same_bits(nan, nan.clone())  # the same NaN: the same bits
    assert not invariance.same_bits(torch.tensor([0.0]), torch.tensor([-0.0]))  # equal, not same
    assert not invariance.same_bits(torch.tensor([1.0]), torch.tensor([1.0], dtype=torch.float64))


def test_compare_names_the_first_size_that_differs() -> None:
    a = torch.tensor([1.0, 2.0])
    b = torch.nextafter(a, torch.tensor(9.0))  # one ulp away
    v = invariance.compare({1: [a], 2: [a.clone()], 8: [b], 32: [a.clone()]})
    assert not v.invariant and v.first_variant_size == 8
    assert v.same == {1: True, 2: True, 8: False, 32: True}
    assert v.distinct == 2  # sizes 1, 2 and 32 agree; 8 is the other result
    assert 0 < v.max_abs_diff < 1e-6
    assert invariance.compare({1: [a], 4: [a.clone()]}).invariant
    with pytest.raises(invariance.InvarianceError, match="batch as its first dimension"):
        invariance.compare({1: [], 2: []})


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"batch_sizes": (4,)}, "two sizes or more"),
        ({"batch_sizes": (1, 0)}, "positive integers"),
        ({"batch_sizes": (1, 2), "batch_size": 3}, "not one of batch_sizes"),
        ({"batch_size": 2}, "needs batch_sizes"),
    ],
)
def test_bad_batch_sizes_are_one_line(kwargs: dict, words: str) -> None:
    with pytest.raises(WorkloadError, match=words):
        detbench.workload(suite="bad_sizes", items_per_step=1, **kwargs)


def test_a_run_records_the_verdict(invariance_probe_run: Path) -> None:
    """On this CPU a 512x512 fp32 matmul gives row 0 other bits once it shares its batch (from 2
    rows on an Intel Xeon, from 4 on an AMD EPYC), with or without deterministic algorithms; an
    elementwise op cannot."""
    df = detbench.load_results(invariance_probe_run)
    assert set(df["status"]) == {"ok"}
    mm = df[df["workload"] == "matmul_rows"]
    assert set(mm["batch_invariant"]) == {False} and set(mm["mode"]) == {"default", "det-algos"}
    assert set(mm["batch_first_variant_size"]) <= {2, 4} and (mm["batch_max_abs_diff"] > 0).all()
    assert set(mm["batch_size"]) == {16}  # the fingerprint and timing passes: the largest size
    ew = df[df["workload"] == "elementwise_rows"]
    assert set(ew["batch_invariant"]) == {True} and ew["batch_first_variant_size"].isna().all()
    plain = df[df["workload"] == "no_sizes"]
    assert plain["batch_invariant"].isna().all()


@requires_cuda
def test_a_cuda_run_records_the_verdict(tmp_path: Path) -> None:
    """The CUDA twin of the test above, structure only: where cuBLAS's batch-invariance boundary
    lies is what the GPU answers, so only the columns and their kinds are asserted."""
    out = tmp_path / "run"
    proc = detbench_cli(
        "run", "--workload", str(WORKLOADS / "invariance_probe.py"), "--mode", "default",
        "--mode", "det-algos", "--replicates", "2", "--budget", "0.02", "--device", "cuda",
        "--profile", "quick", "--out", str(out), "--no-report",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    df = detbench.load_results(out)
    assert set(df["status"]) == {"ok"} and set(df["device"]) == {"cuda"}
    sized = df[df["workload"].isin(["matmul_rows", "elementwise_rows"])]
    assert len(sized) == 2 * 2 * 2 and set(sized["batch_invariant"]) <= {True, False}
    assert set(sized["batch_size"]) == {16}
    varies = sized[sized["batch_invariant"] == False]  # noqa: E712
    assert set(varies["batch_first_variant_size"]) <= {2, 4, 16}
    assert df[df["workload"] == "no_sizes"]["batch_invariant"].isna().all()


def test_distinct_counts_the_first_output_invariant_counts_all() -> None:
    """A decoder's completion (its first output) agrees across sizes while its logits (the
    second) differ: one distinct result, and not invariant."""
    ids = torch.tensor([3, 1, 4])
    logits = torch.tensor([0.5, 0.25])
    moved = torch.nextafter(logits, torch.tensor(9.0))
    v = invariance.compare({1: [ids, logits], 2: [ids.clone(), logits.clone()], 4: [ids, moved]})
    assert v.distinct == 1 and not v.invariant and v.first_variant_size == 4
    assert v.to_record()["batch_distinct_results"] == 1
    other = invariance.compare({1: [ids, logits], 2: [torch.tensor([3, 1, 5]), logits]})
    assert other.distinct == 2 and not other.invariant
