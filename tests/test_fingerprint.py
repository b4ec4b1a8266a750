from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from detbench.worker import digest as dg
from detbench.worker import fingerprint as fp
from tests.conftest import requires_cuda

methods = pytest.mark.parametrize("method", fp.METHODS)


@methods
def test_digest_sees_every_bit_dtype_and_shape(method: str) -> None:
    x = torch.arange(6, dtype=torch.float32)
    base = fp.step_digest([x], method)
    assert fp.step_digest([x.clone()], method) == base
    flipped = x.clone()
    flipped.view(torch.int32)[3] ^= 1  # one bit of one element
    assert fp.step_digest([flipped], method) != base
    assert fp.step_digest([x.reshape(2, 3)], method) != base  # same bytes, other shape
    assert fp.step_digest([x.view(torch.int32)], method) != base  # same bytes, other dtype
    assert fp.step_digest([x, None], method) != base
    # layout-free
    assert fp.step_digest([x[::2]], method) == fp.step_digest([x[::2].contiguous()], method)


@methods
def test_negative_zero_and_nan_payloads_are_bits_not_values(method: str) -> None:
    zero, neg = torch.tensor([0.0]), torch.tensor([-0.0])
    assert fp.step_digest([zero], method) != fp.step_digest([neg], method)
    nan = torch.tensor([float("nan")])
    other_nan = nan.clone()
    other_nan.view(torch.int32)[0] ^= 1  # another NaN payload: the same value, other bits
    assert fp.step_digest([nan], method) != fp.step_digest([other_nan], method)


@methods
def test_half_precision_sparse_and_scalars(method: str) -> None:
    for dtype in (torch.bfloat16, torch.float16, torch.bool, torch.int64, torch.complex64):
        t = torch.ones(3, dtype=dtype)
        assert len(fp.step_digest([t], method)) == 64
    assert fp.step_digest([torch.tensor(1.5)], method) != fp.step_digest(
        [torch.tensor([1.5])], method
    )
    dense = torch.tensor([[0.0, 2.0], [3.0, 0.0]])
    # Uncoalesced duplicates hash like their coalesced sum.
    i = torch.tensor([[0, 1, 1], [1, 0, 0]])
    sparse = torch.sparse_coo_tensor(
        i, torch.tensor([2.0, 1.0, 2.0]), (2, 2), check_invariants=True
    )
    base = fp.step_digest([dense.to_sparse()], method)
    assert fp.step_digest([sparse], method) == base
    other_value = torch.tensor([[0.0, 2.0], [3.5, 0.0]]).to_sparse()
    other_index = torch.tensor([[0.0, 2.0], [0.0, 3.0]]).to_sparse()  # same values, moved
    assert fp.step_digest([other_value], method) != base
    assert fp.step_digest([other_index], method) != base
    assert fp.step_digest([dense], method) != base  # dense and sparse differ in structure
    with pytest.raises(TypeError, match="output 0 is list"):
        fp.step_digest([[1, 2]], method)


def test_an_unknown_method_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown fingerprint method 'md5'"):
        fp.step_digest([torch.zeros(1)], "md5")


def test_sha256_is_the_schema_1_digest_byte_for_byte() -> None:
    """Runs recorded before the device digest carry sha256 digests: the method still gives them."""
    outs = [torch.arange(5, dtype=torch.bfloat16), None, torch.tensor([[1, 2], [3, 4]]).t()]
    h = hashlib.sha256()
    h.update(b"0:torch.bfloat16:(5,);")
    h.update(outs[0].view(torch.uint8).numpy().tobytes())  # type: ignore[union-attr]
    h.update(b"1:None;")
    h.update(b"2:torch.int64:(2, 2);")
    h.update(torch.tensor([[1, 3], [2, 4]]).numpy().tobytes())
    assert fp.step_digest(outs, "sha256") == h.hexdigest()
    assert fp.step_digest(outs, "device") != h.hexdigest()


@methods
def test_combine_is_order_sensitive(method: str) -> None:
    a, b = fp.step_digest([torch.zeros(1)], method), fp.step_digest([torch.ones(1)], method)
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


# --- the device digest ------------------------------------------------------------------------

#: Every dtype a workload returns, by element size: 1, 2, 4, 8 and 16 bytes.
DTYPES = (
    torch.bool,
    torch.int8,
    torch.uint8,
    torch.float16,
    torch.bfloat16,
    torch.int16,
    torch.float32,
    torch.int32,
    torch.float64,
    torch.int64,
    torch.complex64,
    torch.complex128,
)


