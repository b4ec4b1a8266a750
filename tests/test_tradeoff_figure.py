"""The trade-off figure reads as numbers (issue 28): drawn from the published H200 run's records,
its log panels carry ticks near 1x a value can be read from, a panel where every mode is
reproducible is one row with one tick, every mode's name and ratio stands beside its point, and
no two names overlap."""

from __future__ import annotations

from itertools import combinations, pairwise
from typing import Any

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure
from matplotlib.text import Annotation, Text

import detbench
from detbench.analysis import tradeoff
from detbench.analysis.recommend import recommendations
from detbench.report import planeaxis
from detbench.report.plots import drawn_texts
from detbench.report.tradeoff import figure, times

from .conftest import ROOT

#: Every test here draws the published H200 run's plane (its recommendations: 18 s here): make
#: test-slow and CI.
pytestmark = pytest.mark.slow
H200 = ROOT / "results" / "20261126-040517-cuda-full-h200-partial"


def clipped_text(fig: Figure) -> list[str]:
    """The visible texts of ``fig`` that do not fit inside it, as drawn (their renderer extents
    against the figure's box, to a pixel): what a reader would see cut off. [] when all fit."""
    box, texts = drawn_texts(fig)
    return [
        t.get_text()
        for t, e in texts
        if e.x0 < box.x0 - 1 or e.y0 < box.y0 - 1 or e.x1 > box.x1 + 1 or e.y1 > box.y1 + 1
    ]


@pytest.fixture(scope="module")
def points() -> pd.DataFrame:
    df = detbench.load_results(H200)
    return tradeoff.points(df, recommendations(df))


@pytest.fixture(scope="module")
def drawn(points: pd.DataFrame) -> tuple[Figure, dict[str, Any]]:
    fig = figure(points, "default")
    fig.draw_without_rendering()
    return fig, {ax.get_title().split(" (")[0]: ax for ax in fig.axes if ax.get_visible()}


def ticks(ax: Any, axis: str) -> list[str]:
    labels = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    return [t.get_text() for t in labels if t.get_text()]


def names(ax: Any) -> list[Annotation]:
    return [c for c in ax.get_children() if isinstance(c, Annotation)]


def test_log_panels_can_be_read_near_1x(drawn: tuple[Figure, dict[str, Any]]) -> None:
    """conv, rnn and training span 0.06x to 1x: the empty stretch is cut, and near 1x, where
    the modes differ by a few hundredths, ticks 0.05 apart at most."""
    _, axes = drawn
    for suite in ("conv", "rnn", "training"):
        shown = ticks(axes[suite], "x")
        values = [float(t.rstrip("x")) for t in shown]
        near = [v for v in values if v >= 0.7]
        assert len(near) >= 4, (suite, shown)
        assert max(b - a for a, b in pairwise(near)) <= 0.05 + 1e-9, shown
        assert any(v < 0.5 for v in values), shown  # the no-cudnn group keeps its own tick
    # Each group is inset from the cut by planeaxis.MARGIN (issue 35): the no-cudnn group's
    # piece, padded so, has room for one tick.
    conv = ["0.1x", "0.97x", "0.98x", "0.99x", "1x", "1.01x", "1.02x"]
    assert ticks(axes["conv"], "x") == conv


def test_tick_labels_do_not_overlap(drawn: tuple[Figure, dict[str, Any]]) -> None:
    _, axes = drawn
    for ax in axes.values():
        boxes = [t.get_window_extent() for t in ax.get_xticklabels() if t.get_text()]
        for a, b in combinations(boxes, 2):
            assert not a.overlaps(b)


def test_a_panel_where_every_mode_is_reproducible_is_one_row(
    drawn: tuple[Figure, dict[str, Any]],
) -> None:
    """batchnorm, bmm and rnn: every mode reproducible on every workload, so one tick says so
    (no zoom into 0.925-1); conv and training keep the whole 0 to n."""
    _, axes = drawn
    assert ticks(axes["batchnorm"], "y") == ["7/7"]
    assert ticks(axes["bmm"], "y") == ["5/5"]
    assert ticks(axes["rnn"], "y") == ["7/7"]
    assert ticks(axes["conv"], "y") == ["0/11", "7/11", "8/11", "10/11", "11/11"]
    assert ticks(axes["training"], "y") == ["0/3", "1/3", "2/3", "3/3"]
    low, high = axes["conv"].get_ylim()
    assert low < 0 and high > 1


