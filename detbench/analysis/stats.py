"""The one statistic of a throughput comparison: a ratio of median throughputs with a 95% interval.

Every throughput interval but a paired cost's comes from ``ratio``, and every geometric mean
over a suite's workloads from ``geometric_mean``. Each interval draws from a generator of its
own, seeded from the run's ``seed`` and the name of what is compared (``generator``), so it never
depends on what else ran, or in which order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

#: Bootstrap resamples of each side of a ratio.
N_BOOT = 2000
#: The interval's confidence, and the percentiles of the resampled ratios that bound it.
CONFIDENCE = 0.95
PERCENTILES = (100 * (1 - CONFIDENCE) / 2, 100 * (1 + CONFIDENCE) / 2)
#: The run's seed when the caller gives none.
SEED = 0


def key(*parts: object) -> str:
    """The stable name of a comparison: its parts joined by ``|``."""
    return "|".join(map(str, parts))


def comparison_key(suite: object, workload: object, mode: object, baseline: object) -> str:
    """``"suite/workload|mode|baseline"``: mode against baseline on one workload."""
    return key(f"{suite}/{workload}", mode, baseline)


def generator(seed: int, name: str) -> np.random.Generator:
    """The generator of comparison ``name``, the same in every process (SHA-256, not ``hash``)."""
    digest = int.from_bytes(hashlib.sha256(name.encode()).digest(), "big")
    return np.random.default_rng(np.random.SeedSequence([int(seed), digest]))


def median_throughput(reps: Sequence[np.ndarray]) -> float:
    """Throughput (steps/s): the median over replicates of 1 / each replicate's median."""
    return float(np.median([1.0 / np.median(s) for s in reps]))


def bootstrap_throughput(
    reps: Sequence[np.ndarray], rng: np.random.Generator, n_boot: int = N_BOOT
) -> np.ndarray:
    """Bootstrap draws of ``median_throughput``, resampling both levels: the samples within each
    replicate, then the replicates (the between-process variation, usually the larger)."""
    per_rep = np.empty((len(reps), n_boot))
    for i, s in enumerate(reps):
        s = np.asarray(s, dtype=float)
        idx = rng.integers(0, len(s), size=(n_boot, len(s)))
        per_rep[i] = 1.0 / np.median(s[idx], axis=1)
    pick = rng.integers(0, len(reps), size=(n_boot, len(reps)))
    chosen = np.take_along_axis(per_rep.T, pick, axis=1)  # (n_boot, replicates)
    out: np.ndarray = np.median(chosen, axis=1)
    return out


def interval(draws: np.ndarray) -> tuple[float, float]:
    """The ``CONFIDENCE`` percentile interval of bootstrap draws."""
    low, high = np.percentile(draws, PERCENTILES)
    return float(low), float(high)


#: What every sentence and cell says of a ratio whose 95% interval contains 1 (``noise_words``).
NOISE = "within the noise"


def _bounds(low: float | None, high: float | None) -> tuple[float, float] | None:
    if low is None or high is None:
        return None
    try:
        return float(low), float(high)
    except (TypeError, ValueError):
        return None


def within_noise(low: float | None, high: float | None) -> bool:
    """The one rule: a ratio is within the noise where its 95% interval contains 1."""
    b = _bounds(low, high)
    return b is not None and b[0] <= 1.0 <= b[1]


#: An interval holding both 1/TOO_WIDE and TOO_WIDE cannot tell a halving from a doubling.
TOO_WIDE = 2.0


def says_nothing(low: float | None, high: float | None) -> bool:
    """The one rule for an interval too wide to say anything (``TOO_WIDE``)."""
    b = _bounds(low, high)
    return b is not None and b[0] <= 1 / TOO_WIDE and b[1] >= TOO_WIDE


def noise_words(low: float | None, high: float | None) -> str:
    """``NOISE`` where the interval contains 1 (``within_noise``), else ""."""
    return NOISE if within_noise(low, high) else ""


@dataclass(frozen=True)
class Ratio:
    """A throughput ratio: point estimate, 95% interval, and the draws it came from."""

    point: float
    low: float
    high: float
    draws: np.ndarray = field(repr=False, compare=False)

    @property
    def significant(self) -> bool:
        """The interval excludes 1."""
        return not within_noise(self.low, self.high)

    def scaled(self, factor: float) -> Ratio:
        """The same ratio times a constant (items per step of two workloads)."""
        return Ratio(
            self.point * factor, self.low * factor, self.high * factor, self.draws * factor
        )


def ratio(
    reps: Sequence[np.ndarray],
    base_reps: Sequence[np.ndarray],
    name: str,
    seed: int = SEED,
    n_boot: int = N_BOOT,
) -> Ratio:
    """``reps``' throughput over ``base_reps``', with ``n_boot`` bootstrap draws of each side."""
    rng = generator(seed, name)
    draws = bootstrap_throughput(reps, rng, n_boot) / bootstrap_throughput(base_reps, rng, n_boot)
    point = median_throughput(reps) / median_throughput(base_reps)
    return Ratio(point, *interval(draws), draws)


def geometric_mean(ratios: Sequence[Ratio]) -> Ratio:
    """The geometric mean of ratios and of their draws; one ratio is returned as it is."""
    if not ratios:
        raise ValueError("geometric_mean of no ratios")
    if len(ratios) == 1:
        return ratios[0]
    point = geometric_mean_of([r.point for r in ratios])
    draws = np.exp(np.mean(np.log(np.vstack([r.draws for r in ratios])), axis=0))
    return Ratio(point, *interval(draws), draws)


def geometric_mean_of(points: Sequence[float]) -> float:
    """The geometric mean of point estimates (no interval); one is returned as it is."""
    if len(points) == 1:
        return float(points[0])
    return float(np.exp(np.mean(np.log(np.asarray(points, dtype=float)))))
