"""How fast this host runs the work a CPU plan estimates, against the host where the plan's CPU
figures were measured: the factor that scales them.

A CPU plan's figures (``run/figures.py``) are seconds of work on one machine; another CPU, or
the same VM another day, runs it at another speed (docs/measured.md, "A CPU plan priced for its
host"). So the parent times a fixed reference work here (``measure``), and the plan multiplies
those figures by its ratio to ``HOST_REFERENCE_SECONDS``. Not scaled: what was measured here (a
dry run's start-up, a probe's or a resumed run's records), and what is a time by design.

**The reference work** is a verdict record in miniature (seeded convolutions with BatchNorm, an
LSTM, an MLP, a batched matmul; steps forward and backward, outputs digested), its figure the
median of ``PASSES`` passes; the VM's own drift leaves a plan about +-15% off (docs/measured.md).
A GPU plan is not scaled: this reference has not run on the GPU hosts' CPUs.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

from detbench.run.figures import HOST_REFERENCE_SECONDS

#: Timed passes of the reference work (after one untimed); their median is the host's figure.
PASSES = 11
#: The factor's bounds: beyond them the measurement (a process that took every core), not the
#: host, is the likelier cause, and the plan keeps the bound.
FACTOR_BOUNDS = (0.05, 20.0)


@dataclass(frozen=True)
class HostSpeed:
    """This host's seconds for one pass of the reference work, and the reference host's."""

    seconds: float
    reference: float

    @property
    def factor(self) -> float:
        low, high = FACTOR_BOUNDS
        return min(high, max(low, self.seconds / self.reference))

    def to_json(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 5),
            "reference_seconds": self.reference,
            "factor": round(self.factor, 3),
        }


def reference_pass() -> str:
    """One pass of the reference work; returns its digest (the same on every pass of a host)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    conv = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1),
    )
    lstm = nn.LSTM(32, 64, batch_first=True)
    mlp = nn.Sequential(nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 10))
    images = torch.randn(8, 3, 32, 32)  # (B, C, H, W)
    sequences = torch.randn(8, 16, 32)  # (B, T, features)
    rows = torch.randn(64, 256)
    a, b = torch.randn(16, 64, 64), torch.randn(16, 64, 64)
    digest = hashlib.sha256()
    for _ in range(3):
        y = conv(images)
        y.sum().backward()
        o, _ = lstm(sequences)
        o.sum().backward()
        z = mlp(rows)
        z.logsumexp(1).sum().backward()
        outs = [y, conv[0].weight.grad, o, lstm.weight_ih_l0.grad, z, torch.bmm(a, b)]
        for t in outs:
            assert t is not None
            digest.update(t.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def measure(passes: int = PASSES) -> float:
    """Seconds of one pass of the reference work here: the median of ``passes``, after one
    untimed (torch's first calls load kernels and start its threads)."""
    reference_pass()
    times = []
    for _ in range(passes):
        t0 = time.perf_counter()
        reference_pass()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def cores() -> int:
    """The cores this process may run on: its affinity where the platform has one (a Slurm job,
    ``taskset``, a cpuset), as torch's thread count, else the machine's."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def host_speed(device: str) -> HostSpeed | None:
    """This host's speed against ``device``'s figures' host; None for a GPU plan."""
    reference = HOST_REFERENCE_SECONDS.get(device)
    if reference is None:
        return None
    return HostSpeed(measure(), reference)
