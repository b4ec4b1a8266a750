"""An exact digest of a tensor's bits, computed on the tensor's own device.

The digest of a tensor is ``LANES`` sums modulo 2^64, one per lane::

    lane_l = sum_i w_l(i) * x_i   (mod 2^64)

where ``x_i`` is the i-th *word* of the tensor's bytes in logical (row-major) order, read as an
integer and extended to 64 bits, and ``w_l(i)`` is a pseudo-random odd 64-bit weight computed from
the word's position ``i`` and the lane's seed (the splitmix64 finaliser, computed on the device in
chunks, so no weight table is ever stored). Words are 4 bytes (int32, sign-extended) for dtypes of
4 bytes or more (an 8-byte element is two words, a 16-byte one four), 2 bytes (int16,
sign-extended) for 2-byte dtypes and 1 byte (uint8) for 1-byte ones, so a word never straddles two
elements and any element boundary is a word boundary: no padding, and any element range can be
digested on its own (that is what makes chunking and non-contiguous tensors cheap).

What is relied on: torch's int64 addition and multiplication wrap around in two's complement on
CPU and CUDA (tests/test_fingerprint.py checks it on the CPU against Python integers, and a CUDA
test checks that a CPU and a CUDA digest of the same values agree), so every operation here is
arithmetic in the ring Z/2^64. Addition in that ring is associative and commutative, so the sums
do not depend on the order in which a reduction kernel adds its terms, on the chunking, or on the
device: the digest is a function of the bits alone. Right shifts are arithmetic in torch; the
logical shifts of splitmix64 are made with a mask.

Collision odds. Let two tensors of the same dtype and shape (both are in the digest's header)
differ in their words, d_i = x_i - x'_i, not all zero, and let 2^k be the largest power of two
dividing every d_i: k <= 31 for int32 words (|d_i| < 2^32), k <= 15 for int16, k <= 7 for uint8.
A lane misses the difference when sum_i w(i) d_i = 0 (mod 2^64). Write d_j = 2^k u with u odd
for some j. With the weights odd and otherwise uniformly random and independent, w(j) u runs over
all 2^(63-k) odd residues modulo 2^(64-k) with equal probability whatever the other terms are, so
the lane misses with probability at most 2^-(63-k); two independent lanes miss together with
probability at most 2^-(2(63-k)): at worst 2^-64 (differences only in the top bit of int32 words,
e.g. float32 sign flips), 2^-126 when some word differs in its lowest bit (k = 0: a last-bit
difference of a float32 or float64). A difference in a *single* word is never missed: w(j) d_j
is an odd number times 2^k with k < 64, which is not 0 mod 2^64. For comparison, sha256's
collision odds for accidental differences are about 2^-256.

The weights are a fixed pseudo-random function of position, not a secret drawn per run. For what
detbench compares (the outputs of two runs that differ, if at all, through the order of float
operations, an atomic race or an algorithm choice) that is enough: such differences do not depend
on the weights, so for them the weights behave as if random; the splitmix64 finaliser has no
structure (linear or periodic) that a numerical difference pattern would follow. It is not a
cryptographic hash: anyone who knows the weights can build two different tensors with the same
digest (for instance by solving one linear equation mod 2^64), so it protects against accidents,
not against an adversary; use ``method="sha256"`` for that.

Memory: a tensor is digested in chunks of at most ``chunk_words`` words (``CHUNK_WORDS``, 2^21,
on a GPU; ``CPU_CHUNK_WORDS``, 2^15, on a CPU). A chunk needs four int64 buffers of that many
elements (positions, words, weights and a scratch buffer), allocated once per tensor:
``32 * chunk_words`` bytes (64 MiB on a GPU, 1 MiB on a CPU, less for a smaller tensor), plus,
for a non-contiguous tensor, a contiguous copy of at most one chunk (``4 * chunk_words`` bytes):
at most 72 MiB on a GPU (the digest's addition to a workload's peak memory), 1.1 MiB on a CPU.
Only ``8 * LANES`` bytes per tensor go to the host, in one copy per call.

Cost: 33 elementwise passes over the chunk's int64 buffers (15 per lane, 3 shared), about 140
bytes of memory traffic per byte of float32 digested: on a GPU far faster than copying to the
host and hashing there; on a CPU, whose chunks stay in its cache, slower than sha256 with the
CPU's SHA instructions, so there sha256 is the faster choice, with the same verdicts
(benchmarks/test_digest_speed.py measures both).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

#: Independent lanes; each adds 64 bits to the digest and halves its throughput.
LANES = 2
#: Words per chunk on a GPU (2^21 words = 8 MiB of float32 data): bounds the temporary memory
#: (above); large enough that the kernels, not their launches, set the pace (33 per chunk).
CHUNK_WORDS = 1 << 21
#: Words per chunk on a CPU: 2^15 keeps the four buffers (1 MiB) in the L2 cache, and every op
#: under torch's parallel grain size (32768 elements), so it runs on one thread and never waits
#: for a second one on a busy machine (measured here: several times faster than 2^21).
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
#: One seed per lane: arbitrary 64-bit constants (the first hexadecimal digits of pi and e).
#: Lane 1's weight at position i is lane 0's at position i + 0xAB922E0B0631D5FB (mod 2^64), more
#: than 2^62 positions away in either direction, so for any tensor (< 2^62 words) the two lanes
#: use disjoint stretches of splitmix64's sequence.
_SEEDS = tuple(_s64(s) for s in (0x243F6A8885A308D3, 0xB7E151628AED2A6A))[:LANES]
assert len(_SEEDS) == LANES


def word_dtype(dtype: torch.dtype) -> torch.dtype:
    """The integer type a tensor of ``dtype`` is read as (see the module docstring)."""
    return {1: torch.uint8, 2: torch.int16}.get(dtype.itemsize, torch.int32)


def weights(positions: torch.Tensor, lane: int) -> torch.Tensor:
    """The odd weights ``w_lane(i)`` of the int64 word positions ``i`` (mod 2^64, as int64)."""
    scaled = positions.to(torch.int64) * _GOLDEN
    return _weights_into(scaled, lane, torch.empty_like(scaled), torch.empty_like(scaled))


def _weights_into(
    scaled: torch.Tensor, lane: int, out: torch.Tensor, scratch: torch.Tensor
) -> torch.Tensor:
    """``weights`` from ``scaled = i * _GOLDEN`` (shared by the lanes), written into ``out``;
    ``scratch`` is a buffer of the same size."""
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
    """``t`` in logical order as (index of the first element, 1-D contiguous tensor) pieces of at
    most ``max_elems`` elements; only a non-contiguous piece is copied, one at a time."""
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
    """For each strided tensor, its ``LANES`` sums as unsigned 64-bit Python ints. The work runs
    on each tensor's device, in chunks of ``chunk_words`` words (default ``CPU_CHUNK_WORDS`` on a
    CPU, ``CHUNK_WORDS`` elsewhere); the sums of all the tensors on one device reach the host in
    one copy. The sums do not depend on the chunk size."""
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
    """The (LANES,) int64 sums of one strided tensor, left on its device (no copy to the host,
    no synchronisation): for callers that collect many and copy them together."""
    default = CPU_CHUNK_WORDS if t.device.type == "cpu" else CHUNK_WORDS
    return _device_sums(t.detach(), chunk_words or default)


def _device_sums(t: torch.Tensor, chunk_words: int) -> torch.Tensor:
    """The (LANES,) int64 sums of one strided tensor, on its device."""
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