def test_every_mode_is_named_with_its_ratio_and_no_names_overlap(
    drawn: tuple[Figure, dict[str, Any]], points: pd.DataFrame
) -> None:
    _, axes = drawn
    for suite, ax in axes.items():
        shown = {a.get_text() for a in names(ax)}
        for r in points[points["suite"] == suite].to_dict("records"):
            value = "(baseline)" if r["mode"] == "default" else times(r["relative_throughput"])
            star = " ★" if r["recommended"] else ""
            assert f"{r['mode']} {value}{star}" in shown, (suite, r["mode"], shown)
        frame = ax.get_window_extent()
        boxes = [Text.get_window_extent(a) for a in names(ax)]  # the words, not the leader
        for box in boxes:
            assert frame.x0 <= box.x0 and box.x1 <= frame.x1
            assert frame.y0 <= box.y0 and box.y1 <= frame.y1
        for a, b in combinations(boxes, 2):
            assert not a.overlaps(b), suite
    assert "det-algos 0.94x" in {a.get_text() for a in names(axes["training"])}


def test_the_axis_is_cut_between_two_groups_far_apart() -> None:
    axis = planeaxis.fit([0.062, 0.107, 0.97, 0.975, 0.98, 0.985, 1.0, 1.011])
    assert axis.log and axis.cut is not None
    assert 0.107 < axis.cut[0] < axis.cut[1] < 0.97
    # The group near 1x, with 6 of the 8 values, gets most of the width.
    near = float(np.diff(axis.forward(np.array([0.97, 1.011])))[0])
    assert near > 0.4
    assert not planeaxis.fit([0.6, 0.8, 1.0, 1.1]).log  # within 3x: linear
    # The quickstart's one panel (det-algos 1.27x [1.08, 2.48]): linear, ticked in steps of 0.2
    # on 200 points, not only at 1x and 2x.
    assert planeaxis.fit([1.0, 1.08, 1.27, 2.48]).ticks(200) == [
        1.0,
        1.2,
        1.4,
        1.6,
        1.8,
        2.0,
        2.2,
        2.4,
    ]
    assert planeaxis.fit([0.1, 0.3, 0.5, 1.0]).cut is None  # spread out: log, not cut


def _clear_of_the_cut(values: list[float]) -> None:
    """No value inside the axis's cut, nor within ``MARGIN`` of its edges (issue 35)."""
    axis = planeaxis.fit(values)
    if axis.cut is None:
        return
    u = axis.forward(np.asarray(values, dtype=float))
    left, right = axis.at[1], axis.at[2]
    for v, x in zip(values, u, strict=True):
        assert not left - planeaxis.MARGIN * 0.99 < x < right + planeaxis.MARGIN * 0.99, (v, x)


def test_no_point_falls_inside_or_at_an_axis_cut() -> None:
    """Issue 35: a 0.22x point inside a cut drawn from intervals alone, a 1.14x point at the
    edge of one. Every value the axis is fitted to lies clear of the cut, by a margin."""
    _clear_of_the_cut([0.075, 0.076, 0.4, 0.41, 0.22, 1.0])
    _clear_of_the_cut([1.0, 1.14, 1.02, 1.12, 3.25, 3.3, 3.4])
    _clear_of_the_cut([0.062, 0.107, 0.97, 0.975, 0.98, 0.985, 1.0, 1.011])
    rng = np.random.default_rng(35)
    for _ in range(300):
        near = list(rng.uniform(0.9, 1.2, size=rng.integers(1, 8)))
        far = list(rng.uniform(0.03, 0.2, size=rng.integers(1, 4)))
        high = list(rng.uniform(3.0, 9.0, size=rng.integers(0, 3)))
        _clear_of_the_cut([*near, *far, *high, 1.0])


