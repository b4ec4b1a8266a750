"""The recipes suite on CPU, in fresh processes with genuine randomness (generators seeded from
OS entropy, real DataLoader worker processes): each broken variant is not reproducible, each
fixed variant is, and a resumed run is compared with an uninterrupted one bit for bit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import detbench
from detbench.analysis import recipes, verdicts
from detbench.core.workload import WorkloadError

from .conftest import detbench_cli

BROKEN = [
    "seeding__none", "seeding__torch_manual_seed_only", "dataloader__nothing_seeded",
    "reshuffle__unseeded_sampler",
]  # fmt: skip
FIXED = [
    "seeding__every_generator", "dataloader__worker_init_fn_and_generator",
    "dataloader__no_workers", "reshuffle__generator_seeded_per_epoch", "resume__uninterrupted",
    "resume__without_rng_state", "resume__with_rng_state", "inference__eager",
    "inference__jit_trace",
]  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    out = tmp_path_factory.mktemp("recipes") / "run"
    proc = detbench_cli(
        "run", "--suite", "recipes", "--mode", "default", "--replicates", "3",
        "--min-run-time", "0.02", "--device", "cpu", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return detbench.load_results(out).assign(out=str(out))


def verdict(df: pd.DataFrame) -> dict[str, dict[str, Any]]:
    return {str(r["workload"]): {str(k): x for k, x in r.items()}
            for r in verdicts(df).to_dict("records")}  # fmt: skip


@pytest.mark.slow  # the whole recipes suite, end to end (make test-slow, CI)
@pytest.mark.parametrize("workload", BROKEN)
def test_broken_variants_are_not_reproducible(run: pd.DataFrame, workload: str) -> None:
    v = verdict(run)[workload]
    assert v["verdict"] == "nondeterministic" and v["distinct_fingerprints"] >= 2


@pytest.mark.slow  # the whole recipes suite, end to end (make test-slow, CI)
@pytest.mark.parametrize("workload", FIXED)
def test_fixed_variants_are_reproducible(run: pd.DataFrame, workload: str) -> None:
    assert verdict(run)[workload]["verdict"] == "reproducible"


@pytest.mark.slow  # the whole recipes suite, end to end (make test-slow, CI)
def test_global_seeds_reach_dataloader_workers(run: pd.DataFrame) -> None:
    """Measured, not assumed: with every global generator seeded, torch seeds NumPy and python
    `random` in each DataLoader worker from its base seed, so worker_init_fn adds nothing."""
    assert verdict(run)["dataloader__global_seeds_only"]["verdict"] == "reproducible"


@pytest.mark.slow  # the whole recipes suite, end to end (make test-slow, CI)
def test_a_seeded_sampler_still_reshuffles_every_epoch(run: pd.DataFrame) -> None:
    rec = run[run["workload"] == "reshuffle__generator_seeded_per_epoch"].iloc[0]
    steps = rec["step_fingerprints"]
    assert len(set(steps)) == len(steps)  # each epoch (step) a different order


def fingerprints(df: pd.DataFrame, workload: str) -> set[str]:
    return set(df.loc[df["workload"] == workload, "fingerprint"])


@pytest.mark.slow  # the whole recipes suite, end to end (make test-slow, CI)
def test_resume_equals_the_uninterrupted_run_only_with_rng_state(run: pd.DataFrame) -> None:
    whole = fingerprints(run, "resume__uninterrupted")
    assert len(whole) == 1
    assert fingerprints(run, "resume__with_rng_state") == whole
    assert fingerprints(run, "resume__without_rng_state").isdisjoint(whole)


@pytest.mark.slow  # the whole recipes suite, end to end (make test-slow, CI)
def test_the_recipes_table(run: pd.DataFrame) -> None:
    r = {x["workload"]: x for x in recipes(run).to_dict("records")}
    assert r["resume__with_rng_state"]["same_bits"] is True
    assert r["resume__without_rng_state"]["same_bits"] is False
    traced_same = fingerprints(run, "inference__jit_trace") == fingerprints(run, "inference__eager")
    assert r["inference__jit_trace"]["same_bits"] is traced_same
    assert r["seeding__none"]["verdict"] == "nondeterministic in default"
    assert (run["seeding"] == "recipe").all()


@pytest.mark.slow  # the whole recipes suite, end to end (make test-slow, CI)
def test_the_report_says_who_seeded(run: pd.DataFrame) -> None:
    out = run["out"].iloc[0]
    md = (Path(out) / "report.md").read_text(encoding="utf-8")
    assert "## Recipes" in md
    assert (
        "| resume | with\\_rng\\_state | reproducible in default | yes (resume\\_\\_uninterrupted)"
        in md
    )
    assert "Seeding in recipes: not done by detbench." in md


def test_seeding_must_be_known() -> None:
    with pytest.raises(WorkloadError, match="seeding must be one of detbench, recipe"):
        detbench.workload(suite="x", items_per_step=1, seeding="sometimes")
