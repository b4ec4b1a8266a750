from __future__ import annotations

from pathlib import Path

import pytest
import torch

from detbench import fingerprint as fp


def test_digest_sees_every_bit_dtype_and_shape() -> None:
    x = torch.arange(6, dtype=torch.float32)
    base = fp.step_digest([x])
    assert fp.step_digest([x.clone()]) == base
    flipped = x.clone()
    flipped.view(torch.int32)[3] ^= 1  # one bit of one element
    assert fp.step_digest([flipped]) != base
    assert fp.step_digest([x.reshape(2, 3)]) != base  # same bytes, other shape
    assert fp.step_digest([x.view(torch.int32)]) != base  # same bytes, other dtype
    assert fp.step_digest([x, None]) != base
    assert fp.step_digest([x[::2]]) == fp.step_digest([x[::2].contiguous()])  # layout-free


def test_negative_zero_and_nan_payloads_are_bits_not_values() -> None:
    assert fp.step_digest([torch.tensor([0.0])]) != fp.step_digest([torch.tensor([-0.0])])


def test_half_precision_sparse_and_scalars() -> None:
    for dtype in (torch.bfloat16, torch.float16, torch.bool, torch.int64, torch.complex64):
        t = torch.ones(3, dtype=dtype)
        assert len(fp.step_digest([t])) == 64
    assert fp.step_digest([torch.tensor(1.5)]) != fp.step_digest([torch.tensor([1.5])])
    dense = torch.tensor([[0.0, 2.0], [3.0, 0.0]])
    # Uncoalesced duplicates hash like their coalesced sum.
    i = torch.tensor([[0, 1, 1], [1, 0, 0]])
    sparse = torch.sparse_coo_tensor(
        i, torch.tensor([2.0, 1.0, 2.0]), (2, 2), check_invariants=True
    )
    assert fp.step_digest([sparse]) == fp.step_digest([dense.to_sparse()])
    with pytest.raises(TypeError, match="output 0 is list"):
        fp.step_digest([[1, 2]])


def test_combine_is_order_sensitive() -> None:
    a, b = fp.step_digest([torch.zeros(1)]), fp.step_digest([torch.ones(1)])
    assert fp.combine([a, b]) != fp.combine([b, a])


def test_max_abs_diff_against_a_saved_reference(tmp_path: Path) -> None:
    ref = tmp_path / "ref.npz"
    out = [torch.tensor([1.0, 2.0, float("inf")]), torch.tensor([1, 2], dtype=torch.bfloat16)]
    fp.save_reference(ref, "abc", out)
    same = fp.diff_against_reference(ref, "abc", out)
    assert same == {"max_abs_diff": 0.0, "exact": True, "reference_fingerprint": "abc"}
    other = [torch.tensor([1.0, 2.25, float("inf")]), torch.tensor([1, 3], dtype=torch.bfloat16)]
    # Same values under another fingerprint: the distance is computed, and is zero.
    assert fp.diff_against_reference(ref, "xyz", out)["max_abs_diff"] == 0.0  # type: ignore[index]
    assert fp.diff_against_reference(ref, "other", other)["max_abs_diff"] == 1.0  # type: ignore[index]
    nan = [torch.tensor([1.0, float("nan"), float("inf")]), out[1]]
    d = fp.diff_against_reference(ref, "nan", nan)
    assert d is not None and d["max_abs_diff"] is None and "non-finite" in d["note"]
    assert fp.diff_against_reference(tmp_path / "missing.npz", "abc", out) is None


def test_large_references_are_sampled_and_flagged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fp, "REFERENCE_MAX_ELEMENTS", 10)
    ref = tmp_path / "ref.npz"
    x = torch.arange(100.0)
    fp.save_reference(ref, "f", [x])
    y = x.clone()
    y[10] += 0.5  # index 10 is in the sample (stride 10)
    d = fp.diff_against_reference(ref, "y", [y])
    assert d is not None and d["max_abs_diff"] == 0.5 and d["exact"] is False


def test_a_reference_left_by_an_unfinished_attempt_of_the_same_replicate(tmp_path: Path) -> None:
    """A run killed after replicate 0 saved its reference but before it recorded: resumed,
    replicate 0 measures again and replaces the reference instead of comparing with itself."""
    ref = tmp_path / "ref.npz"
    out = [torch.tensor([1.0, 2.0])]
    fp.save_reference(ref, "abc", out, replicate=0)
    assert fp.diff_against_reference(ref, "abc", out, replicate=0) is None
    assert fp.diff_against_reference(ref, "abc", out, replicate=1) == {
        "max_abs_diff": 0.0, "exact": True, "reference_fingerprint": "abc",
    }  # fmt: skip