def test_a_point_outside_its_interval_is_on_the_axis() -> None:
    """The plane is fitted to the points too, not only to their intervals' ends: a point that
    its interval does not hold (a paired estimate's) is never drawn in a cut."""
    from detbench.report.tradeoff import draw_panel

    pts = pd.DataFrame(
        {
            "mode": ["default", "no-cudnn", "det-algos"],
            "relative_throughput": [1.0, 0.22, 0.97],
            "ci_low": [None, 0.075, 0.9],
            "ci_high": [None, 0.076, 1.05],
            "reproducible": [1.0, 1.0, 1.0],
            "frontier": [True, False, False],
            "workloads": [1, 1, 1],
        }
    )
    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.subplots()
    draw_panel(ax, pts, "s", "workloads reproducible")
    lo, hi = ax.get_xlim()
    assert lo < 0.075 and hi > 0.22


def test_every_figures_text_fits_inside_it(points: pd.DataFrame) -> None:
    """Issue 35: no text clipped, by matplotlib's own extents: the heatmap of one workload in
    three modes (its key and its colour bar's label were cut at both ends), and the trade-off
    figure of the published H200 run."""
    from detbench.report.plots import heatmap_figure

    v = pd.DataFrame(
        {
            "workload": ["my_case"] * 3,
            "mode": ["default", "det-algos", "cudnn-det+det-algos"],
            "verdict": ["reproducible"] * 3,
            "rel": [1.0, 1.2, 0.9],
        }
    )
    assert clipped_text(heatmap_figure(v, "custom", "default")) == []
    assert clipped_text(figure(points, "default")) == []


def test_a_figure_grows_only_for_the_text_a_reader_sees() -> None:
    """The divergence figure of the published H100 run's training suite was drawn 40 inches
    wide (4067 px, shown at a third of its size in the report): its locator made tick labels
    past the axes' ends (a step 25 on an axis that ends at 10, 10^-10 under one that starts at
    10^-8), which matplotlib never draws but which counted as text sticking out. Only the texts
    drawn count: the figure keeps its 8 inches, and nothing drawn is clipped."""
    from detbench.analysis import divergence
    from detbench.report.plots import divergence_figure

    run = ROOT / "results" / "20261126-060355-cuda-full-h100-partial"
    div = divergence(detbench.load_results(run))
    fig = divergence_figure(div[div["suite"] == "training"], "training")
    assert tuple(fig.get_size_inches()) == pytest.approx((8.0, 6.2))
    assert clipped_text(fig) == []


def test_the_modes_not_placed_are_named_inside_the_figure(points: pd.DataFrame) -> None:
    """A mode that ran no workload (an SDPA backend a CPU lacks, in an attribution study of a
    diffusion UNet) is named under the panel, not placed: its note, as long as two settings'
    names make it, wraps inside the figure instead of running past its edge."""
    one = points[points["suite"] == points["suite"].iloc[0]]
    lost = [one.iloc[0].copy() for _ in range(3)]  # three modes with long names and no throughput
    for i, row in enumerate(lost):
        row["mode"] = f"cudnn-det+det-algos[sdpa_backend=math,attempt_{i}_of_a_long_name]"
        row["relative_throughput"] = float("nan")
    fig = figure(pd.concat([one, pd.DataFrame(lost)], ignore_index=True), "default")
    notes = [t.get_text() for t in fig.findobj(Text) if t.get_text().startswith("Not placed")]
    assert len(notes) == 1 and "\n" in notes[0]
    assert " ".join(notes[0].split()).count("(ran no workload)") == 3
    assert clipped_text(fig) == []


def test_an_axis_over_many_decades_keeps_some_ticks() -> None:
    """A paired interval from two processes can span 16 decades (0.00x to 5.6e7x): the powers of
    ten are thinned until their labels keep apart, never all dropped (issue 35's run)."""
    ticks = planeaxis.fit([1e-8, 0.62, 0.99, 1.0, 1.56, 3.77, 5.5e7]).ticks(450)
    assert len(ticks) >= 3 and 1.0 in ticks
    assert planeaxis.label(1e-8) == "1e-08x"
