"""An exact digest of a tensor's bits, computed on the tensor's own device.

The digest of a tensor is ``LANES`` sums modulo 2^64, one per lane::

    lane_l = sum_i w_l(i) * x_i   (mod 2^64)

where ``x_i`` is the i-th *word* of the tensor's bytes in logical order, extended to 64 bits, and
``w_l(i)`` a pseudo-random odd 64-bit weight of the position ``i`` and the lane's seed (the
splitmix64 finaliser, computed on the device: no weight table is stored). Words are int32 for
dtypes of 4 bytes or more, int16 for 2-byte and uint8 for 1-byte dtypes, so every element
boundary is a word boundary and any element range can be digested on its own (chunks,
non-contiguous tensors).

torch's int64 addition and multiplication wrap around in two's complement on CPU and CUDA (tests
check it), so this is arithmetic in the ring Z/2^64, whose addition is associative and
commutative: the sums do not depend on a reduction kernel's order, the chunking or the device.

Collision odds. Let two tensors of the same dtype and shape differ by d_i = x_i - x'_i, and 2^k
be the largest power of two dividing every d_i (k <= 31 for int32 words). With d_j = 2^k u, u
odd, and random odd weights, w(j) u runs over all 2^(63-k) odd residues mod 2^(64-k) whatever
the other terms, so a lane misses (sum_i w(i) d_i = 0 mod 2^64) with probability at most
2^-(63-k), and two lanes together at most 2^-64 (top-bit-only differences, e.g. float32 sign
flips) down to 2^-126 (a last-bit difference). A difference in a *single* word is never missed.

The weights are a fixed function of position, not a secret: the differences detbench looks
for (float order, atomic races, algorithm choices) do not depend on them, so for those they
behave as random. It is no cryptographic hash: knowing the weights, one can build two tensors
with the same digest; use ``method="sha256"`` against an adversary.

Memory: four int64 buffers of ``chunk_words`` elements per tensor (``32 * chunk_words`` bytes),
plus a contiguous copy of one chunk for a non-contiguous tensor: at most 72 MiB on a GPU, 1.1 MiB
on a CPU. Cost: 33 elementwise passes, about 140 bytes of traffic per float32 byte: far faster
than hashing on the host for a GPU, slower than sha256 on a CPU (benchmarks/test_digest_speed.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

#: Independent lanes; each adds 64 bits to the digest and halves its throughput.
LANES = 2
#: Words per chunk on a GPU (8 MiB of float32): bounds the temporary memory, yet large enough
#: that the kernels, not their 33 launches, set the pace.
CHUNK_WORDS = 1 << 21
#: Words per chunk on a CPU: the four buffers (1 MiB) stay in the L2 cache, and every op under
#: torch's parallel grain size runs on one thread (measured: several times faster than 2^21).
CPU_CHUNK_WORDS = 1 << 15

#: The mask that reads a signed int64 lane as the unsigned 64-bit sum.
M64 = (1 << 64) - 1


def _s64(v: int) -> int:
    """The signed int64 with the same 64 bits as the unsigned ``v`` (torch scalars are signed)."""
    v &= M64
    return v - (1 << 64) if v >= 1 << 63 else v


#: splitmix64's increment (2^64 / golden ratio) and finaliser constants (Steele, Lea, Flood 2014).
_GOLDEN = _s64(0x9E3779B97F4A7C15)
_MIX = ((30, _s64(0xBF58476D1CE4E5B9)), (27, _s64(0x94D049BB133111EB)), (31, None))
#: One seed per lane (the first hex digits of pi and e): more than 2^62 positions of
#: splitmix64's sequence apart, so for any tensor the two lanes use disjoint stretches of it.
_SEEDS = tuple(_s64(s) for s in (0x243F6A8885A308D3, 0xB7E151628AED2A6A))[:LANES]
assert len(_SEEDS) == LANES


def word_dtype(dtype: torch.dtype) -> torch.dtype:
    """The integer type a tensor of ``dtype`` is read as (see the module docstring)."""
    return {1: torch.uint8, 2: torch.int16}.get(dtype.itemsize, torch.int32)


def weights(positions: torch.Tensor, lane: int) -> torch.Tensor:
    """The odd weights ``w_lane(i)`` of the int64 word positions ``i``."""
    scaled = positions.to(torch.int64) * _GOLDEN
    return _weights_into(scaled, lane, torch.empty_like(scaled), torch.empty_like(scaled))


def _weights_into(
    scaled: torch.Tensor, lane: int, out: torch.Tensor, scratch: torch.Tensor
) -> torch.Tensor:
    """``weights`` from ``scaled = i * _GOLDEN`` (shared by the lanes), written into ``out``."""
    w = torch.add(scaled, _SEEDS[lane], out=out)
    for shift, mul in _MIX:
        # w ^= w >>> shift (a logical shift: torch's >> on int64 copies the sign bit, so mask it)
        torch.bitwise_right_shift(w, shift, out=scratch)
        scratch.bitwise_and_((1 << (64 - shift)) - 1)
        w.bitwise_xor_(scratch)
        if mul is not None:
            w.mul_(mul)
    return w.bitwise_or_(1)


def _pieces(t: torch.Tensor, max_elems: int, first: int = 0) -> Iterator[tuple[int, torch.Tensor]]:
    """``t`` in order as (first index, 1-D contiguous piece of <= ``max_elems`` elements) pairs."""
    if t.is_contiguous():
        flat = t.reshape(-1)
        for start in range(0, flat.numel(), max_elems):
            yield first + start, flat[start : start + max_elems]
    elif t.numel() <= max_elems:
        yield first, t.contiguous().reshape(-1)
    else:  # split along dim 0 (t has >= 1 dim and no empty one: it has > max_elems elements)
        row = t[0].numel()
        if row > max_elems:  # one row at a time, split further along its own dims
            for r in range(t.shape[0]):
                yield from _pieces(t[r], max_elems, first + r * row)
        else:  # as many rows as fit: each block is copied whole
            rows = max_elems // row
            for r in range(0, t.shape[0], rows):
                yield from _pieces(t[r : r + rows], max_elems, first + r * row)


def lane_sums(tensors: list[torch.Tensor], chunk_words: int | None = None) -> list[list[int]]:
    """Each strided tensor's ``LANES`` sums as unsigned ints, one copy to the host per device."""
    sums = [device_lanes(t, chunk_words) for t in tensors]
    out: list[list[int]] = [[] for _ in tensors]
    by_device: dict[torch.device, list[int]] = {}
    for i, s in enumerate(sums):
        by_device.setdefault(s.device, []).append(i)
    for idx in by_device.values():
        host = torch.stack([sums[i] for i in idx]).cpu().tolist()
        for i, row in zip(idx, host, strict=True):
            out[i] = [v & M64 for v in row]
    return out


