"""Paired timing (issue 34): the owner of paired.jsonl, the join onto the verdict records, the
paired costs and their interval, the variance split, the A/A check and the report's words. Exact
numbers on injected data; no test asserts a time."""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from detbench import analysis
from detbench.analysis import aa, earlier_design, paired_costs, price, stats, variance
from detbench.analysis.clocks import clock_states
from detbench.analysis.cost_intervals import costs
from detbench.analysis.pairs import Paired, pair
from detbench.cli import execute
from detbench.core import acts
from detbench.core.modes import MODES, get_mode
from detbench.report import aa_check
from detbench.report.console import summary_text
from detbench.report.method import method_blocks
from detbench.report.render import to_markdown
from detbench.report.write import load_run, write_report
from detbench.run.config import RunConfig
from detbench.store.lines import ResultsError
from detbench.store.paired import PAIRED_FILE, PairedWriter, iter_paired, line, load_paired
from detbench.store.results import ResultWriter, load_env, load_results
from tests.synthetic import env, paired_line, paired_run, record, write_run

T2 = float(sps.t.ppf(0.975, 2))  # 4.3027: the t quantile of 3 processes


def _p(*logs: list[float]) -> Paired:
    return Paired(
        tuple(range(len(logs))),
        tuple(np.asarray(x, dtype=float) for x in logs),
        tuple(np.arange(len(x), dtype=float) for x in logs),
    )


# --- store.paired -------------------------------------------------------------------------------


def test_lines_round_trip_and_missing_file(tmp_path: Path) -> None:
    assert list(iter_paired(tmp_path)) == []
    assert load_paired(tmp_path).empty
    a, b = paired_line("w", "default", 0, [0.01] * 6), paired_line("w", "default", 0, [0.02] * 6, 1)
    with PairedWriter(tmp_path) as w:
        w.append_all([a, b])
    assert list(iter_paired(tmp_path)) == [a, b]
    df = load_paired(tmp_path)
    assert list(df["copy"]) == [0, 1] and df["samples"].iloc[1] == [0.02] * 6


def test_a_bad_line_is_named_and_nothing_of_its_group_is_written(tmp_path: Path) -> None:
    good = paired_line("w", "default", 0, [0.01] * 6)
    bad = {**good, "rounds": [0, 1]}
    with PairedWriter(tmp_path) as w, pytest.raises(ResultsError, match="field rounds"):
        w.append_all([good, bad])
    assert not (tmp_path / PAIRED_FILE).read_text()
    (tmp_path / PAIRED_FILE).write_text(json.dumps({**good, "samples": [0.0] * 6}) + "\n")
    with pytest.raises(ResultsError, match=r"paired.jsonl:1: field samples"):
        list(iter_paired(tmp_path))


def test_a_failed_worker_line_needs_no_samples(tmp_path: Path) -> None:
    failed = {"suite": "s", "workload": "w", "mode": "default", "replicate": 0, "copy": 0,
              "workers": 3, "status": "crashed", "message": "exit 9", "samples": [0.01],
              "rounds": [0], "settings_changed": []}  # fmt: skip
    with PairedWriter(tmp_path) as w:
        w.append_all([failed])
    assert next(iter_paired(tmp_path))["status"] == "crashed"


def test_load_results_joins_copy_0_onto_paired_records(tmp_path: Path) -> None:
    paired_run(tmp_path, {"det-algos": [[math.log(0.5)] * 6] * 2, "copy1": [[0.0] * 6] * 2})
    df = load_results(tmp_path)
    d: dict[Any, Any] = df[(df["mode"] == "det-algos") & (df["replicate"] == 1)].iloc[0].to_dict()
    assert d["seconds_per_step"] == pytest.approx(0.02)
    assert d["items_per_second"] == pytest.approx(10.0 / 0.02)  # items_per_step 10
    assert d["flops_per_second"] == pytest.approx(100.0 / 0.02)
    assert d["timing_samples"] == pytest.approx([0.02] * 6)
    assert d["timing"]["paired_rounds"] == list(range(6))
    base = df[(df["mode"] == "default") & (df["replicate"] == 0)]["seconds_per_step"]
    assert base.tolist() == pytest.approx([0.01])  # copy 0's, not copy 1's


