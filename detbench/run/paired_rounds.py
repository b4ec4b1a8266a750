"""Two decisions of a paired group (``run/paired.py``) that need no process: when its rounds may
stop, and whether one more member fits beside those already built.

**When the rounds stop** (time spent where the noise is). A group's rounds go
on until each mode's ratio to the baseline is known well enough, or stops getting better, under
a cap, as NVBench's stdrel criterion stops a measurement when its noise stops falling:

* after each round from ``MIN_ROUNDS`` on, every member but the baseline has its per-round log
  ratios to the baseline (the rounds both were timed in); the distribution-free 95% interval of
  their median (``worker.ranks.median_ci``) has a half-width ``w`` on the log scale;
* a member is **settled** when ``w <= log(1 + target)`` (the device's ``TARGET_REL``: 1% on a
  GPU, 3% on a CPU), or when ``w`` has not narrowed by ``NARROWING`` over the last
  ``PATIENCE`` rounds (more rounds of this noise would not buy a narrower figure: the between-
  process level, which more rounds cannot shrink, then carries the interval);
* the rounds stop once every member is settled, or at the cap.

A steady GPU step settles after 6 rounds and does not pay for 20; a noisy CPU step narrows
round after round, and gets rounds up to the cap.

**Whether one more member fits.** Every member of a group holds its copy of the workload at
once. From the largest footprint one copy has shown so far in this group (its peak: torch's
reserved peak on a GPU, its RSS's growth on a CPU, ``worker.memory.footprint_bytes``) and the
device's free memory the last member saw once built and warmed up (``worker.memory.free_bytes``),
one more copy fits when ``free - HEADROOM_FACTOR * footprint >= headroom`` (``HEADROOM_BYTES``
per device). Otherwise the group's members built so far take their rounds, the others are freed,
and the next members are built beside the baseline's copy, which stays built (``run/paired.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from detbench.worker.ranks import median_ci

#: The fewest rounds: 6 samples are the fewest with a 95% interval of their median.
MIN_ROUNDS = 6
#: Rounds over which an interval must narrow to be worth more rounds, and by how much (a share
#: of its half-width).
PATIENCE = 3
NARROWING = 0.10
#: Memory one more copy must leave free beyond its footprint, per device: the OS, the runner and
#: the workers' own growth on a host; the CUDA context and fragmentation on a GPU.
HEADROOM_BYTES = {"cpu": 1 << 30, "cuda": 1 << 30}
#: The footprint is counted this many times: a copy can peak above what the first one showed
#: (another mode's algorithms, a workspace).
HEADROOM_FACTOR = 1.25


def log_ratios(base: Mapping[int, float], mine: Mapping[int, float]) -> list[float]:
    """``log(t_base / t_mode)`` for each round both were timed in (round index -> seconds)."""
    return [
        math.log(base[r] / mine[r]) for r in sorted(mine) if r in base and base[r] > 0 and mine[r]
    ]


def half_width(logs: Sequence[float]) -> float:
    """The half-width, on the log scale, of the 95% interval of the median of ``logs``;
    infinite below 6 values."""
    ci = median_ci(list(logs))
    if ci is None:
        return math.inf
    s = sorted(logs)
    n = len(s)
    median = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    return max(median - ci[0], ci[1] - median)


def settled(widths: Sequence[float], target: float) -> bool:
    """Whether a member whose interval had ``widths`` (one per round, the last now) needs no
    more rounds (module docstring)."""
    if not widths or math.isinf(widths[-1]):
        return False
    if widths[-1] <= math.log1p(target):
        return True
    if len(widths) <= PATIENCE or math.isinf(widths[-1 - PATIENCE]):
        return False
    return widths[-1] > (1.0 - NARROWING) * widths[-1 - PATIENCE]


def fits(footprint: int | None, free: int | None, device: str) -> bool:
    """Whether one more copy of a workload whose largest copy so far held ``footprint`` bytes
    fits in ``free`` bytes of the device (module docstring); True where either is unknown."""
    if footprint is None or free is None:
        return True
    return free - HEADROOM_FACTOR * footprint >= HEADROOM_BYTES.get(device, 1 << 30)


def copies_at_once(footprint: int | None, free: int | None, device: str, most: int) -> int:
    """How many copies of a workload may be built at once, at least 1 and at most ``most``, where
    ``free`` was measured with none of them held: ``k`` fit when ``free - HEADROOM_FACTOR * k *
    footprint >= headroom``, as in ``fits``; ``most`` where either figure is unknown."""
    if footprint is None or free is None or footprint <= 0:
        return max(1, most)
    room = free - HEADROOM_BYTES.get(device, 1 << 30)
    return max(1, min(most, math.floor(room / (HEADROOM_FACTOR * footprint))))


def most_rounds(prepared: Sequence[Mapping[str, Any]], rounds: int, budget: float) -> int:
    """A group's most rounds: ``rounds``, fewer where the longest block (of the members'
    ``prepared`` messages) would take the members past ``budget`` seconds of sampling each (a
    step longer than the block is a block of its own: an RNN step of 40 ms, a training step of
    30 ms on the H100), never fewer than ``MIN_ROUNDS``."""
    longest = max((p["number_per_block"] * p["step_seconds"] for p in prepared), default=0.0)
    fit = math.floor(budget / longest) if longest > 0 else rounds
    return max(MIN_ROUNDS, min(rounds, fit))


class TwinRoom:
    """How many members timed as another mode (``acts.timed_as``) make their verdicts at once:
    at most ``most``, one until a copy of the workload has shown its footprint, then as many as
    the memory holds (``copies_at_once``), from what their verdicts reported per workload key:
    the largest footprint one copy showed, and the free memory last seen with none held."""

    def __init__(self, device: str, most: int) -> None:
        self.device, self.most = device, max(1, most)
        self._seen: dict[str, tuple[int | None, int | None]] = {}

    def at_once(self, key: str) -> int:
        room = self._seen.get(key)
        if self.most == 1 or room is None:
            return 1
        return copies_at_once(*room, self.device, self.most)

    def saw(self, key: str, said: Mapping[str, Any]) -> None:
        """A verdict's ``prepared`` message for ``key``: its footprint and the free memory."""
        got, free = said.get("footprint_bytes"), said.get("free_bytes")
        seen = (self._seen.get(key) or (None, None))[0]
        largest = got if seen is None else seen if got is None else max(int(seen), int(got))
        self._seen[key] = (largest, free)