def device_lanes(t: torch.Tensor, chunk_words: int | None = None) -> torch.Tensor:
    """The (LANES,) int64 sums of one strided tensor, left on its device (no synchronisation)."""
    default = CPU_CHUNK_WORDS if t.device.type == "cpu" else CHUNK_WORDS
    return _device_sums(t.detach(), chunk_words or default)


def _device_sums(t: torch.Tensor, chunk_words: int) -> torch.Tensor:
    wdtype = word_dtype(t.dtype)
    per_elem = t.element_size() // wdtype.itemsize
    max_elems = max(1, chunk_words // per_elem)  # whole elements per chunk
    n = max(1, min(max_elems, t.numel()) * per_elem)  # words in the largest chunk
    dev = t.device
    pos, words, w, tmp = (torch.empty(n, dtype=torch.int64, device=dev) for _ in range(4))
    parts: list[torch.Tensor] = []
    for first, piece in _pieces(t, max_elems):
        x = piece.view(wdtype) if piece.dtype != wdtype else piece
        m = x.numel()
        p0 = first * per_elem
        torch.arange(p0, p0 + m, dtype=torch.int64, out=pos[:m]).mul_(_GOLDEN)
        words[:m].copy_(x)  # sign-extends int16/int32 words, zero-extends uint8 ones
        for lane in range(LANES):
            _weights_into(pos[:m], lane, w[:m], tmp[:m])
            parts.append(w[:m].mul_(words[:m]).sum())
    if not parts:
        return torch.zeros(LANES, dtype=torch.int64, device=dev)
    return torch.stack(parts).view(-1, LANES).sum(0)