def test_a_paired_record_without_its_line_keeps_no_timing(tmp_path: Path) -> None:
    rec = record("w", "default", 0, "x", [], device="cpu", timing_design="paired")
    write_run(tmp_path, [rec])
    row = load_results(tmp_path).iloc[0]
    assert row["timing"] is None and pd.isna(row["seconds_per_step"])


# --- pairing and the estimator ------------------------------------------------------------------


def test_pair_joins_on_replicate_and_round() -> None:
    r = np.asarray
    base = {
        0: (r([0, 1, 2]), r([1.0, 2.0, 4.0]), r([0.0, 1.0, 2.0])),
        1: (r([0]), r([1.0]), r([5.0])),
    }
    other = {0: (r([2, 0]), r([1.0, 4.0]), r([2.0, 0.0]))}  # round 1 lost; replicate 1 absent
    p = pair(base, other)
    assert p.replicates == (0,) and p.rounds == 2
    assert np.allclose(p.log_ratio[0], [math.log(1 / 4), math.log(4.0)])  # rounds 0 and 2


def test_kalibera_jones_interval_on_process_medians() -> None:
    # Process medians 0.1, 0.2, 0.3 (an outlier round in each moves the mean, not the median).
    p = _p([0.1, 0.1, 3.0], [0.2, 0.2, -3.0], [0.3, 0.3, 0.3])
    point, low, high, se, dof = paired_costs.kalibera_jones(p)
    assert dof == 2 and se == pytest.approx(0.1 / math.sqrt(3))
    assert point == pytest.approx(math.exp(0.2))
    assert (low, high) == pytest.approx((math.exp(0.2 - T2 * se), math.exp(0.2 + T2 * se)))


def test_one_process_gives_the_median_interval_of_its_rounds() -> None:
    logs = [0.01 * i for i in range(10)]  # 10 rounds: the interval is (x_(2), x_(9))
    point, low, high, _, _ = paired_costs.kalibera_jones(_p(logs), floor=None)
    assert point == pytest.approx(math.exp(0.045))
    assert (low, high) == pytest.approx((math.exp(0.01), math.exp(0.08)))


def test_one_process_joins_the_process_floor_and_says_what_it_rests_on() -> None:
    """One process cannot measure the process level: the interval takes it as one round's
    robust spread (k = 1) besides the median's own error, t with n - 1 degrees of freedom,
    joined with the rounds' interval; more processes measure it and keep the t-interval."""
    logs = [0.01 * i for i in range(10)]  # median 0.045, MAD 0.025
    p = _p(logs)
    assert paired_costs.robust_spread(np.asarray(logs)) == pytest.approx(1.4826 * 0.025)
    se = 1.4826 * 0.025 * math.sqrt(1 + math.pi / 20)
    half = float(sps.t.ppf(0.975, 9)) * se
    point, low, high, got_se, dof = paired_costs.kalibera_jones(p)
    assert point == pytest.approx(math.exp(0.045)) and dof == 9 and got_se == pytest.approx(se)
    assert (low, high) == pytest.approx((math.exp(0.045 - half), math.exp(0.045 + half)))
    assert low < math.exp(0.01) and high > math.exp(0.08)  # wider than the rounds' own
    # Never narrower than the rounds' interval: a tail the floor does not reach is kept.
    skewed = [0.0] * 3 + [0.001] * 4 + [0.5] * 3  # MAD 0.001; x_(9) = 0.5
    assert paired_costs.kalibera_jones(_p(skewed))[2] == pytest.approx(math.exp(0.5))
    # Equal rounds: no spread, no floor: today's interval.
    same = paired_costs.kalibera_jones(_p([0.1] * 8))
    assert same[:3] == paired_costs.kalibera_jones(_p([0.1] * 8), floor=None)[:3]
    two = _p(logs, [x + 0.02 for x in logs])
    assert paired_costs.kalibera_jones(two) == paired_costs.kalibera_jones(two, floor=None)
    assert paired_costs.rests_on(1, 10) == (
        "1 replicate, 10 rounds: the process level assumed at one round's spread (k = 1), "
        "not measured"
    )
    assert paired_costs.rests_on(2, 20).endswith("measured (t, 1 degree of freedom)")
    assert paired_costs.row("s", "w", "m", p, paired_costs.ratio(p, "k"))["rests_on"] == (
        paired_costs.rests_on(1, 10)
    )


