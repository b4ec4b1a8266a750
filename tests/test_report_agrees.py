"""The report and the console agree with themselves (issue 39): one number per cost in every
section, legends that name only what their figures draw, and an A/A line that says when its
intervals were too wide to show a cost, on the console too. A real paired run on the CPU
(``paired_ops_run``), and exact figures on paired records written as the paired phase writes
them (``tests.synthetic.paired_run``). No test asserts a time."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

import detbench
from detbench import analysis
from detbench.analysis import aa, quality, stats
from detbench.report import aa_check, console, tradeoff
from detbench.report.plots import HEAT_KEY, NOT_RUN_GREY, heatmap_figure
from detbench.report.write import load_run
from detbench.store.paired import load_paired
from detbench.store.results import load_results

from .conftest import ROOT
from .synthetic import paired_run

#: The tests that read a whole run (the session's paired ops run: 40 s here, or a published run's
#: heatmap: 20 s): make test-slow and CI, not make test.
WHOLE_RUN = pytest.mark.slow

H200 = ROOT / "results" / "20261126-040517-cuda-full-h200-partial"


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


@WHOLE_RUN
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


# --- legends say what their figures draw --------------------------------------------------------


def _heat(run_dir: Path, suite: str) -> tuple[Figure, pd.DataFrame, pd.DataFrame]:
    df = detbench.load_results(run_dir)
    v = analysis.verdicts(df)
    c = analysis.costs(df, "default")
    v = v.assign(rel=analysis.cost_points(v, "default", c))
    here = c[c["suite"] == suite]
    return heatmap_figure(v[v["suite"] == suite], suite, "default", here), v, here


def _cells(ax: Axes, test: Callable[[Rectangle], bool]) -> set[tuple[int, int]]:
    """The (row, column) of each cell-sized rectangle of ``ax`` that ``test`` accepts."""
    return {
        (round(p.get_y() + 0.5), round(p.get_x() + 0.5))
        for p in ax.patches
        if isinstance(p, Rectangle) and p.get_width() == 1 and test(p)
    }


def _grey(p: Rectangle) -> bool:
    return bool(p.get_fill()) and to_rgba(p.get_facecolor()) == to_rgba(NOT_RUN_GREY)


@WHOLE_RUN
def test_the_heatmap_key_names_what_its_cells_show(paired_ops_run: Path) -> None:
    """The real run's cells: every noisy cost is hatched, significant or within the noise
    (on this CPU both usually are), and the key says hatched only where a cell is. Every cell
    ran: none is grey, the key has no grey, and the uncoloured cells (the baseline, n.s.) are
    white, not grey."""
    fig, v, c = _heat(paired_ops_run, "ops")
    ax = fig.axes[0]
    title = ax.get_title()
    workloads = list(dict.fromkeys(v[v["suite"] == "ops"]["workload"]))
    modes = analysis.ordered_modes(list(dict.fromkeys(v["mode"])))
    noisy = {
        (workloads.index(w), modes.index(m))
        for w, m, n in zip(c["workload"], c["mode"], c["noisy"], strict=True)
        if n and m != "default"
    }
    hatched = _cells(ax, lambda p: bool(p.get_hatch()))
    assert hatched == noisy
    assert ("hatched: noisy timing" in title) == bool(hatched)
    assert not _cells(ax, _grey) and "grey" not in title
    assert tuple(ax.images[0].cmap.get_bad()) == to_rgba("white")
    nondet = _cells(ax, lambda p: not p.get_fill() and p.get_linewidth() == 2)
    assert bool(nondet) == ("≠ (outlined)" in title)
    ns = {t.get_text().startswith("n.s.") for t in ax.texts}
    assert (HEAT_KEY["ns"] in title.replace("\n", " ")) == (True in ns)


@WHOLE_RUN
def test_grey_is_said_where_a_cell_did_not_run() -> None:
    """An older CPU run whose det-algos modes are unsupported for some ops: those cells, and
    only those, are grey, and the key says grey is a cell that did not run."""
    run = ROOT / "results" / "20261123-133303-cpu-quick"
    fig, v, _ = _heat(run, "ops")
    ax = fig.axes[0]
    v = v[v["suite"] == "ops"]
    workloads = list(dict.fromkeys(v["workload"]))
    modes = analysis.ordered_modes(list(dict.fromkeys(v["mode"])))
    failed = {
        (workloads.index(w), modes.index(m))
        for w, m, x in zip(v["workload"], v["mode"], v["verdict"], strict=True)
        if x not in analysis.RAN
    }
    assert failed and _cells(ax, _grey) == failed
    title = ax.get_title().replace("\n", " ")
    assert "grey: did not run" in title and "no record" not in title


def _green(fig: Figure) -> list[Artist]:
    """The artists of ``fig``'s panels drawn in the frontier's green."""
    green = to_rgba(tradeoff.FRONTIER)[:3]
    out = []
    for ax in fig.axes:
        for a in ax.get_children():
            colours = []
            if hasattr(a, "get_facecolor"):
                colours.append(np.atleast_2d(a.get_facecolor()))
            if hasattr(a, "get_color"):
                colours.append(np.atleast_2d(to_rgba(a.get_color())))
            if any(len(x) and np.allclose(x[0][:3], green) for x in colours):
                out.append(a)
    return out


@WHOLE_RUN
def test_the_plane_says_green_only_where_it_draws_green(paired_ops_run: Path) -> None:
    """The real run's frontier is its recommended mode alone, which the star marks: nothing is
    green, and the key says nothing of green. The H200 run's panels draw their frontiers: the
    key says what the green is."""
    run = load_run(paired_ops_run)
    fig = tradeoff.figure(run.points, "default")
    said = fig.get_suptitle()
    front = run.points[run.points["frontier"].astype(bool)]
    # Green shows where the frontier has a line (two modes or more) or a mode the star does not
    # mark; on this CPU det-algos alone, faster and reproducible, is the frontier.
    shows = len(front) > 1 or not front["recommended"].astype(bool).all()
    assert bool(_green(fig)) == shows == ("green" in said)
    assert "★ recommended" in said and "grey" not in said  # one star; no inert mode on the plane
    df = detbench.load_results(H200)
    from detbench.analysis import tradeoff as plane
    from detbench.analysis.recommend import recommendations

    fig = tradeoff.figure(plane.points(df, recommendations(df)), "default")
    said = fig.get_suptitle()
    assert _green(fig) and "green: the frontier" in said


# --- the A/A line --------------------------------------------------------------------------------


def test_the_aa_line_says_when_its_intervals_could_not_show_a_cost(tmp_path: Path) -> None:
    """Copy 1's process medians e^-1, 1 and e: a t-interval of exp(0 +- 4.30 x 0.577), about
    [0.08, 12], holds both half and twice: no cost, false or not, could have shown. The line
    says so; a narrow interval's line does not."""
    wide, narrow = tmp_path / "wide", tmp_path / "narrow"
    paired_run(wide, {"det-algos": [[0.0] * 6] * 3, "copy1": [[d] * 6 for d in (-1, 0, 1)]})
    paired_run(narrow, {"det-algos": [[0.0] * 6] * 3, "copy1": [[d] * 6 for d in (-0.01, 0, 0.01)]})
    s = aa.summary(aa.paired(load_paired(wide)))
    assert (s["false_workloads"], s["says_nothing"]) == (0, 1)
    said = aa_check.aa_sentence(load_paired(wide), "default")
    assert said.startswith("A/A check: 0 of 1 workloads showed a cost")
    assert (
        "; but the one interval held both 0.5x and 2x, so at that width it could not have shown "
        "a cost: the check says nothing there about false costs."
    ) in said
    said = aa_check.aa_sentence(load_paired(narrow), "default")
    assert "could not have shown" not in said
    # The console prints the same line, word for word (it printed none before issue 39).
    text = console.summary_text(load_run(wide))
    line = next(x for x in text.splitlines() if x.startswith("A/A check:"))
    assert line == aa_check.aa_sentence(load_paired(wide), "default")


