"""The speed-versus-reproducibility plane and the training divergence, from result sets with known
fingerprints, timings and losses."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

import detbench
from detbench.analysis import divergence, plane, recommendations

from .synthetic import record, write_run


@pytest.fixture
def results(tmp_path: Path) -> pd.DataFrame:
    recs = []
    for r in range(3):
        # default: "fast" is nondeterministic; det-algos: both reproducible, "fast" half as fast;
        # bench: "fast" half as fast and still nondeterministic (dominated by det-algos).
        recs.append(record("fast", "default", r, f"d{r}", [0.010] * 5))
        recs.append(record("fast", "det-algos", r, "a", [0.020] * 5))
        recs.append(record("fast", "bench", r, f"b{r}", [0.020] * 5))
        for mode in ("default", "det-algos", "bench"):
            recs.append(record("same", mode, r, "x", [0.004] * 5))
            # broken: fails in every mode, so it is left out of the plane and recommendation.
            recs.append(record("broken", mode, r, None, [], status="error"))
    write_run(tmp_path, recs)
    return detbench.load_results(tmp_path)


def test_plane_positions_and_frontier(results: pd.DataFrame) -> None:
    p = {r["mode"]: r for r in plane(results).to_dict("records")}
    assert set(p) == {"default", "det-algos", "bench"}
    assert p["default"]["relative_throughput"] == 1.0
    assert p["default"]["reproducible"] == 0.5  # "same" of {fast, same}; "broken" left out
    assert p["det-algos"]["relative_throughput"] == pytest.approx(math.sqrt(0.5))
    assert p["det-algos"]["reproducible"] == 1.0
    assert p["bench"]["relative_throughput"] == pytest.approx(math.sqrt(0.5))
    assert p["bench"]["reproducible"] == 0.5
    assert p["default"]["workloads"] == 2 and p["default"]["nondeterministic"] == 1
    # default is fastest, det-algos most reproducible; bench is beaten by both.
    assert (p["default"]["frontier"], p["det-algos"]["frontier"], p["bench"]["frontier"]) == (
        True,
        True,
        False,
    )


def test_a_workload_that_ran_nowhere_does_not_block_the_suite(results: pd.DataFrame) -> None:
    rec = recommendations(results)
    suite = rec[rec["workload"] == "*"].iloc[0]
    assert suite["mode"] == "det-algos"
    assert suite["relative_throughput"] == pytest.approx(math.sqrt(0.5))
    broken = rec[rec["workload"] == "broken"].iloc[0]
    assert broken["mode"] is None


def test_divergence_step_by_step(tmp_path: Path) -> None:
    losses = [[1.0, 0.9, 0.8], [1.0, 0.9, 0.85], [1.0, 0.95, 0.8]]
    steps = [["a", "b", "c"], ["a", "b", "x"], ["a", "y", "c"]]
    recs = [
        record("train", "default", r, f"f{r}", [0.01], losses=losses[r], step_fingerprints=steps[r])
        for r in range(3)
    ] + [
        record("train", "det-algos", r, "f", [0.01], losses=losses[0], step_fingerprints=steps[0])
        for r in range(3)
    ]
    write_run(tmp_path, recs)
    d = divergence(detbench.load_results(tmp_path))
    assert set(d["mode"]) == {"default"}  # det-algos was reproducible: nothing to plot
    assert d["step"].tolist() == [1, 2, 3]
    assert d["max_abs_loss_diff"].tolist() == pytest.approx([0.0, 0.05, 0.05])
    assert d["step_fingerprint_differs"].tolist() == [False, True, True]


def test_no_losses_no_divergence(results: pd.DataFrame) -> None:
    assert divergence(results).empty
