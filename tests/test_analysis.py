"""Verdicts, costs with intervals and recommendations, from result sets with known fingerprints
and known timing samples."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import detbench
from detbench.analysis import costs, recommendation_text, recommendations, verdicts
from detbench.core.modes import get_mode
from detbench.store.results import ResultWriter

from .synthetic import fast_and_same, record, write_run


@pytest.fixture
def results(tmp_path: Path) -> pd.DataFrame:
    recs = []
    for r in range(3):
        recs += fast_and_same(r)
        # racy: never reproducible; unsupported under deterministic algorithms.
        recs.append(record("racy", "default", r, f"r{r}", [0.001] * 5, suite="t"))
        recs.append(record("racy", "det-algos", r, None, [], status="unsupported", suite="t"))
        # noisy: IQR of 20% of the median in one replicate.
        noisy = [0.008, 0.009, 0.010, 0.011, 0.012] if r == 0 else [0.010] * 5
        recs.append(record("noisy", "default", r, "n", noisy, suite="t"))
        recs.append(record("noisy", "det-algos", r, "n", [0.010] * 5, suite="t"))
    with ResultWriter(tmp_path) as w:
        for rec in recs:
            w.append(rec)
    return detbench.load_results(tmp_path)


def by_key(df: pd.DataFrame, *cols: str) -> dict[Any, dict[Any, Any]]:
    return {tuple(r[c] for c in cols): r for r in df.to_dict("records")}


def test_verdicts(results: pd.DataFrame) -> None:
    v = by_key(verdicts(results), "workload", "mode")
    assert v[("fast", "default")]["verdict"] == "nondeterministic"
    assert v[("fast", "default")]["distinct_fingerprints"] == 3
    assert v[("fast", "det-algos")]["verdict"] == "reproducible"
    assert v[("racy", "det-algos")]["verdict"] == "unsupported"
    assert v[("racy", "det-algos")]["message"] == "no deterministic implementation"


def test_costs_exact_for_constant_samples(results: pd.DataFrame) -> None:
    c = by_key(costs(results), "workload", "mode")
    fast = c[("fast", "det-algos")]
    # Every sample equal: every bootstrap resample gives the same ratio, 0.010 / 0.020.
    assert (fast["relative_throughput"], fast["ci_low"], fast["ci_high"]) == (0.5, 0.5, 0.5)
    assert fast["significant"] and not fast["noisy"]
    same = c[("same", "det-algos")]
    assert (same["relative_throughput"], same["ci_low"], same["ci_high"]) == (1.0, 1.0, 1.0)
    assert not same["significant"]
    assert c[("fast", "default")]["relative_throughput"] == 1.0
    assert ("racy", "det-algos") not in c  # unsupported: no timing, no cost


def test_noise_is_flagged_and_widens_the_interval(results: pd.DataFrame) -> None:
    c = by_key(costs(results), "workload", "mode")
    row = c[("noisy", "det-algos")]
    assert row["noisy"]  # the baseline's replicate 0 has IQR 0.002 on a median of 0.010
    # Resampling replicate 0's samples moves its median between 0.010 and 0.012... or 0.008:
    # the interval must cover the point estimate and include values away from it.
    assert row["ci_low"] <= row["relative_throughput"] == 1.0 <= row["ci_high"]
    assert not row["significant"]


def test_the_seed_decides_each_interval(tmp_path: Path) -> None:
    """One seeding rule (``analysis.stats``): each interval draws from a generator of its own,
    seeded with the run's seed and the comparison's name. So the same seed gives a workload the
    same interval whatever else the run holds, and another seed gives it another. (Samples drawn
    from a continuous distribution: with a few distinct samples every seed finds the same
    percentiles.)"""
    rng = np.random.default_rng(0)
    recs = [
        record(w, mode, r, "x", [float(x) for x in rng.normal(0.010, 0.001, 7)])
        for w in ("a", "b")
        for mode in ("default", "det-algos")
        for r in range(3)
    ]
    df = detbench.load_results(write_run(tmp_path, recs))

    def interval(frame: pd.DataFrame, seed: int) -> tuple[float, float]:
        row = by_key(costs(frame, seed=seed), "workload", "mode")[("a", "det-algos")]
        return row["ci_low"], row["ci_high"]

    assert interval(df, 3) == interval(df[df["workload"] == "a"], 3)
    assert interval(df, 3) != interval(df, 4)


def test_recommendations(results: pd.DataFrame) -> None:
    rec = by_key(recommendations(results), "suite", "workload")
    fast = rec[("s", "fast")]
    assert (fast["mode"], fast["fastest_mode"]) == ("det-algos", "default")
    assert fast["relative_throughput"] == 0.5 and fast["cost_vs_fastest"] == 0.5
    assert fast["snippet"] == get_mode("det-algos").snippet()
    racy = rec[("t", "racy")]
    assert racy["mode"] is None and racy["snippet"] is None  # no mode was reproducible
    # Suite s: only det-algos is reproducible for both workloads; geometric mean of 0.5 and 1.0
    # against default's 1.0.
    suite = rec[("s", "*")]
    assert suite["mode"] == "det-algos" and suite["fastest_mode"] == "default"
    assert suite["relative_throughput"] == pytest.approx(math.sqrt(0.5))
    assert suite["cost_vs_fastest"] == pytest.approx(1 - math.sqrt(0.5))
    # Suite t: racy is never reproducible, so no mode serves the whole suite.
    assert rec[("t", "*")]["mode"] is None


def test_recommendation_text(results: pd.DataFrame) -> None:
    from detbench.analysis.recommend import RULE

    assert recommendation_text(results).splitlines() == [
        f"recommended mode per suite: {RULE}.",
        "  s: det-algos: fewest changes from default (1: deterministic_algorithms); throughput "
        "0.71x default's (geometric mean), 29% below the fastest mode, default",
        "  t: no one mode: default makes 1 of 2 reproducible; no mode makes racy reproducible",
    ]