def test_ratio_draws_follow_the_seeding_rule() -> None:
    p = _p([0.1] * 5, [0.2] * 5, [0.3] * 5)
    a, b = paired_costs.ratio(p, "k", 0, 500), paired_costs.ratio(p, "k", 0, 500)
    assert np.array_equal(a.draws, b.draws)
    assert not np.array_equal(a.draws, paired_costs.ratio(p, "other", 0, 500).draws)


def test_two_processes_give_a_one_degree_interval_and_finite_draws() -> None:
    """With 2 processes the t has 1 degree of freedom (12.7 standard errors each side): the
    interval is honestly wide, and its Cauchy draws, which pass exp's range, stay finite for
    the geometric means over workloads."""
    p = _p([-4.0] * 6, [4.0] * 6)  # process medians e^-4 and e^4 apart
    point, low, high, se, dof = paired_costs.kalibera_jones(p)
    assert point == pytest.approx(1.0) and dof == 1 and se == pytest.approx(4.0)
    t1 = float(sps.t.ppf(0.975, 1))
    assert (low, high) == pytest.approx((math.exp(-t1 * 4.0), math.exp(t1 * 4.0)))
    assert stats.says_nothing(low, high)
    with np.errstate(over="raise"):  # an overflow is an error here, not a warning
        r = paired_costs.ratio(p, "k", 0, 2000)
    assert np.isfinite(r.draws).all() and r.draws.max() > 1e300  # some draws clipped, none inf
    g = stats.geometric_mean([r, r])
    assert np.isfinite([g.point, g.low, g.high]).all()


# --- costs() ------------------------------------------------------------------------------------


def test_costs_of_a_paired_run_come_from_the_pairs(tmp_path: Path) -> None:
    logs = [[x] * 6 for x in (math.log(0.5) - 0.01, math.log(0.5), math.log(0.5) + 0.01)]
    paired_run(tmp_path, {"det-algos": logs, "copy1": [[0.0] * 6] * 3})
    c = costs(load_results(tmp_path)).set_index("mode").loc["det-algos"]
    se = 0.01 / math.sqrt(3)
    assert c["design"] == "paired" and c["rounds"] == 18 and c["replicates"] == 3
    assert c["relative_throughput"] == pytest.approx(0.5)
    assert c["ci_low"] == pytest.approx(0.5 * math.exp(-T2 * se))
    assert c["half_width"] == pytest.approx(math.exp(T2 * se) - 1)
    assert c["limited_by"] == "processes" and bool(c["significant"])


def test_the_console_table_gives_the_paired_point_the_answer_gives(tmp_path: Path) -> None:
    """Process medians 0.5, 0.5 and 0.5 e^0.3: the median of replicates says 0.50x, the paired
    estimate (their geometric mean) 0.55x. The console's table and the heatmap give the cost's
    point, the number the answer and the plane give, not a second estimate beside it."""
    logs = [[math.log(0.5) + d] * 6 for d in (0.0, 0.0, 0.3)]
    paired_run(tmp_path, {"det-algos": logs, "copy1": [[0.0] * 6] * 3})
    df = load_results(tmp_path)
    c = costs(df)
    assert c.set_index("mode").loc["det-algos", "relative_throughput"] == pytest.approx(
        0.5 * math.exp(0.1)
    )
    v = analysis.verdicts(df)
    v = v.assign(rel=analysis.relative_throughput(v, "default"))
    assert v.set_index("mode").loc["det-algos", "rel"] == pytest.approx(0.5)
    points = analysis.cost_points(v, "default", c)
    assert points[v["mode"] == "det-algos"].item() == pytest.approx(0.5 * math.exp(0.1))
    _, table = analysis.summary_table(df)
    row = next(line for line in table.splitlines() if line.startswith("s/w"))
    assert row.split()[3] == "0.55", table


