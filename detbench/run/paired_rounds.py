"""Two decisions of a paired group (``run/paired.py``) that need no process: when its rounds may
stop, and whether one more member fits beside those already built.

**When the rounds stop** (as NVBench's stdrel criterion stops when its noise stops falling):
after each round from ``MIN_ROUNDS`` on, each member but the baseline has ``w``, the log-scale
half-width of the 95% interval (``worker.ranks.median_ci``) of its median log ratio to the
baseline. It is **settled** when ``w <= log(1 + target)`` (``TARGET_REL``), or when ``w`` has not
narrowed by ``NARROWING`` over the last ``PATIENCE`` rounds (the between-process level, which
more rounds cannot shrink, then carries it). The rounds stop once all are settled, or at the cap.

**Whether one more member fits.** From the largest footprint one copy has shown so far
(``worker.memory.footprint_bytes``) and the free memory the last member saw once warmed up, one
more copy fits when ``free - HEADROOM_FACTOR * footprint >= HEADROOM_BYTES[device]``. Otherwise
the members built so far take their rounds, and the next are built beside the baseline's copy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from detbench.worker.ranks import median_ci

#: The fewest rounds: 6 samples are the fewest with a 95% interval of their median.
MIN_ROUNDS = 6
#: Rounds over which an interval must narrow, and by what share of its half-width, to go on.
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
    """The half-width of the 95% interval of the median of ``logs``; infinite below 6 values."""
    ci = median_ci(list(logs))
    if ci is None:
        return math.inf
    s = sorted(logs)
    n = len(s)
    median = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    return max(median - ci[0], ci[1] - median)


def settled(widths: Sequence[float], target: float) -> bool:
    """Whether a member whose interval had ``widths`` (one per round) needs no more rounds."""
    if not widths or math.isinf(widths[-1]):
        return False
    if widths[-1] <= math.log1p(target):
        return True
    if len(widths) <= PATIENCE or math.isinf(widths[-1 - PATIENCE]):
        return False
    return widths[-1] > (1.0 - NARROWING) * widths[-1 - PATIENCE]


def fits(footprint: int | None, free: int | None, device: str) -> bool:
    """Whether one more copy fits (module docstring); True where either figure is unknown."""
    if footprint is None or free is None:
        return True
    return free - HEADROOM_FACTOR * footprint >= HEADROOM_BYTES.get(device, 1 << 30)


def copies_at_once(footprint: int | None, free: int | None, device: str, most: int) -> int:
    """How many copies fit at once (as in ``fits``, ``free`` measured with none held), between 1
    and ``most``; ``most`` where either figure is unknown."""
    if footprint is None or free is None or footprint <= 0:
        return max(1, most)
    room = free - HEADROOM_BYTES.get(device, 1 << 30)
    return max(1, min(most, math.floor(room / (HEADROOM_FACTOR * footprint))))


def most_rounds(prepared: Sequence[Mapping[str, Any]], rounds: int, budget: float) -> int:
    """A group's most rounds: ``rounds``, fewer where the longest block (a long step is a block
    of its own) would pass ``budget`` seconds of sampling, never fewer than ``MIN_ROUNDS``."""
    longest = max((p["number_per_block"] * p["step_seconds"] for p in prepared), default=0.0)
    fit = math.floor(budget / longest) if longest > 0 else rounds
    return max(MIN_ROUNDS, min(rounds, fit))


class TwinRoom:
    """How many members timed as another mode make their verdicts at once: one until a copy has
    shown its footprint, then as many as memory holds (``copies_at_once``), at most ``most``."""

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
