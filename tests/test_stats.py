"""The one statistics module: the ratio interval, its seeding rule, and that every caller gives
the same numbers for the same comparison whatever else the records hold."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from detbench.analysis import attribution as at
from detbench.analysis import costs, invariance_table, recommendations, stats
from detbench.core.workload import builtin_suite_files, load_file
from detbench.report import attribution as ar
from detbench.report.render import to_markdown
from detbench.store.results import load_results
from detbench.worker.ranks import median_ci_ranks
from tests import synthetic as syn

# --- the seeding rule -------------------------------------------------------------------------


#: The first draws of the generator of "s/w|det-algos|default" at seed 0.
PINNED_DRAWS = [472414974, 219014884, 689005983, 1047341122]


def test_a_generator_is_named_by_seed_and_comparison() -> None:
    name = stats.comparison_key("s", "w", "det-algos", "default")
    assert name == "s/w|det-algos|default"
    draws = stats.generator(0, name).integers(0, 1 << 30, size=4)
    assert np.array_equal(draws, stats.generator(0, name).integers(0, 1 << 30, size=4))
    # Pinned: SHA-256 of the name, not Python's per-process hash, so every process and
    # platform draws these.
    assert draws.tolist() == PINNED_DRAWS
    other = stats.generator(0, stats.comparison_key("s", "w", "bench", "default"))
    assert not np.array_equal(draws, other.integers(0, 1 << 30, size=4))
    reseeded = stats.generator(1, name)
    assert not np.array_equal(draws, reseeded.integers(0, 1 << 30, size=4))


def test_ratio_is_deterministic_and_seed_sensitive() -> None:
    rng = np.random.default_rng(5)
    reps = [rng.lognormal(-4.6, 0.1, 12) for _ in range(3)]
    base = [rng.lognormal(-4.5, 0.1, 12) for _ in range(3)]
    a = stats.ratio(reps, base, "s/w|m|b", seed=0)
    b = stats.ratio(reps, base, "s/w|m|b", seed=0)
    assert (a.point, a.low, a.high) == (b.point, b.low, b.high)
    assert np.array_equal(a.draws, b.draws) and len(a.draws) == stats.N_BOOT
    c = stats.ratio(reps, base, "s/w|m|b", seed=1)
    assert c.point == a.point and (c.low, c.high) != (a.low, a.high)


# --- exact numbers ----------------------------------------------------------------------------


def test_constant_samples_give_a_point_interval() -> None:
    r = stats.ratio([np.full(5, 0.020)] * 3, [np.full(5, 0.010)] * 3, "x")
    assert (r.point, r.low, r.high, r.significant) == (0.5, 0.5, 0.5, True)


def test_one_replicate_of_three_samples_exactly() -> None:
    """Samples [1, 1, 2] s: a resample's median is 1 s (throughput 1) unless two of its three
    draws are the 2, which happens with probability 7/27 (about 26%), so the 2.5th percentile
    of the ratio against a constant 1 s is 0.5 and the 97.5th is 1, whatever the seed."""
    for seed in range(5):
        r = stats.ratio([np.array([1.0, 1.0, 2.0])], [np.ones(3)], "x", seed=seed)
        assert (r.point, r.low, r.high, r.significant) == (1.0, 0.5, 1.0, False)
        assert set(np.unique(r.draws)) == {0.5, 1.0}
        assert abs(np.mean(r.draws == 0.5) - 7 / 27) < 0.04


def test_geometric_mean_of_ratios() -> None:
    half = stats.ratio([np.full(4, 0.02)], [np.full(4, 0.01)], "a")
    double = stats.ratio([np.full(4, 0.01)], [np.full(4, 0.02)], "b")
    g = stats.geometric_mean([half, double])
    assert (g.point, g.low, g.high) == (1.0, 1.0, 1.0)
    assert stats.geometric_mean([half]) is half  # one workload: its own numbers, bit for bit
    assert stats.geometric_mean_of([2.0, 8.0]) == pytest.approx(4.0)
    assert stats.geometric_mean_of([0.3]) == 0.3


# --- an interval never depends on what else ran -----------------------------------------------


def noisy_records(workloads: tuple[str, ...] = ("a", "b"),
                  modes: tuple[str, ...] = ("default", "det-algos", "bench"),
                  suite: str = "s", device: str = "cpu") -> list[dict[str, Any]]:  # fmt: skip
    """Every (workload, mode) reproducible, with samples drawn from a generator of its own (so
    a record's samples do not depend on which others are made)."""
    out = []
    for w in workloads:
        for m in modes:
            base = {"default": 0.010, "det-algos": 0.012, "bench": 0.009}.get(m, 0.011)
            for r in range(3):
                g = np.random.default_rng([ord(c) for c in f"{w}|{m}|{r}"])
                s = (base * g.lognormal(0.0, 0.08, 8) * (1 + 0.03 * r)).tolist()
                out.append(syn.record(w, m, r, f"{w}-{m}", s, suite=suite, device=device))
    return out


def load(tmp_path: Path, name: str, recs: list[dict[str, Any]]) -> pd.DataFrame:
    return load_results(syn.write_run(tmp_path / name, recs))


def row(df: pd.DataFrame, **where: Any) -> dict[str, Any]:
    sel = np.ones(len(df), dtype=bool)
    for k, v in where.items():
        sel &= (df[k] == v).to_numpy()
    assert sel.sum() == 1, where
    return {str(k): v for k, v in df[sel].iloc[0].to_dict().items()}


def test_costs_interval_does_not_depend_on_other_workloads_or_modes(tmp_path: Path) -> None:
    full = costs(load(tmp_path, "full", noisy_records()), baseline="default")
    alone = costs(load(tmp_path, "alone", noisy_records(("a",), ("default", "det-algos"))),
                  baseline="default")  # fmt: skip
    # The other workload first, the modes in another order.
    reordered = costs(load(tmp_path, "reordered",
                           noisy_records(("b", "a"), ("bench", "det-algos", "default"))),
                      baseline="default")  # fmt: skip
    keys = ("relative_throughput", "ci_low", "ci_high", "significant")
    want = row(alone, workload="a", mode="det-algos")
    assert want["ci_low"] < want["relative_throughput"] < want["ci_high"]
    for df in (full, reordered):
        got = row(df, workload="a", mode="det-algos")
        assert [got[k] for k in keys] == [want[k] for k in keys]


def test_recommend_states_the_intervals_of_costs(tmp_path: Path) -> None:
    """The recommended mode's interval per workload is costs' interval of the same comparison,
    and per suite of one workload the same again; it does not move when other modes run."""
    df = load(tmp_path, "one", noisy_records(("a",)))
    rec = recommendations(df, baseline="det-algos")
    c = row(costs(df, baseline="det-algos"), workload="a", mode="default")
    for workload in ("a", "*"):
        r = row(rec, workload=workload)
        assert r["mode"] == "default"
        assert (r["relative_throughput"], r["ci_low"], r["ci_high"]) == (
            c["relative_throughput"], c["ci_low"], c["ci_high"],
        )  # fmt: skip
    fewer = load(tmp_path, "fewer", noisy_records(("a",), ("det-algos", "default")))
    r = row(recommendations(fewer, baseline="det-algos"), workload="a")
    assert (r["ci_low"], r["ci_high"]) == (c["ci_low"], c["ci_high"])


def test_recommend_per_suite_interval_is_the_geometric_mean_of_costs_draws(
    tmp_path: Path,
) -> None:
    df = load(tmp_path, "two", noisy_records())
    rec = row(recommendations(df, baseline="det-algos"), workload="*")
    reps = {
        (w, m): [np.asarray(s) for s in g["timing_samples"]]
        for (w, m), g in df.groupby(["workload", "mode"])
    }
    each = [
        stats.ratio(reps[(w, "default")], reps[(w, "det-algos")],
                    stats.comparison_key("s", w, "default", "det-algos"))
        for w in ("a", "b")
    ]  # fmt: skip
    g = stats.geometric_mean(each)
    assert rec["mode"] == "default"
    assert (rec["ci_low"], rec["ci_high"]) == (g.low, g.high)
    assert rec["relative_throughput"] == pytest.approx(g.point, rel=1e-15)


# --- attribution: the table and the sentence under it -----------------------------------------

DET = "cudnn-det+det-algos"
FILL_OFF = "cudnn-det+det-algos[fill_uninitialized_memory=off]"
HIGH = "cudnn-det+det-algos[float32_matmul_precision=high]"


def test_attribution_table_and_sentence_state_one_interval(tmp_path: Path) -> None:
    """The bug a new user met: ``5.035x [0.312, 38.166]`` in the table and ``5.04x, 95%
    interval 0.31x to 44.83x`` in the sentence under it, for the same comparison. With one
    workload in the suite, both now come from the same ``stats.ratio``, and from ``costs``."""
    files = builtin_suite_files()
    study = at.build_study("cpu", [w for w in load_file(files["batchnorm"])
                                   if w.suite == "batchnorm"])  # fmt: skip
    recs = []
    for r in range(3):
        for mode, sec in ((DET, 0.020), (FILL_OFF, 0.004), ("default", 0.010),
                          ("det-algos", 0.020), ("cudnn-det", 0.010), (HIGH, 0.020)):  # fmt: skip
            g = np.random.default_rng([r, len(mode)])
            s = (sec * g.lognormal(0.0, 0.6, 6) * (1 + 0.5 * r)).tolist()
            fp = "a" if "det-algos" in mode else f"d{r}"
            recs.append(syn.record("scatter", mode, r, fp, s, settings_changed=[]))
    run = syn.write_run(tmp_path / "run", recs, syn.env(gpu=None, study=study))
    df = load_results(run)
    table = row(at.effects(df, study), mode=FILL_OFF)
    sentence = row(ar.suite_effects(df, study), mode=FILL_OFF)
    cost = row(costs(df, baseline=DET), mode=FILL_OFF)
    keys = ("relative_throughput", "ci_low", "ci_high")
    assert [table[k] for k in keys] == [sentence[k] for k in keys] == [cost[k] for k in keys]
    assert cost["ci_high"] / cost["ci_low"] > 1.5  # a wide interval: the case that disagreed
    md = to_markdown(ar.blocks(df, {"study": study}, []), tmp_path)
    rel, low, high = (table[k] for k in keys)
    assert f"{rel:.3f}x \\[{low:.3f}, {high:.3f}\\]" in md
    assert f"{rel:.2f}x, 95% interval {low:.2f}x to {high:.2f}x" in md


# --- the invariance table's price of a setting is costs' interval ----------------------------


def test_invariance_setting_price_is_the_costs_interval(tmp_path: Path) -> None:
    base, variant = "default", "default[execution=compile]"
    recs = []
    for r in range(3):
        for mode, sec in ((base, 0.010), (variant, 0.008)):
            g = np.random.default_rng([r, len(mode)])
            s = (sec * g.lognormal(0.0, 0.1, 8)).tolist()
            recs.append(syn.record("w", mode, r, "fp", s, batch_invariant=True,
                                   batch_first_variant_size=None, batch_max_abs_diff=0.0,
                                   batch_same_as_smallest={"1": True, "2": True},
                                   batch_size=8, settings_changed=[]))  # fmt: skip
    df = load(tmp_path, "inv", recs)
    t = invariance_table.table(df)
    got = row(t, mode=variant)
    want = row(costs(df, baseline=base), mode=variant)
    assert (got["setting_price"], got["setting_price_low"], got["setting_price_high"]) == (
        want["relative_throughput"], want["ci_low"], want["ci_high"],
    )  # fmt: skip


# --- the median's order statistics from scipy, as the hand-written sums gave them ------------


def hand_written_ranks(n: int, confidence: float = 0.95) -> tuple[int, int] | None:
    """``timing.median_ci_ranks`` as it was before it used ``scipy.stats.binom``: exact integer
    sums of C(n, i) by the recurrence C(n, i + 1) = C(n, i) (n - i) / (i + 1)."""
    tail = (1.0 - confidence) / 2.0
    total = 2**n
    term = math.comb(n, 0)
    below = 0
    j = 0
    for i in range(n // 2 + 1):
        below += term
        if below / total > tail:
            break
        j = i + 1
        term = term * (n - i) // (i + 1)
    return (j, n + 1 - j) if j >= 1 else None


def test_median_ci_ranks_from_scipy_equal_the_hand_written_ones() -> None:
    for n in range(6, 201):
        assert median_ci_ranks(n) == hand_written_ranks(n), n
    for n in (*range(0, 6), *range(201, 2001, 7), 5000, 10_000):
        assert median_ci_ranks(n) == hand_written_ranks(n), n
    for confidence in (0.5, 0.8, 0.9, 0.99):
        for n in range(0, 301):
            assert median_ci_ranks(n, confidence) == hand_written_ranks(n, confidence), (
                n, confidence,
            )  # fmt: skip