def _random(n: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """``n`` elements of ``dtype`` with random bits (every bit pattern, NaN payloads included)."""
    size = torch.empty((), dtype=dtype).element_size()
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (n * size,), dtype=torch.uint8, generator=g)
    if dtype == torch.bool:
        raw &= 1  # a bool byte holds 0 or 1
    return raw.view(dtype)


def _flips(t: torch.Tensor) -> Iterator[tuple[int, int]]:
    """(byte, bit) of the lowest and the highest bit of the first, middle and last element."""
    size, n = t.element_size(), t.numel()
    for e in sorted({0, n // 2, n - 1}):
        yield e * size, 0
        if t.dtype != torch.bool:  # a bool's other bits are not a value
            yield e * size + size - 1, 7


def _flipped(t: torch.Tensor, byte: int, bit: int) -> torch.Tensor:
    out = t.clone()
    out.reshape(-1).view(torch.uint8)[byte] ^= 1 << bit
    return out


@methods
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [1, 3, 5, 1000])
def test_a_single_bit_flip_anywhere_changes_the_digest(method: str, dtype: torch.dtype, n: int):
    """Sizes of 1, 3 and 5 elements are not a multiple of 4 bytes for 1- and 2-byte dtypes."""
    t = _random(n, dtype)
    base = fp.step_digest([t], method)
    for byte, bit in _flips(t):
        assert fp.step_digest([_flipped(t, byte, bit)], method) != base, (byte, bit)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.complex128], ids=str)
def test_bit_flips_in_tensors_spanning_many_chunks(
    dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dg, "CPU_CHUNK_WORDS", 64)  # 1001 elements: 16 to 63 chunks
    t = _random(1001, dtype)
    base = fp.step_digest([t])
    for byte, bit in _flips(t):
        assert fp.step_digest([_flipped(t, byte, bit)]) != base, (byte, bit)


def test_bit_flips_in_a_tensor_larger_than_the_real_chunks() -> None:
    # 8 MiB + 12 bytes: two GPU chunks, 65 CPU chunks
    t = _random(max(dg.CHUNK_WORDS, dg.CPU_CHUNK_WORDS) + 3, torch.float32)
    base = fp.step_digest([t])
    for byte, bit in _flips(t):
        assert fp.step_digest([_flipped(t, byte, bit)]) != base, (byte, bit)


@methods
def test_moved_values_change_the_digest(method: str) -> None:
    """Differences in several words at once: two elements swapped, a shift by one."""
    t = torch.arange(100, dtype=torch.float32)
    swapped = t.clone()
    swapped[[3, 70]] = swapped[[70, 3]]
    base = fp.step_digest([t], method)
    assert fp.step_digest([swapped], method) != base
    assert fp.step_digest([t.roll(1)], method) != base


@methods
def test_the_same_bytes_under_another_dtype_or_shape_differ(method: str) -> None:
    x = _random(12, torch.float32)
    views = [
        x,
        x.view(torch.int32),
        x.view(torch.float16),
        x.view(torch.bfloat16),
        x.view(torch.int8),
        x.view(torch.uint8),
        x.view(torch.complex64),
        x.reshape(3, 4),
        x.reshape(4, 3),
        x.reshape(1, 12),
        x[:8].reshape(2, 2, 2),
    ]
    digests = [fp.step_digest([v], method) for v in views]
    assert len(set(digests)) == len(digests)
    ones = torch.ones(8, dtype=torch.uint8)
    assert fp.step_digest([ones], method) != fp.step_digest([ones.view(torch.bool)], method)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.cpu().contiguous().reshape(-1).view(torch.uint8)


def _layouts(x: torch.Tensor) -> list[torch.Tensor]:
    """``x``'s values under other memory layouts."""
    transposed = x.transpose(0, 1).contiguous().transpose(0, 1)  # column-major copy
    padded = torch.zeros(x.shape[0] + 1, *x.shape[1:], dtype=x.dtype, device=x.device)
    padded[1:] = x
    return [
        transposed,
        x.contiguous(memory_format=torch.channels_last),
        padded[1:],  # a storage offset: not 4-byte aligned for 1- and 2-byte dtypes
    ]


@methods
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.bool, torch.complex64])
def test_equal_values_in_any_memory_layout_give_one_digest(method: str, dtype: torch.dtype):
    x = _random(2 * 3 * 5 * 7, dtype).reshape(2, 3, 5, 7)
    base = fp.step_digest([x], method)
    for y in _layouts(x):
        assert torch.equal(_bits(y), _bits(x))
        assert (y.stride(), y.storage_offset()) != (x.stride(), x.storage_offset())
        assert fp.step_digest([y], method) == base
    expanded = x[:, :1].expand(-1, 3, -1, -1)  # stride 0 along dim 1
    assert fp.step_digest([expanded], method) == fp.step_digest([expanded.contiguous()], method)