def test_costs_of_records_timed_in_their_own_worker_keep_stats_ratio() -> None:
    df = pd.DataFrame(
        [record("w", "default", r, "x", [0.010, 0.011, 0.012], device="cpu") for r in range(3)]
        + [record("w", "det-algos", r, "x", [0.020, 0.021, 0.022], device="cpu") for r in range(3)]
    )
    from detbench.store.results import COLUMNS

    for col in ("timing_samples", *COLUMNS):
        df[col] = df.get(col)
    df["timing_samples"] = df["timing"].map(lambda t: t["samples"])
    df["iqr"] = df["timing"].map(lambda t: t["iqr"])
    c = costs(df).set_index("mode").loc["det-algos"]
    r = stats.ratio([np.asarray([0.020, 0.021, 0.022])] * 3, [np.asarray([0.01, 0.011, 0.012])] * 3,
                    stats.comparison_key("s", "w", "det-algos", "default"))  # fmt: skip
    assert c["design"] == earlier_design.DESIGN and c["rounds"] is None
    assert (c["relative_throughput"], c["ci_low"], c["ci_high"]) == (r.point, r.low, r.high)


# --- the variance split -------------------------------------------------------------------------


def _split_data(means: tuple[float, float]) -> Paired:
    """Two processes of 4 rounds at t = 0..3: a trend of 0.1 per second, a residual of +-0.05
    orthogonal to it and to the mean, and process means ``means``."""
    t = np.arange(4.0)
    e = np.asarray([0.05, -0.05, -0.05, 0.05])
    logs = tuple(m + 0.1 * (t - 1.5) + e for m in means)
    return Paired((0, 1), logs, (t, t))


def test_split_between_rounds_processes_and_time() -> None:
    s = variance.split(_split_data((0.0, 0.4)))
    assert s.time == pytest.approx(0.1 / 6)  # sum of (0.1 t_c)^2 = 0.1 over N - P = 6
    assert s.rounds == pytest.approx(0.02 / 5)  # 8 x 0.05^2 over N - P - 1 = 5
    assert s.processes == pytest.approx(0.08 - 0.02 / 4)  # var(0, 0.4) - s_w^2 / n
    assert s.limited_by == "processes"
    assert variance.split(_split_data((0.0, 0.0))).limited_by == "time"


def test_repetitions_follow_kalibera_jones() -> None:
    s = variance.Split(rounds=0.03, processes=0.01, time=0.01, per_process=10, n_processes=3)
    r = variance.repetitions(s, c_round=0.1, c_process=10.0, target=0.05)
    assert r is not None and r.rounds == math.ceil(math.sqrt(100 * 0.04 / 0.01))  # 20
    var_mean = 0.01 + 0.04 / 20
    n = next(n for n in range(2, 100) if sps.t.ppf(0.975, n - 1) * math.sqrt(var_mean / n)
             <= math.log1p(0.05))  # fmt: skip
    assert r.processes == n and r.half_width <= 0.05
    assert variance.repetitions(variance.Split(0.1, math.nan, 0.0, 10, 1), 0.1, 10.0) is None


# --- the A/A check and the report ---------------------------------------------------------------


