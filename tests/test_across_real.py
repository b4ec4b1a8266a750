"""Like with like across runs, on the published GPU runs (issue 28, item 2):

- results/20261124-085144-cuda-full-conv-rnn-training (an H100, training over 20 steps) and
  results/20261126-040517-cuda-full-h200-partial (an H200, training over 10 steps, 824 of 990);
- results/20261126-060355-cuda-full-h100-partial (an H100, 736 of 990) and the same H200 run:
  one commit, the same options.

Every expectation is checked against the raw records too, so a verdict that stops matching the
data fails here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from detbench.analysis.across import Run, across, counts, load_runs
from detbench.analysis.autotuner import AUTOTUNER
from detbench.report.across import to_text
from detbench.report.compare import compare, summary_lines
from detbench.store.results import load_results

from .conftest import ROOT

OLD_H100 = ROOT / "results" / "20261124-085144-cuda-full-conv-rnn-training"
H100 = ROOT / "results" / "20261126-060355-cuda-full-h100-partial"
H200 = ROOT / "results" / "20261126-040517-cuda-full-h200-partial"
TRAINING = ("resnet18_cifar", "lstm_language_model", "transformer_encoder")


def _rows(a: Path, b: Path) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["workload"], r["mode"]): r for r in across(load_runs([a, b]))}


@pytest.fixture(scope="module")
def old_runs() -> list[Run]:
    return load_runs([OLD_H100, H200])


@pytest.fixture(scope="module")
def old_pair(old_runs: list[Run]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["workload"], r["mode"]): r for r in across(old_runs)}


@pytest.fixture(scope="module")
def new_pair() -> dict[tuple[str, str], dict[str, Any]]:
    return _rows(H100, H200)


def _first_steps(d: Path, workload: str, mode: str, n: int) -> set[tuple[str, ...]]:
    """The distinct first ``n`` step digests of a workload's ok records in one run."""
    df = load_results(d)
    g = df[(df["workload"] == workload) & (df["mode"] == mode) & (df["status"] == "ok")]
    return {tuple(s[:n]) for s in g["step_fingerprints"]}


def test_training_is_compared_over_the_steps_both_ran(old_pair: dict[Any, Any]) -> None:
    """The H100 hashed training over 20 steps, the H200 over 10: no "different bits" where the
    first 10 step digests are equal record by record, and the verdict says over how many."""
    assert counts(list(old_pair.values()))["different bits"] == 0
    same = [r for (w, _), r in old_pair.items() if w in TRAINING and r["verdict"] == "same bits"]
    assert len(same) == 8  # the 8 pairs compare used to call DIFFERENT bits
    for r in same:
        assert (r["compared_steps"], list(r["steps"].values())) == (10, [20, 10])
        a = _first_steps(OLD_H100, r["workload"], r["mode"], 10)
        b = _first_steps(H200, r["workload"], r["mode"], 10)
        assert len(a) == 1 and a == b, (r["workload"], r["mode"])
    # The other training pairs are nondeterministic within the runs, not different between them.
    rest = {r["verdict"] for (w, _), r in old_pair.items() if w in TRAINING and r not in same}
    assert rest == {"nondeterministic within a run"}


def test_bench_only_differences_are_the_autotuners(old_pair: dict[Any, Any]) -> None:
    """conv's differences under bench alone are the autotuner's choice, not the GPU's: the
    modes without cudnn.benchmark give the same bits on both GPUs."""
    tuned = {k: r for k, r in old_pair.items() if r["verdict"] == AUTOTUNER}
    assert set(tuned) == {("conv2d_resnet50_stage3_1x1", "bench"),
                          ("conv3d_r3d18_stage1", "bench"),
                          ("conv3d_unet3d_level2", "bench")}  # fmt: skip
    for (w, _), r in tuned.items():
        assert r["benchmark"] and r["same_bits"] is False and r["differs"] == {}
        # Unknown is not a difference: the old H100 run did not record its CPU capability.
        assert r["machine_facts"] == {"gpu": ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]}
        plain = [m for m in ("default", "det-algos", "cudnn-det+det-algos")
                 if old_pair[(w, m)]["verdict"] == "same bits"]  # fmt: skip
        assert len(plain) == 3
        assert r["note"].endswith("; all 3 modes without it give the same bits in both runs")