def test_the_device_digest_does_not_depend_on_the_chunking() -> None:
    """Chunks of any size (and non-contiguous pieces split across rows) give the same sums."""
    x = _random(6 * 7 * 11, torch.float16).reshape(6, 7, 11)
    tensors = [x, x.permute(2, 0, 1), x.transpose(0, 2).contiguous().transpose(0, 2), x[:, ::2]]
    tensors += [_random(77, dtype) for dtype in (torch.bool, torch.float64, torch.complex128)]
    expected = dg.lane_sums(tensors)
    for chunk in (1, 2, 3, 7, 64, 1 << 30):
        assert dg.lane_sums(tensors, chunk) == expected, chunk
    contiguous = [t.contiguous() for t in tensors]
    assert dg.lane_sums(contiguous) == expected


_M64 = (1 << 64) - 1


def _wrap(v: int) -> int:
    """``v`` in two's complement int64, as a wrapping int64 operation gives it."""
    return ((v + (1 << 63)) & _M64) - (1 << 63)


def _splitmix_weight(i: int, lane: int) -> int:
    """The weight of word ``i`` from the splitmix64 finaliser in Python integers."""
    seed = (0x243F6A8885A308D3, 0xB7E151628AED2A6A)[lane]
    z = (i * 0x9E3779B97F4A7C15 + seed) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return (z ^ (z >> 31)) | 1


def _reference_sums(t: torch.Tensor) -> list[int]:
    words = t.contiguous().reshape(-1).view(dg.word_dtype(t.dtype)).tolist()
    return [
        sum(_splitmix_weight(i, lane) * x for i, x in enumerate(words)) & _M64
        for lane in range(dg.LANES)
    ]


def test_torch_int64_arithmetic_wraps_in_twos_complement_on_cpu() -> None:
    """What the device digest relies on, checked here; the CUDA test below compares with it."""
    big = torch.tensor([2**62, 2**63 - 1, -(2**63)])
    assert (big * 4).tolist() == [0, -4, 0]
    assert (big[1:2] + 1).tolist() == [-(2**63)]
    assert big[:2].sum().item() == -(2**62) - 1  # 3 * 2^62 - 1 - 2^64
    assert torch.tensor([2**62] * 4).sum().item() == 0
    pa, pb = [-0x61C8864680B583EB, 0x7FFF_FFFF_FFFF_FFFF], [0x3FFF_0000_1234_5678, -3]
    a, b = torch.tensor(pa).repeat(1 << 18), torch.tensor(pb).repeat(1 << 18)
    products = [x * y for x, y in zip(pa, pb, strict=True)]
    assert (a[:2] * b[:2]).tolist() == [_wrap(p) for p in products]
    # 2^19 terms: a vectorised sum, split over threads
    assert (a * b).sum().item() == _wrap(sum(products) << 18)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.bfloat16, torch.float32, torch.float64])
def test_the_device_digest_is_the_documented_sum_mod_2_64(dtype: torch.dtype) -> None:
    """Lane sums against Python's unbounded integers: weights, sign extension, wrap-around."""
    t = _random(301, dtype, seed=3)
    assert dg.lane_sums([t], 64) == [_reference_sums(t)]
    positions = torch.tensor([0, 1, 2**40])
    for lane in range(dg.LANES):
        got = [w & _M64 for w in dg.weights(positions, lane).tolist()]
        assert got == [_splitmix_weight(i, lane) for i in (0, 1, 2**40)]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=requires_cuda)])
def test_the_digest_runs_under_deterministic_algorithms(device: str) -> None:
    """The digest runs inside a workload's mode: none of its ops may raise under det-algos (and
    uninitialised memory filled with NaN there must not reach it)."""
    t = _random(3000, torch.float16).reshape(30, 100).t().to(device)
    expected = [fp.step_digest([t], method) for method in fp.METHODS]
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        assert [fp.step_digest([t], method) for method in fp.METHODS] == expected
    finally:
        torch.use_deterministic_algorithms(before)