def test_aa_paired_counts_false_costs(tmp_path: Path) -> None:
    # Copy 1 is 20% slower in every round of every process: a false cost, with a 0 width.
    spread = [[-0.2 + d] * 6 for d in (-0.001, 0.0, 0.001)]
    paired_run(tmp_path, {"det-algos": [[0.0] * 6] * 3, "copy1": spread})
    a = aa.paired(load_paired(tmp_path))
    assert list(a["false_cost"]) == [True]
    s = aa.summary(a)
    assert (s["false_workloads"], s["workloads"], s["false_share"]) == (1, 1, 1.0)


def test_the_cudnn_twins_are_the_same_computation_on_a_cpu_only() -> None:
    modes = ("default", "bench", "det-algos")
    df = pd.DataFrame([record("w", m, r, "x", [0.01], device="cpu") for m in modes for r in (0, 1)])
    assert aa.twins(df, "default") == ["bench"]
    assert aa.twins(df.assign(device="cuda"), "default") == []


def test_report_says_the_aa_line_the_method_and_the_limit(tmp_path: Path) -> None:
    logs = [[x] * 6 for x in (-0.01, 0.0, 0.01)]
    paired_run(tmp_path, {"det-algos": logs, "copy1": logs})
    df, lines = load_results(tmp_path), load_paired(tmp_path)
    said = aa_check.aa_sentence(lines, "default")
    hw = math.exp(T2 * 0.01 / math.sqrt(3)) - 1
    assert said.startswith(
        "A/A check: 0 of 1 workloads showed a cost between two workers of the same settings "
        f"(default, timed side by side; median interval ±{100 * hw:.1f}%)."
    )
    # A paired run names no timing design: the separate one timed nothing here.
    assert "separate" not in said
    c = costs(df)
    text = to_markdown(method_blocks(df, load_env(tmp_path), c), tmp_path)
    assert (
        "Costs: paired (timing paired)" in text and "Rounds per worker: 6 (option rounds: 6" in text
    )
    assert "t-intervals of the paired ratio" in text and "two-level bootstrap" not in text
    assert aa_check.limits_sentence(c).startswith(
        "What limits the 2 costs' 95% intervals (median half-width"
    )


def test_a_run_of_the_earlier_design_says_once_which_design_timed_it(tmp_path: Path) -> None:
    samples = [0.01, 0.011, 0.012]
    recs = [
        record("w", m, r, "x", samples, device="cpu")
        for m in ("default", "bench")
        for r in (0, 1, 2)
    ]
    write_run(tmp_path, recs, env(gpu=None))
    df = load_results(tmp_path)
    c = costs(df)
    assert set(c["design"]) == {earlier_design.DESIGN} and c["limited_by"].isna().all()
    said = aa_check.aa_sentence(load_paired(tmp_path), "default")
    assert said.startswith("A/A check: this run timed no second worker of the baseline's")
    text = to_markdown(method_blocks(df, load_env(tmp_path), c), tmp_path)
    assert text.count("earlier design") == 1
    assert (
        "- Costs: timed by detbench's earlier design, each mode in its own worker: a mode's "
        "throughput is the median over replicates of each replicate's median step time, a cost "
        "is the ratio of two such medians" in text
    )
    assert "- Intervals: A difference is significant when the interval excludes 1" in text
    paired_env = {"options": {"timing": "paired", "rounds": 12}}
    assert "no paired timing was recorded" in str(aa_check.costs_item(df, paired_env, "default"))


def test_the_method_names_no_aa_worker_where_none_was_timed(tmp_path: Path) -> None:
    paired_run(tmp_path, {"det-algos": [[0.0] * 6] * 2})
    df = load_results(tmp_path)
    with_copy = aa_check.costs_item(df, load_env(tmp_path), "default")
    without = aa_check.costs_item(df, load_env(tmp_path), "default", aa_copy=False)
    assert "(the A/A check)" in str(with_copy) and "(the A/A check)" not in str(without)