def test_the_like_for_like_pair(new_pair: dict[Any, Any]) -> None:
    """One commit and the same options on an H100 and an H200: no "different bits" at all; every
    difference is in a mode with cudnn.benchmark on, in a workload whose modes without it agree."""
    n = counts(list(new_pair.values()))
    assert (n["different bits"], n["not comparable"]) == (0, 0)
    tuned = [r for r in new_pair.values() if r["verdict"] == AUTOTUNER]
    assert len(tuned) == 7 and all(r["mode"].startswith("bench") for r in tuned)
    for r in tuned:
        plain = [x for (w, _), x in new_pair.items() if w == r["workload"] and not x["benchmark"]]
        assert plain and all(x["verdict"] == "same bits" for x in plain), r["workload"]
    assert not any(r["compared_steps"] for r in new_pair.values())


def test_another_profile_is_not_comparable(tmp_path: Path) -> None:
    """The old H100 run's training records, said to be of the quick profile, against the H200
    run: "not comparable" with what differs, never "different bits"."""
    quick = tmp_path / "quick"
    quick.mkdir()
    recs = [json.loads(x) for x in (OLD_H100 / "results.jsonl").read_text().splitlines()]
    recs = [{**r, "profile": "quick"} for r in recs if r["suite"] == "training"]
    (quick / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    shutil.copy(OLD_H100 / "env.json", quick / "env.json")
    runs = load_runs([quick, H200])
    rows = across(runs)
    assert {r["verdict"] for r in rows} == {"not comparable"} and len(rows) == 12
    assert rows[0]["note"] == f"size profile quick ({quick}) vs full ({H200})"
    text = to_text(runs, rows)
    assert "not comparable: size profile quick (A) vs full (B)" in text
    assert "DIFFERENT" not in text


def test_compare_says_it_in_words(old_runs: list[Run], old_pair: dict[Any, Any]) -> None:
    """The verdicts of the old H100 run and the H200 run as `detbench compare` prints them."""
    out = to_text(old_runs, list(old_pair.values()))
    assert "DIFFERENT bits" not in out
    assert ("The training suite's 3 workloads hashed 20 steps in A and 10 in B: their bits are "
            "compared over the 10 steps both ran.") in out  # fmt: skip
    line = next(x for x in out.splitlines()
                if x.startswith("training/lstm_language_model") and " default " in x)  # fmt: skip
    assert line.split()[2:12] == ["same", "bits", "over", "the", "10", "steps", "both", "ran",
                                  "A", "B"]  # fmt: skip
    assert out.rstrip().endswith(
        "84 (workload, mode) in more than one run: 73 same bits, 0 different bits, 3 autotuner's "
        "choice, 8 nondeterministic within a run, 0 not comparable, 0 no verdict"
    )


def test_changed_verdicts_under_benchmark_are_named() -> None:
    """Two runs' own verdicts that changed under bench are put down to the autotuner."""
    c = compare(OLD_H100, H200, n_boot=20)
    changed = c.table[c.table["verdict_changed"]]
    assert changed["mode"].tolist() == ["bench", "bench"] and changed["benchmark"].all()
    lines = summary_lines(c)
    assert lines[1:3] == [
        "verdict changed: conv/conv1d_wav2vec2_feature under bench: reproducible (A) -> "
        "nondeterministic (B)",
        "verdict changed: conv/conv2d_resnet50_stage1_3x3 under bench: reproducible (A) -> "
        "nondeterministic (B)",
    ]
    assert lines[3] == (
        "2 of the 2 changed verdicts are in modes with cudnn.benchmark on. It times candidate "
        "algorithms in each process and may pick another one in the next, so such a verdict can "
        "change between two runs on one GPU too: it is the autotuner's choice, not the GPU's."
    )