def test_device_and_sha256_agree_on_genuine_nondeterminism() -> None:
    """index_put_(accumulate=True) of 2^22 values onto 64 slots on 2 threads adds in an order
    that depends on thread timing (as the behaviour suite's workload): over 20 runs, whether two
    runs are equal is the same question for both methods, for the float32 sums and for views of
    them where runs also agree (rounded to half precision, single slots)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        g = torch.Generator().manual_seed(0)
        idx = torch.randint(0, 64, (1 << 22,), generator=g)
        vals = torch.randn(1 << 22, generator=g)
        runs = [torch.zeros(64).index_put_((idx,), vals, accumulate=True) for _ in range(20)]
    finally:
        torch.set_num_threads(threads)
    views: list[Any] = [
        lambda r: [r],
        lambda r: [r.half()],
        lambda r: [r.bfloat16()],
        lambda r: [r[:1]],
        lambda r: [r[1:2], r[2:3].double()],
    ]
    verdicts: set[tuple[bool, bool]] = set()
    for view in views:
        dev = [fp.step_digest(view(r), "device") for r in runs]
        sha = [fp.step_digest(view(r), "sha256") for r in runs]
        for i, j in itertools.combinations(range(len(runs)), 2):
            bitwise = torch.equal(runs[i].view(torch.int32), runs[j].view(torch.int32))
            assert (dev[i] == dev[j]) == (sha[i] == sha[j]), (i, j)
            verdicts.add((bitwise, dev[i] == dev[j]))
    # Genuine nondeterminism was seen, and both verdicts were given.
    assert {v for _, v in verdicts} == {True, False}
    assert (False, False) in verdicts


# --- on a GPU ---------------------------------------------------------------------------------


@requires_cuda
def test_torch_int64_arithmetic_wraps_on_cuda() -> None:
    a = torch.tensor([2**62, 2**63 - 1, -0x61C8864680B583EB], device="cuda")
    b = torch.tensor([4, 1, 0x3FFF_0000_1234_5678], device="cuda")
    assert (a * b).tolist() == (a.cpu() * b.cpu()).tolist()
    assert (a + b).tolist() == (a.cpu() + b.cpu()).tolist()
    many = torch.full((1 << 20,), 2**62 + 12345, device="cuda")
    assert many.sum().item() == many.cpu().sum().item()


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_same_values_give_the_same_digest_on_cpu_and_cuda(dtype: torch.dtype) -> None:
    for n in (1, 5, 1000, dg.CHUNK_WORDS + 3):
        t = _random(n, dtype)
        on_gpu = t.cuda()
        for method in fp.METHODS:
            assert fp.step_digest([on_gpu], method) == fp.step_digest([t], method), (n, method)
    x = _random(2 * 3 * 5 * 7, dtype).reshape(2, 3, 5, 7)
    base = fp.step_digest([x])
    for y in _layouts(x.cuda()):
        assert y.is_cuda and fp.step_digest([y]) == base


@requires_cuda
def test_sparse_coo_gives_the_same_digest_on_cpu_and_cuda() -> None:
    dense = torch.tensor([[0.0, 2.0, 0.0], [3.0, 0.0, -1.5]])
    i = torch.tensor([[0, 1, 1, 1], [1, 0, 0, 2]])
    uncoalesced = torch.sparse_coo_tensor(i, torch.tensor([2.0, 1.0, 2.0, -1.5]), (2, 3))
    for method in fp.METHODS:
        base = fp.step_digest([dense.to_sparse()], method)
        assert fp.step_digest([dense.cuda().to_sparse()], method) == base
        assert fp.step_digest([uncoalesced.cuda()], method) == base


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64], ids=str)
def test_a_bit_flip_on_cuda_changes_the_digest(dtype: torch.dtype) -> None:
    t = _random(dg.CHUNK_WORDS + 5, dtype).cuda()
    base = fp.step_digest([t])
    for byte, bit in _flips(t):
        assert fp.step_digest([_flipped(t, byte, bit)]) != base, (byte, bit)


@requires_cuda
def test_a_gib_on_cuda_sends_a_few_bytes_to_the_host() -> None:
    """Every copy from the GPU to the host during the digest of a 1 GiB tensor, counted at the
    dispatcher, and the digest's temporary GPU memory against the bound in
    detbench.worker.digest."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class HostCopies(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.bytes = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            srcs = [a for a in args if isinstance(a, torch.Tensor)]
            outs = out if isinstance(out, (tuple, list)) else [out]
            from_gpu = any(a.is_cuda for a in srcs)
            for o in outs:
                if from_gpu and isinstance(o, torch.Tensor) and o.device.type == "cpu":
                    self.bytes += o.numel() * o.element_size()
                elif from_gpu and not isinstance(o, torch.Tensor) and o is not None:
                    self.bytes += 8  # a scalar read back (.item())
            return out

    t = torch.randn(1 << 28, device="cuda")  # 1 GiB of float32
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    with HostCopies() as copies:
        d = fp.step_digest([t, t[: 1 << 20]])
    assert copies.bytes <= 2 * 8 * dg.LANES
    extra = torch.cuda.max_memory_allocated() - before
    assert extra <= 36 * dg.CHUNK_WORDS + (1 << 20), extra  # the bound, plus 1 MiB of rounding
    assert d == fp.step_digest([t.cpu(), t[: 1 << 20].cpu()])
