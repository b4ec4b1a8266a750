"""Say what is true (issue 28): the switch that caused a mode's nondeterminism (cudnn.benchmark on
a real H200 and H100), the run's state above the answer (partial, throttled, shared), and each
suite's answer decided once for the console and the report, on real published records."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from detbench import analysis
from detbench.analysis import cause, runstate, suite_answer
from detbench.report.write import write_report
from detbench.store.results import load_env, load_results

from .conftest import ROOT

H200 = ROOT / "results" / "20261126-040517-cuda-full-h200-partial"
H100 = ROOT / "results" / "20261126-060355-cuda-full-h100-partial"
H100_FOUR_MODES = ROOT / "results" / "20261124-085144-cuda-full-conv-rnn-training"
CPU_MATRIX = ROOT / "results" / "20261123-133303-cpu-quick"
#: The four workloads the H200 report blamed on "somewhere PyTorch's flags do not reach".
BENCH_ONLY = [
    "conv2d_resnet50_stage1_3x3",
    "conv2d_resnet50_stage3_1x1",
    "conv3d_r3d18_stage1",
    "conv1d_wav2vec2_feature",
]


@pytest.fixture(scope="module")
def h200() -> pd.DataFrame:
    return load_results(H200)


@pytest.fixture(scope="module")
def h200_report(tmp_path_factory: pytest.TempPathFactory) -> str:
    d = tmp_path_factory.mktemp("h200") / "run"
    shutil.copytree(H200, d)
    md, _ = write_report(d)
    return md.read_text()


@pytest.fixture(scope="module")
def quickstart() -> pd.DataFrame:
    """The README quickstart's three ops in its two modes, cut from a real CPU matrix in which
    index_put_accumulate raced under default (2 threads) and max_unpool2d was unsupported
    under deterministic algorithms."""
    df = load_results(CPU_MATRIX)
    ops = ["index_put_accumulate", "max_unpool2d", "cumsum"]
    return df[df["workload"].isin(ops) & df["mode"].isin(["default", "det-algos"])]


def test_cudnn_benchmark_is_named_for_the_h200_bench_only_workloads(h200: pd.DataFrame) -> None:
    found = cause.causes(h200)
    named = {c.workload for c in found if c.switch == "benchmark" and c.on}
    assert set(BENCH_ONLY) <= named
    # Two draws of the autotuner never name another switch.
    assert not [c for c in found if c.on and c.switch != "benchmark"]
    # cudnn.benchmark explains every nondeterministic mode of those workloads.
    v = analysis.verdicts(h200)
    loose = cause.unexplained(v, found)
    assert not set(loose["workload"]) & set(BENCH_ONLY)


@pytest.mark.slow  # regenerates the H200 run's whole report: make test-slow and CI
def test_h200_report_names_the_autotuner_and_never_the_flags_reach(h200_report: str) -> None:
    answer = h200_report.split("## Recommendations")[0]
    assert "The cause is cudnn.benchmark" in answer
    for w in BENCH_ONLY:
        assert w.replace("_", "\\_") in answer
    assert "flags do not reach" not in h200_report
    assert "PyTorch does not set" not in h200_report


@pytest.mark.slow  # regenerates the H200 run's whole report: make test-slow and CI
def test_h200_first_screen_says_partial_and_throttled(h200_report: str) -> None:
    head = h200_report.split("| suite (recommended mode)")[0]
    assert "990 records planned, 824 measured (a partial run)" in head
    assert "Partial run: 824 of 990 planned records (83%)" in head
    assert "training 74/90" in head
    assert "the GPU throttled" in head and "power 4.4 s" in head


def test_planned_counts_follow_the_plan_not_the_records() -> None:
    env = load_env(H200)
    planned = runstate.planned_counts(env["options"])
    assert planned is not None and sum(planned.values()) == 990
    state = runstate.run_state(load_results(H100), load_env(H100))
    assert (state.records, state.planned, state.partial) == (736, 990, True)
    done = runstate.run_state(load_results(H100_FOUR_MODES), load_env(H100_FOUR_MODES))
    assert not done.partial and done.line().startswith("Complete: all 168 planned records")


def test_unexplained_keeps_what_no_switch_separates() -> None:
    # ops/put_ raced in every mode without deterministic algorithms and cannot run with them:
    # no switch of the run separates reproducible from not, so it stays unexplained.
    df = load_results(CPU_MATRIX)
    v = analysis.verdicts(df)
    loose = cause.unexplained(v, cause.causes(df, v))
    assert "put_" in set(loose["workload"])
    assert "index_put_accumulate" not in set(loose["workload"])  # det-algos fixes it


def test_the_quickstart_answer_agrees_with_its_console_line(quickstart: pd.DataFrame) -> None:
    (a,) = suite_answer.answers(quickstart)
    # default spoils index_put_accumulate, which det-algos makes reproducible: never default.
    assert (a.mode, a.complete) == ("det-algos", False)
    assert "max_unpool2d has no deterministic implementation here" in a.text
    assert "default makes max_unpool2d reproducible" in a.text
    console = analysis.recommendation_text(quickstart)
    assert f"  ops: {a.text}" in console.splitlines()


def test_report_prints_the_same_answer(quickstart: pd.DataFrame, tmp_path: Path) -> None:
    from detbench.report import answer
    from detbench.report.render import Code

    rec = analysis.recommendations(quickstart)
    v = analysis.verdicts(quickstart)
    rows = answer.suite_rows(quickstart, rec, v, pd.DataFrame(), "default")
    (a,) = suite_answer.answers(quickstart, rec, v)
    assert rows[0][0] == f"ops ({a.text})"
    assert isinstance(rows[0][1], Code) and "use_deterministic_algorithms(True)" in rows[0][1].text


def test_cpu_answer_claims_inertness_only_from_the_settings_table() -> None:
    from detbench.analysis import switches
    from detbench.report.answer import switch_line

    df = load_results(CPU_MATRIX)
    line = switch_line(switches.effects(df), "cpu")
    inert = line.split("(", 1)[-1] if "act on nothing" in line else ""
    assert "deterministic algorithms" not in inert.split(")")[0]
    assert "cudnn.benchmark" in line


def test_a_mode_with_the_autotuner_is_never_recommended_where_it_broke_a_workload() -> None:
    # On the H100, bench+det-algos agreed with itself for resnet18_cifar by luck while
    # bench+cudnn-det and bench+cudnn-det+det-algos did not: it must not be the answer.
    df = load_results(H100)
    assert ("training", "resnet18_cifar") in cause.lottery(df)
    rec = analysis.recommendations(df)
    picks = rec.set_index(["suite", "workload"])["mode"]
    assert not cause.autotuned(str(picks[("training", "*")]))
    assert not cause.autotuned(str(picks[("training", "resnet18_cifar")]))
    # Where cudnn.benchmark broke nothing, a mode with it may still be recommended.
    assert ("bmm", "bmm_attention_scores_fp32") not in cause.lottery(df)
