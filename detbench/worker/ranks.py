"""The distribution-free 95% interval of a median, from the ranks of its order statistics: pure
Python, no torch and no scipy, so that the CLI (``run.paired_rounds``) and every worker can use it
without paying either's import (seconds of CPU at each start-up)."""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

#: The confidence of every interval detbench states.
CONFIDENCE = 0.95

#: ``median_ci_ranks`` counts exactly up to this many samples (0.1 ms at 200, 2 ms at 1000).
EXACT_UP_TO = 1000


@lru_cache(maxsize=4096)
def median_ci_ranks(n: int, confidence: float = CONFIDENCE) -> tuple[int, int] | None:
    """1-based ranks ``(j, n + 1 - j)`` of the order statistics that bound a distribution-free
    ``confidence`` interval of the median of ``n`` samples, or None (n < 6 at 95 %): ``j`` is
    the largest rank with ``P(B <= j - 1) <= (1 - confidence) / 2``, ``B ~ Binomial(n, 1/2)``.
    Exact in integers up to ``EXACT_UP_TO`` samples; above, each term a float from ``lgamma``
    (scipy's ranks for every n tested, up to 20,000)."""
    tail = (1.0 - confidence) / 2.0
    j = 0
    if n <= EXACT_UP_TO:
        num, den = Fraction(tail).as_integer_ratio()
        bound = num << n  # P(B <= i) <= tail  <=>  den * sum_{t <= i} C(n, t) <= num * 2^n
        term = total = 1  # C(n, j) and the sum of C(n, t) for t <= j
        while j <= n and den * total <= bound:
            j += 1
            term = term * (n - j + 1) // j
            total += term
    else:
        log_half_n, lg = n * math.log(0.5), math.lgamma(n + 1)
        cdf = 0.0
        while j <= n:
            cdf += math.exp(lg - math.lgamma(j + 1) - math.lgamma(n - j + 1) + log_half_n)
            if cdf > tail:
                break
            j += 1
    j = min(j, n // 2 + 1)
    return (j, n + 1 - j) if j >= 1 else None


def median_ci(samples: tuple[float, ...] | list[float]) -> tuple[float, float] | None:
    """The 95 % distribution-free interval of the median, or None below 6 samples."""
    ranks = median_ci_ranks(len(samples))
    if ranks is None:
        return None
    s = sorted(samples)
    return s[ranks[0] - 1], s[ranks[1] - 1]
