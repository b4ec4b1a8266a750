"""How fast a step digest is, by method, device and size: GB/s of float32 outputs.

    python -m pytest -q -s benchmarks/test_digest_speed.py

"device" is detbench.worker.digest's integer digest, computed where the tensor lives; "sha256"
copies
the bytes to the host (a no-op for a CPU tensor) and hashes them there. Both give the same
verdicts (tests/test_fingerprint.py); this says what each costs. The rounds are few on purpose:
the whole file takes under two minutes on a 2-core CPU.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch

from detbench.worker import fingerprint as fp

MIB = 1 << 20
#: Bytes of float32 output, and the rounds timed at each size (each round digests it once).
SIZES = {1 * MIB: 50, 64 * MIB: 5, 512 * MIB: 2}
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@functools.lru_cache(maxsize=1)  # one tensor alive at a time: 512 MiB is enough
def _output(nbytes: int, device: str) -> torch.Tensor:
    # The digests' cost does not depend on the values; random ones are just honest.
    return torch.empty(nbytes // 4, device=device).uniform_()


# The method varies fastest, so each tensor is made once for both methods.
@pytest.mark.parametrize("method", fp.METHODS)
@pytest.mark.parametrize("nbytes", list(SIZES), ids=lambda n: f"{n // MIB}MiB")
@pytest.mark.parametrize("device", DEVICES)
def test_digest_throughput(benchmark: Any, method: str, nbytes: int, device: str) -> None:
    t = _output(nbytes, device)
    # Both methods end with the digest on the host, so each call includes every sync it needs.
    digest = benchmark.pedantic(
        fp.step_digest, args=([t], method), rounds=SIZES[nbytes], iterations=1, warmup_rounds=1
    )
    assert len(digest) == 64
    median = benchmark.stats.stats.median
    gbps = nbytes / median / 1e9
    benchmark.extra_info.update(gb_per_s=round(gbps, 3), bytes=nbytes, device=device)
    print(
        f"\n{method:>6} digest, {device:>4}, {nbytes // MIB:4d} MiB float32: "
        f"{gbps:7.3f} GB/s (median of {SIZES[nbytes]} rounds, {1e3 * median:.1f} ms)"
    )
