"""The recommendation rule (issue 12, item 3) and records whose workload changed a setting
(item 5), from result sets with known fingerprints and known timing samples, and the published
CPU run (read only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import detbench
from detbench import analysis
from detbench.analysis.recommend import CUDNN_FLAGS, inert_changes, recommendations, run_device
from detbench.core.modes import MODES, get_mode
from detbench.report import conditions
from detbench.report.render import to_markdown
from detbench.report.sections import ReportRun, build

from .conftest import ROOT
from .synthetic import env, record, write_run

PUBLISHED_CPU = ROOT / "results" / "20261123-133303-cpu-quick"
ALL_MODES = [m.name for m in MODES]


def samples(seconds: float, spread: float, replicate: int, drift: float = 0.0) -> list[float]:
    """Nine seconds-per-step samples spread evenly over ``seconds`` x (1 +- ``spread``), the
    replicate's median moved by ``drift`` x (replicate - 1): replicate 0 is faster, 2 slower."""
    centre = seconds * (1 + drift * (replicate - 1))
    return [float(x) for x in centre * (1 + np.linspace(-spread, spread, 9))]


def load(tmp_path: Path, recs: list[dict[str, Any]]) -> pd.DataFrame:
    return detbench.load_results(write_run(tmp_path, recs))


def by_workload(rec: pd.DataFrame) -> dict[tuple[str, str], dict[Any, Any]]:
    return {(r["suite"], r["workload"]): r for r in rec.to_dict("records")}


# --- (1) CPU, every mode reproducible, differences within the noise: the default mode --------


def noisy_cpu_run() -> list[dict[str, Any]]:
    """Two suites of two workloads on a CPU, every mode reproducible. Timing samples are drawn
    from one distribution for every mode (5% spread within a replicate, a random 3% shift per
    replicate), so every difference between modes is noise; the seed is fixed."""
    rng = np.random.default_rng(7)
    out = []
    for suite, workloads in (("a", ("w1", "w2")), ("b", ("w3", "w4"))):
        for w in workloads:
            for r in range(3):
                for mode in ALL_MODES:
                    shift = 1 + 0.03 * rng.standard_normal()
                    s = list(0.01 * shift * (1 + 0.05 * rng.standard_normal(15)))
                    out.append(record(w, mode, r, f"{w}-fp", s, suite=suite, device="cpu"))
    return out


def test_cpu_noise_recommends_default_everywhere(tmp_path: Path) -> None:
    df = load(tmp_path, noisy_cpu_run())
    assert run_device(df) == "cpu"
    rec = recommendations(df)
    assert len(rec) == 4 + 2  # four workloads, two suites
    assert list(rec["mode"]) == ["default"] * 6
    assert all(c == [] for c in rec["changes"])
    assert all(r.startswith("fewest changes from default (0)") for r in rec["reason"])
    # the other reproducible modes that may count on a CPU: the det-algos ones (the cuDNN-flag
    # modes are the same computation as their twins)
    assert all(r.endswith("the other reproducible mode is not significantly faster")
               for r in rec["reason"])  # fmt: skip
    # Noise made some cuDNN-flag mode the fastest by point estimate somewhere; it is not named.
    pts = analysis.costs(df)
    fastest = pts.loc[pts.groupby("workload")["relative_throughput"].idxmax(), "mode"]
    assert any(inert_changes(m, "cpu") for m in fastest)
    assert not any(inert_changes(m, "cpu") for m in rec["fastest_mode"])
    assert set(rec["snippet"]) == {get_mode("default").snippet()}


def test_cpu_noise_report_says_the_rule_and_why(tmp_path: Path) -> None:
    df = load(tmp_path, noisy_cpu_run())
    md = to_markdown(build(ReportRun(df, env(gpu=None))), tmp_path)
    assert "Recommendations: the mode bitwise identical in every replicate that " \
           "changes the fewest settings from torch's default" in md  # fmt: skip
    assert "On a CPU, the modes that change cuDNN flags are the same computation" in md
    for suite in ("a", "b"):
        assert f"| {suite} | default | 1x (baseline) |" in md
        assert f"| {suite} (default) | nothing: torch's defaults | 1x: the baseline |" in md
    assert "cudnn.enabled = False" not in md and "benchmark = True" not in md
    text = analysis.recommendation_text(df).splitlines()
    assert text[0].startswith("recommended mode per suite: the mode bitwise identical")
    assert text[1].startswith("  a: default: fewest changes from default (0)")


# --- (2) CPU: a significantly faster cuDNN-flag mode is still never recommended ----------------