@pytest.mark.parametrize("replicates", [1, 3])
def test_a_cost_on_one_replicate_says_what_its_interval_rests_on(
    tmp_path: Path, replicates: int
) -> None:
    """Issue 49: with one replicate the interval assumes the process level (``rests_on``); the
    report marks that cost's interval in the full table and in the answer, with a legend under
    each, and counts such costs beside the A/A line, as the console does. Three replicates
    measure the level: no mark, no word of it."""
    logs = [
        [math.log(0.5) + 0.02 * ((3 * i) % 5 - 2) + 0.01 * r for i in range(10)]
        for r in range(replicates)
    ]
    noise = [[0.01 * ((3 * i) % 5 - 2) for i in range(10)]] * replicates
    paired_run(tmp_path, {"det-algos": logs, "copy1": noise})
    c = costs(load_results(tmp_path)).set_index("mode").loc["det-algos"]
    assert c["rests_on"] == paired_costs.rests_on(replicates, 10 * replicates)
    assert aa.paired(load_paired(tmp_path))["rests_on"].tolist() == [c["rests_on"]]
    md, page = write_report(tmp_path)
    text, shown = md.read_text(), html.unescape(page.read_text())
    summary = summary_text(load_run(tmp_path))
    legend = (
        "† The 95% interval rests on one replicate: it assumes the spread between replicates "
        "at one round's robust spread (k = 1) instead of measuring it."
    )
    counted = (
        "The one cost rests on one replicate (10 rounds; † in the tables): its 95% interval "
        "assumes the spread between replicates at one round's robust spread (k = 1) instead "
        "of measuring it."
    )
    if replicates == 3:
        assert "†" not in text and "†" not in shown
        assert "rests on one replicate" not in text and "rest on one replicate" not in summary
        return
    row = next(ln for ln in text.splitlines() if ln.startswith("| w | det-algos |"))
    interval = f"\\[{c['ci_low']:.3f}, {c['ci_high']:.3f}\\] †"
    assert f"| {c['relative_throughput']:.3f} | {interval} |" in row
    assert f"<td>[{c['ci_low']:.3f}, {c['ci_high']:.3f}] †</td>" in shown
    assert text.count(legend) == 1 and shown.count(legend) == 1
    assert counted in text and counted in shown
    assert counted.replace("; † in the tables", "") in summary.splitlines()
    answer = next(ln for ln in text.splitlines() if ln.startswith("| s (no verdict yet"))
    assert re.search(r"\| 0\.50x \\\[0\.\d\d, 0\.\d\d\\\] † \|$", answer), answer
    legend = (
        "- † The interval rests on one replicate in some or all of the suite's workloads "
        "(s 1 of 1), whose costs assume the spread between replicates at one round's robust "
        "spread (k = 1) instead of measuring it."
    )
    assert legend in text


@pytest.mark.parametrize(
    ("replicates", "timing", "said"), [(2, None, True), (3, None, False), (2, "none", False)]
)
def test_a_paired_run_of_two_replicates_is_told_its_intervals_will_be_wide(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    replicates: int,
    timing: str | None,
    said: bool,
) -> None:
    config = RunConfig(out=tmp_path / "r", device="cpu", replicates=replicates, timing=timing)
    assert execute._notes(config, None)  # type: ignore[arg-type]  # (used only to resume)
    err = capsys.readouterr().err
    note = (
        "2 replicates: each cost's 95% interval rests on 2 processes, a t with 1 degree of "
        "freedom (12.7 standard errors each side, against 4.3 with 3 replicates)"
    )
    assert (note in err) is said, err


def test_a_paired_gpu_timing_is_said_to_be_side_by_side_not_an_unheld_clock() -> None:
    """The H200's paired lines (2026-11-28) carry no hold: their report said "sustained asked,
    not held (no NVML)" though NVML read every one; a paired timing shares its clocks with the
    modes beside it, and says so."""
    from detbench.analysis.clocks import record_state

    path = Path(__file__).parent.parent / "results/20261128-011342-cuda-full-h200-partial"
    line = json.loads((path / "paired.jsonl").open().readline())
    assert line["timing"]["gpu_clocks"]["source"] == "nvml"
    assert record_state(line["timing"], "cuda") == "side by side, no hold"


