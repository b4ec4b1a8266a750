"""The report and the console agree with themselves (issue 39): one number per cost in every
section. A real paired run on the CPU (``paired_ops_run``), and exact figures on paired records
written as the paired phase writes them (``tests.synthetic.paired_run``). No test asserts a
time."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from detbench import analysis
from detbench.analysis import quality, stats
from detbench.report.write import load_run
from detbench.store.results import load_results

from .synthetic import paired_run


def _section(md: str, heading: str) -> str:
    start = md.index(heading)
    nxt = md.find("\n#", start + len(heading))
    return md[start : nxt if nxt > 0 else None]


# --- one number per cost -----------------------------------------------------------------------


def test_the_spread_pools_into_the_paired_cost_not_a_second_estimate(tmp_path: Path) -> None:
    """Process medians 0.5, 0.5 and 0.5 e^0.3: the paired cost is their geometric mean,
    0.5 e^0.1 (what the answer, the tables and the plane give); the median of replicates would
    say 0.5. The spread's pooled figure is the cost, and each replicate's value is its process
    median, so the pooled figure lies within them."""
    logs = [[math.log(0.5) + d] * 6 for d in (0.0, 0.0, 0.3)]
    paired_run(tmp_path, {"det-algos": logs, "copy1": [[0.0] * 6] * 3})
    df = load_results(tmp_path)
    c = analysis.costs(df, "default")
    s = quality.replicate_spread(df, "default", c).set_index("mode").loc["det-algos"]
    assert s["pooled"] == pytest.approx(0.5 * math.exp(0.1))
    assert s["per_replicate"] == pytest.approx({0: 0.5, 1: 0.5, 2: 0.5 * math.exp(0.3)})
    assert s["design"] == "paired" and s["min"] <= s["pooled"] <= s["max"]


def test_a_paired_runs_report_states_each_cost_once(paired_ops_run: Path) -> None:
    """The real run: the answer's figure for ops (det-algos) and the spread's pooled figure are
    the same number, and the spread no longer says it is "the ratio of the medians"."""
    run = load_run(paired_ops_run)
    pts = run.points
    mine = pts[(pts["suite"] == "ops") & (pts["mode"] == "det-algos")]["relative_throughput"]
    point = float(mine.item())
    spread = quality.replicate_spread(analysis.counted(run.df), "default", run.costs)
    row = spread.set_index("mode").loc["det-algos"]
    assert row["design"] == "paired"
    assert row["pooled"] == pytest.approx(point, rel=1e-12)
    each = analysis.cost_points(run.verdicts, "default", run.costs)
    each_cost = run.verdicts.assign(p=each).query("mode == 'det-algos'")["p"]
    assert row["pooled"] == pytest.approx(stats.geometric_mean_of(list(each_cost)), rel=1e-12)
    md = (paired_ops_run / "report.md").read_text()
    answer = _section(md, "## The answer")
    assert f"| {point:.2f}x \\[" in answer, answer
    table = _section(md, "### Spread across replicates")
    assert f"| ops | det-algos | {point:.3f} |" in table, table
    assert "ratio of the medians over replicates" not in table
    assert "the cost the tables above give" in table