def fast_no_cudnn(device: str) -> list[dict[str, Any]]:
    """One workload, every mode reproducible: no-cudnn twice as fast as the rest, with tight
    samples (its interval far above theirs)."""
    out = []
    for r in range(3):
        for mode in ("default", "bench", "det-algos", "no-cudnn"):
            secs = 0.005 if mode == "no-cudnn" else 0.010
            out.append(record("w", mode, r, "fp", samples(secs, 0.02, r, 0.01), device=device))
    return out


def test_cpu_never_recommends_a_cudnn_flag(tmp_path: Path) -> None:
    rec = by_workload(recommendations(load(tmp_path, fast_no_cudnn("cpu"))))
    for key in (("s", "w"), ("s", "*")):
        assert rec[key]["mode"] == "default", key
        assert rec[key]["fastest_mode"] != "no-cudnn"
        assert not set(rec[key]["changes"]) & set(CUDNN_FLAGS)


def test_the_same_records_on_a_gpu_recommend_the_faster_mode(tmp_path: Path) -> None:
    """Control for the test above: on CUDA, no-cudnn's interval lies above default's, so the
    rule picks it, and says why."""
    rec = by_workload(recommendations(load(tmp_path, fast_no_cudnn("cuda"))))
    w = rec[("s", "w")]
    assert (w["mode"], w["simplest"], w["changes"]) == ("no-cudnn", "default", ["cudnn_enabled"])
    assert w["reason"].startswith("no-cudnn is significantly faster than default: 2.00 [")
    assert w["ci_low"] > 1.0
    assert rec[("s", "*")]["mode"] == "no-cudnn"


def test_no_recommendation_when_only_cudnn_flag_modes_are_reproducible_on_a_cpu(
    tmp_path: Path,
) -> None:
    recs = []
    for r in range(3):
        recs.append(record("w", "default", r, f"d{r}", samples(0.01, 0.02, r), device="cpu"))
        recs.append(record("w", "no-cudnn", r, "fp", samples(0.01, 0.02, r), device="cpu"))
    rec = by_workload(recommendations(load(tmp_path, recs)))
    assert rec[("s", "w")]["mode"] is None and rec[("s", "w")]["snippet"] is None
    assert "but no-cudnn, which changes cuDNN flags" in rec[("s", "w")]["reason"]


# --- (3) CUDA: significantly faster, or faster within the noise --------------------------------


def gpu_speeds() -> list[dict[str, Any]]:
    """Suite ``sep``: bench is 1.4x default's throughput, samples 2% apart and replicates 1%
    apart: the intervals cannot overlap. Suite ``ovl``: bench is 1.02x, with samples 5% apart
    and replicates 4% apart: its point estimate is higher, its interval overlaps default's.
    det-algos is as fast as default. Every mode is reproducible."""
    out = []
    for suite, speedup, spread, drift in (("sep", 1.4, 0.02, 0.01), ("ovl", 1.02, 0.05, 0.04)):
        for r in range(3):
            for mode, secs in (("default", 0.010), ("bench", 0.010 / speedup),
                               ("det-algos", 0.010)):  # fmt: skip
                s = samples(secs, spread, r, drift)
                out.append(record("w", mode, r, f"{mode}-fp", s, suite=suite, device="cuda"))
    return out


def test_significantly_faster_mode_is_recommended_with_its_reason(tmp_path: Path) -> None:
    rec = by_workload(recommendations(load(tmp_path, gpu_speeds())))
    for key in (("sep", "w"), ("sep", "*")):
        r = rec[key]
        assert (r["mode"], r["simplest"], r["changes"]) == ("bench", "default", ["benchmark"])
        assert r["relative_throughput"] == pytest.approx(1.4)
        assert r["ci_low"] > 1.2
        assert r["reason"].startswith("bench is significantly faster than default: 1.40 [")
        assert "vs 1.00 [" in r["reason"] and "interval lies above 1" in r["reason"]


def test_faster_within_the_noise_is_not_recommended(tmp_path: Path) -> None:
    df = load(tmp_path, gpu_speeds())
    c = analysis.costs(df)
    bench = c[(c["suite"] == "ovl") & (c["mode"] == "bench")]["relative_throughput"]
    assert bench.iloc[0] > 1.0  # faster by its point estimate
    rec = by_workload(recommendations(df))
    for key in (("ovl", "w"), ("ovl", "*")):
        r = rec[key]
        assert (r["mode"], r["changes"]) == ("default", []), key
        assert r["ci_low"] < 1.0 < r["ci_high"]
        assert r["reason"] == (
            "fewest changes from default (0); none of the 2 other reproducible modes is "
            "significantly faster"
        )
        assert r["fastest_mode"] == "bench" and r["cost_vs_fastest"] > 0