@WHOLE_RUN
def test_the_console_prints_the_reports_aa_line(paired_ops_run: Path) -> None:
    """The real run's console ends with the A/A line its report gives beside the costs."""
    printed = (paired_ops_run.parent / "console.txt").read_text()
    line = next((x for x in printed.splitlines() if x.startswith("A/A check:")), None)
    assert line is not None, printed
    assert re.match(r"A/A check: \d of 2 workloads showed a cost between two workers", line)
    md = (paired_ops_run / "report.md").read_text().replace("\\", "")
    assert any(x.startswith(line) for x in md.splitlines()), line


@WHOLE_RUN
def test_a_cpu_run_times_full_determinism_as_det_algos_and_says_so(paired_ops_run: Path) -> None:
    """The real run on a CPU: cudnn-det+det-algos makes its 6 verdicts in its own workers and
    sits the rounds out (its lines name det-algos, they hold no sample); its records carry
    no timing; the report's clocks column, the console's matrix and the answer's column of
    full determinism each name det-algos as the computation timed for it, and its CPU warning
    says the run timed each computation once."""
    full = "cudnn-det+det-algos"
    lines = load_paired(paired_ops_run)
    mine = lines[lines["mode"] == full]
    assert len(mine) == 6 and set(mine["status"]) == {"same_computation"}
    assert set(mine["timed_as"]) == {"det-algos"} and not any(len(s) for s in mine["samples"])
    timed = lines[lines["status"] == "ok"]
    assert set(timed["mode"]) == {"default", "det-algos"} and len(timed) == 18  # 2 x 3 x 3
    df = load_results(paired_ops_run)
    recs = df[df["mode"] == full]
    assert len(recs) == 6 and set(recs["status"]) == {"ok"}
    assert all(t is None for t in recs["timing"])
    md = (paired_ops_run / "report.md").read_text().replace("\\", "")
    assert f"| {full} |" in md and "timed as det-algos: the same computation here" in md
    assert f"full determinism: {full} (det-algos, the same computation on a CPU)" in md
    assert "This run timed each such computation once, as the first mode that runs it" in md
    printed = (paired_ops_run.parent / "console.txt").read_text()
    assert "≡M1" in printed, printed