# --- on a CPU, one worker per computation (issue 39) ---------------------------------------------


def test_on_a_cpu_each_computation_is_timed_once_the_baseline_first() -> None:
    """Of the 10 modes, a CPU runs two computations (only deterministic algorithms act there):
    each is timed by the first mode of its kind, and the paired phase puts the baseline first
    so that it is the one timed. On a GPU every mode is its own computation."""
    cpu = acts.timed_as(MODES, "cpu")
    assert sorted(m for m, rep in cpu.items() if rep == m) == ["default", "det-algos"]
    assert cpu["cudnn-det+det-algos"] == "det-algos" and cpu["no-cudnn"] == "default"
    assert acts.timed_as(MODES, "cuda") == {m.name: m.name for m in MODES}
    assert acts.timed_as([get_mode("bench"), get_mode("default")], "cpu")["default"] == "bench"


def test_a_mode_timed_as_another_has_no_cost_of_its_own_and_says_which(tmp_path: Path) -> None:
    """A record whose paired line is ``same_computation`` carries the mode that was timed for it
    (``timed_as``), gets no cost (no number copied from its twin, no interval of zero width), and
    the report's clocks column, the console's matrix and the price of full determinism name the
    twin that was timed."""
    paired_run(tmp_path, {"det-algos": [[math.log(0.5)] * 6] * 3, "copy1": [[0.0] * 6] * 3})
    full = "cudnn-det+det-algos"
    with PairedWriter(tmp_path) as w:
        for r in range(3):
            w.append(
                line(
                    suite="s", workload="w", mode=full, replicate=r, copy=0, samples=[],
                    rounds=[], positions=[], block_start=[], workers=0, number_per_block=None,
                    timing=None, status="same_computation", message="timed as det-algos",
                )
                | {"timed_as": "det-algos"}
            )  # fmt: skip
    with ResultWriter(tmp_path) as rw:
        for r in range(3):
            rw.append(record("w", full, r, "x", [], device="cpu", timing_design="paired"))
    df = load_results(tmp_path)
    twin = df[df["mode"] == full]
    assert twin["timed_as"].tolist() == ["det-algos"] * 3
    assert all(t is None for t in twin["timing"])
    c = costs(df, "default")
    assert full not in set(c["mode"]) and "det-algos" in set(c["mode"])
    assert clock_states(df)[("s", "w", full)].startswith("timed as det-algos")
    assert clock_states(df)[("s", "w", "det-algos")] == "n/a (CPU)"
    _, text = analysis.matrix.summary_table(df)
    assert "≡M1" in text and "timed as mode Mk" in text
    timed = sorted(set(c["mode"]))
    assert price.full_mode(df["mode"], "cpu", None, timed) == ("det-algos", full)
    assert price.full_mode(df["mode"], "cuda", None, timed) == (full, None)


def test_a_paired_timing_is_never_counted_against_a_stopping_rule(tmp_path: Path) -> None:
    """A paired worker's Timing JSON says ``reached_target`` false whenever its rounds' interval
    is wider than the target, but it had no stopping rule: the Timing section of an earlier
    run counts only records timed in their own worker (the CPU quick matrix's report once listed
    3943 records as stopped short under a table that counted 90)."""
    paired_run(tmp_path, {"det-algos": [[0.1, -0.2] * 3] * 3, "copy1": [[0.0] * 6] * 3})
    df = load_results(tmp_path)
    df["timing"] = pd.Series(
        [{**t, "reached_target": False, "ci_rel": 0.3} for t in df["timing"]], index=df.index
    )
    assert earlier_design.timing_words(df) is None
    own = record("w", "bench", 0, "x", [0.01] * 7, device="cpu",
                  timing={"reached_target": False, "ci_rel": 0.2})  # fmt: skip
    both = pd.concat([df, load_results(write_run(tmp_path / "own", [own]))], ignore_index=True)
    assert "0 of 1 timed records reached the target" in str(earlier_design.timing_words(both))