def test_recommendations_are_reproducible(tmp_path: Path) -> None:
    """The seed decides the intervals: the same seed gives suite ``sep`` the same interval from
    its own records alone (each comparison draws from a generator of its own); another seed
    moves the interval and keeps the recommendation."""
    df = load(tmp_path, gpu_speeds())

    def sep(frame: pd.DataFrame, seed: int) -> dict[Any, Any]:
        return by_workload(recommendations(frame, seed=seed))[("sep", "w")]

    once = sep(df, 3)
    alone = sep(df[df["suite"] == "sep"], 3)
    assert (alone["ci_low"], alone["ci_high"]) == (once["ci_low"], once["ci_high"])
    other = sep(df, 4)
    assert (other["ci_low"], other["ci_high"]) != (once["ci_low"], once["ci_high"])
    assert (other["mode"], other["relative_throughput"]) == ("bench", once["relative_throughput"])


# --- (4) the default mode nondeterministic: the reproducible mode with the fewest changes -----


def test_nondeterministic_default_gives_det_algos(tmp_path: Path) -> None:
    """default differs run to run; det-algos and cudnn-det+det-algos are reproducible, the
    latter 1% faster, within the noise: det-algos, one change, is recommended."""
    recs = []
    for r in range(3):
        recs.append(record("w", "default", r, f"d{r}", samples(0.010, 0.03, r, 0.03),
                           device="cuda"))  # fmt: skip
        recs.append(record("w", "det-algos", r, "a", samples(0.012, 0.03, r, 0.03),
                           device="cuda"))  # fmt: skip
        recs.append(record("w", "cudnn-det+det-algos", r, "a", samples(0.0119, 0.03, r, 0.03),
                           device="cuda"))  # fmt: skip
    rec = by_workload(recommendations(load(tmp_path, recs)))
    for key in (("s", "w"), ("s", "*")):
        row = rec[key]
        assert (row["mode"], row["simplest"]) == ("det-algos", "det-algos")
        assert row["changes"] == ["deterministic_algorithms"]
        assert row["reason"].startswith("fewest changes from default (1: deterministic_algorithms)")
        assert row["fastest_mode"] == "default"
        assert row["snippet"] == get_mode("det-algos").snippet()


# --- Modes with settings: order, baseline, snippets ---------------------------------------------


def test_baseline_and_order_with_settings() -> None:
    labels = ["det-algos[fill_uninitialized_memory=off]", "no-cudnn", "det-algos", "default"]
    assert analysis.ordered_modes(labels) == [
        "default", "det-algos", "det-algos[fill_uninitialized_memory=off]", "no-cudnn",
    ]  # fmt: skip
    assert analysis.baseline_mode(labels) == "default"
    with_set = ["det-algos[autocast=bf16]", "default[autocast=bf16,warn_only=on]",
                "default[autocast=bf16]"]  # fmt: skip
    assert analysis.baseline_mode(with_set) == "default[autocast=bf16]"
    assert analysis.baseline_mode(["det-algos", "bench"]) == "bench"  # the first mode
    assert analysis.baseline_mode([]) is None


def test_a_run_with_set_overrides(tmp_path: Path) -> None:
    """``--set fill_uninitialized_memory=off`` on default and det-algos: the baseline is the
    default mode with the override, the verdicts sort by base mode, the snippet carries the
    setting."""
    fill = "[fill_uninitialized_memory=off]"
    recs = []
    for r in range(3):
        recs.append(record("w", "det-algos" + fill, r, "a", samples(0.011, 0.02, r), device="cpu"))
        recs.append(record("w", "default" + fill, r, f"d{r}", samples(0.01, 0.02, r), device="cpu"))
    df = load(tmp_path, recs)
    assert list(analysis.verdicts(df)["mode"]) == ["default" + fill, "det-algos" + fill]
    baseline, _ = analysis.summary_table(df)
    assert baseline == "default" + fill
    rec = by_workload(recommendations(df))[("s", "*")]
    assert rec["mode"] == "det-algos" + fill
    assert rec["changes"] == ["deterministic_algorithms", "fill_uninitialized_memory"]
    assert rec["relative_throughput"] == pytest.approx(0.01 / 0.011)
    assert "fill_uninitialized_memory = False" in rec["snippet"]
    assert rec["snippet"] == get_mode("det-algos" + fill).snippet()


# --- (5) records whose workload changed a setting ---------------------------------------------


def changed_run() -> list[dict[str, Any]]:
    """``all``: every det-algos replicate's workload turned deterministic algorithms off;
    ``some``: one of three did (and ran 10x slower with another fingerprint); ``old``: records
    of schema 2 (settings_changed None)."""
    out = []
    chg = ["deterministic_algorithms"]
    for r in range(3):
        out.append(record("all", "default", r, f"d{r}", samples(0.01, 0.02, r), device="cuda",
                          settings_changed=[]))  # fmt: skip
        out.append(record("all", "det-algos", r, "a", samples(0.01, 0.02, r), device="cuda",
                          settings_changed=chg))  # fmt: skip
        out.append(record("some", "default", r, "x", samples(0.01, 0.02, r), device="cuda",
                          settings_changed=[]))  # fmt: skip
        bad = r == 1
        out.append(record("some", "det-algos", r, "y-bad" if bad else "y",
                          samples(0.1 if bad else 0.01, 0.02, r), device="cuda",
                          settings_changed=[*chg, "benchmark"] if bad else []))  # fmt: skip
        out.append(record("old", "default", r, "o", samples(0.01, 0.02, r), device="cuda",
                          settings_changed=None))  # fmt: skip
        out.append(record("old", "det-algos", r, "o", samples(0.01, 0.02, r), device="cuda"))
    return out


def test_changed_settings_do_not_count(tmp_path: Path) -> None:
    df = load(tmp_path, changed_run())
    v = {(r["workload"], r["mode"]): r for r in analysis.verdicts(df).to_dict("records")}
    assert v[("all", "det-algos")]["verdict"] == "settings_changed"
    assert v[("all", "det-algos")]["changed"] == 3
    assert v[("all", "det-algos")]["changed_settings"] == ["deterministic_algorithms"]
    assert analysis.MARKS["settings_changed"] == "chg"
    some = v[("some", "det-algos")]
    assert (some["verdict"], some["ok"], some["replicates"], some["changed"]) == (
        "reproducible", 2, 3, 1)  # fmt: skip
    assert some["changed_settings"] == ["deterministic_algorithms", "benchmark"]
    assert some["items_per_second"] == pytest.approx(1000)  # the 10x slower one is left out
    assert v[("old", "det-algos")]["verdict"] == "reproducible"
    assert v[("old", "det-algos")]["changed"] == 0
    c = analysis.costs(df).set_index(["workload", "mode"])
    assert c.loc[("some", "det-algos"), "relative_throughput"] == pytest.approx(1.0)
    assert ("all", "det-algos") not in c.index
    rec = by_workload(recommendations(df))
    assert rec[("s", "all")]["mode"] is None  # default differs, det-algos does not vote
    assert rec[("s", "some")]["mode"] == "default"
    _, table = analysis.summary_table(df)
    assert "chg" in table


def test_changed_settings_are_warned_about(tmp_path: Path) -> None:
    df = load(tmp_path, changed_run())
    v = analysis.verdicts(df)
    warned = conditions.warnings(df, v, env(), analysis.costs(df))
    assert "s/all under det-algos changed deterministic_algorithms during the workload; its " \
           "verdict is not counted." in warned  # fmt: skip
    assert "s/some under det-algos changed deterministic_algorithms, benchmark during the " \
           "workload in 1 of 3 replicates; those replicates are not counted in its verdict " \
           "(reproducible)." in warned  # fmt: skip
    assert not any("s/old" in w for w in warned)
    assert not any("ended with status settings_changed" in w for w in warned)
    md = to_markdown(build(ReportRun(df, env())), tmp_path)
    assert "| all | det-algos | settings\\_changed | 0/3 |" in md
    assert "reproducible (1 replicate(s) not counted: settings changed)" in md
    assert "Settings read back:" in md


# --- The published CPU run ----------------------------------------------------------------------


@pytest.mark.skipif(not (PUBLISHED_CPU / "results.jsonl").is_file(), reason="no published run")
def test_published_cpu_run_recommends_no_cudnn_flag() -> None:
    """Its report (before this rule) recommended cudnn.enabled = False and benchmark = True
    for suites where the differences were noise; now no suite gets a cuDNN flag."""
    df = detbench.load_results(PUBLISHED_CPU)
    assert run_device(df) == "cpu"
    rec = recommendations(df)
    suites = rec[rec["workload"] == "*"]
    chosen = suites.dropna(subset=["mode"])
    assert len(chosen) >= 5
    for r in rec.dropna(subset=["mode"]).to_dict("records"):
        assert not set(r["changes"]) & set(CUDNN_FLAGS), r
    assert set(chosen["mode"]) == {"default"}
