"""The chart of the report's ``Attribution`` section (``detbench.report.attribution``): per
suite, one bar per switch, the geometric mean over the suite's workloads of the variant's
throughput relative to its end, with its 95% interval, on a log axis.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure as MplFigure
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter

from detbench.report.attribution import change_words, near_noise, study_of, suite_effects, uncertain
from detbench.report.plots import Plot, save_figure, subplots
from detbench.report.render import num

#: Bar colours: switches added to the default mode, switches removed from the deterministic one.
COLOURS = {"default": "tab:orange", "deterministic": "tab:blue"}


#: Ticks of the chart's log axis, those within its range shown.
TICKS = (
    [2.0**k for k in range(-10, -2)]
    + [0.25, 0.33, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0]
    + [2.0**k for k in range(2, 11)]
)


def _ticks(lo: float, hi: float) -> list[float]:
    """Ticks between 2**lo and 2**hi: the friendly ratios of ``TICKS`` over a narrow range, at
    most about 8 powers of two over a wide one."""
    if hi - lo <= 3:
        return [t for t in TICKS if 2**lo <= t <= 2**hi]
    powers = list(range(math.ceil(lo), math.floor(hi) + 1))
    step = max(1, math.ceil(len(powers) / 8))
    return [2.0**k for k in powers if k % step == 0]


def _tick_label(x: float) -> str:
    if x < 1 and float(np.log2(x)).is_integer():
        return f"1/{round(1 / x)}x"
    return f"{x:.3g}x" if x < 1000 else f"{x:.0f}x"


def figure(s: pd.DataFrame, suite: str) -> MplFigure:
    """One bar per switch: the geometric mean over the suite's workloads of the variant's
    throughput relative to its end, with its 95% interval; hatched where the switch is needed
    for reproducibility (deterministic end) or alone sufficient (default end) on a workload."""
    s = s.reset_index(drop=True)
    n = len(s)
    fig, ax = subplots(figsize=(10.5, 1.7 + 0.42 * n))
    y = np.arange(n)[::-1]
    rel = pd.to_numeric(s["relative_throughput"], errors="coerce").to_numpy(dtype=float)
    low = pd.to_numeric(s["ci_low"], errors="coerce").to_numpy(dtype=float)
    high = pd.to_numeric(s["ci_high"], errors="coerce").to_numpy(dtype=float)
    records = s.to_dict("records")
    _bars(ax, y, rel, low, high, records)
    _log_axis(ax, low, high)
    _notes(ax, y, rel, records)
    labels = [
        f"{change_words(r)}  [{'from default' if r['end'] == 'default' else 'from det. end'}]"
        for r in s.to_dict("records")
    ]
    ax.set_yticks(y, labels, fontsize=9)
    ax.axvline(1.0, color="black", lw=1)
    ax.set_xlabel(
        "throughput relative to the study's end (geometric mean over workloads; "
        "error bars: 95% interval; log scale)"
    )
    ax.set_title(
        f"{suite}: what each switch costs (+ added to the default mode, - removed from "
        "the deterministic mode)",
        fontsize=10,
    )
    _legend(fig)
    ax.grid(axis="x", alpha=0.25)
    return fig


def _bars(
    ax: Axes,
    y: np.ndarray,
    rel: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    records: Sequence[Mapping[Any, Any]],
) -> None:
    """A bar from 1 to each variant's relative throughput (to 1 where it has none), hatched
    where the switch is needed or alone sufficient, with its interval as an error bar."""
    shown = np.where(np.isfinite(rel), rel, 1.0)
    for k, r in enumerate(records):
        marked = (r["end"] == "deterministic" and r["needed"]) or (
            r["end"] == "default" and r["sufficient"]
        )
        ax.barh(
            y[k],
            shown[k] - 1.0,
            left=1.0,
            height=0.62,
            color=COLOURS[str(r["end"])],
            alpha=0.75,
            hatch="///" if marked else None,
            edgecolor="black" if marked else "none",
        )
        if np.isfinite(rel[k]):
            ax.errorbar(
                rel[k],
                y[k],
                xerr=[[rel[k] - low[k]], [high[k] - rel[k]]],
                fmt="none",
                ecolor="black",
                capsize=3,
                lw=1,
            )


def _log_axis(ax: Axes, low: np.ndarray, high: np.ndarray) -> None:
    """A log-2 axis over the intervals and 1, padded, with the ticks of ``_ticks``."""
    finite = np.concatenate([low[np.isfinite(low)], high[np.isfinite(high)], [1.0]])
    lo, hi = float(np.log2(finite.min())), float(np.log2(finite.max()))
    pad = 0.08 * (hi - lo) + 0.05
    ax.set_xscale("log", base=2)
    ax.set_xlim(2 ** (lo - pad), 2 ** (hi + pad))
    ax.xaxis.set_major_locator(FixedLocator(_ticks(lo - pad, hi + pad)))
    ax.xaxis.set_minor_locator(FixedLocator([]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _tick_label(x)))


def _notes(ax: Axes, y: np.ndarray, rel: np.ndarray, records: Sequence[Mapping[Any, Any]]) -> None:
    """Right of the axes, each bar's number and what qualifies it (n.s., no finding,
    amount uncertain), and where the switch is needed or alone sufficient."""
    for i, r in enumerate(records):
        failed = ", ".join(r.get("failures") or []) or "no timing"
        note = num(rel[i], ".2f") + "x" if np.isfinite(rel[i]) else f"did not run: {failed}"
        if np.isfinite(rel[i]) and not r["significant"]:
            note += " (n.s.)"
        elif np.isfinite(rel[i]) and near_noise(r) is not None:
            note += " (no finding: noisy timing)"
        elif np.isfinite(rel[i]) and uncertain(r):
            note += " (amount uncertain)"
        if r["end"] == "deterministic" and r["needed"]:
            note += f"  needed on {r['needed']} of {r['workloads']}"
        if r["end"] == "default" and r["sufficient"]:
            note += f"  sufficient on {r['sufficient']} of {r['workloads']}"
        ax.annotate(
            note,
            (1.0, y[i]),
            xycoords=("axes fraction", "data"),
            xytext=(6, 0),
            textcoords="offset points",
            va="center",
            fontsize=9,
        )


def _legend(fig: MplFigure) -> None:
    """Below the axes: the two ends' colours and the hatch."""
    fig.legend(
        handles=[
            Patch(color=COLOURS["default"], alpha=0.75, label="added to the default mode"),
            Patch(
                color=COLOURS["deterministic"],
                alpha=0.75,
                label="removed from the deterministic mode",
            ),
            Patch(
                facecolor="white",
                edgecolor="black",
                hatch="///",
                label="needed for (or alone sufficient for) reproducibility",
            ),
        ],
        loc="outside lower center",
        ncol=3,
        fontsize=8,
        frameon=False,
    )


def write_plots(df: pd.DataFrame, env: dict[str, Any], directory: Path) -> list[Plot]:
    """The attribution chart of each suite, PNG and SVG, under ``directory``; none when the run
    is not an attribution study."""
    study = study_of(env)
    if study is None or df.empty:
        return []
    s = suite_effects(df, study)
    if s.empty:
        return []
    directory.mkdir(parents=True, exist_ok=True)
    plots = []
    for suite in dict.fromkeys(s["suite"]):
        fig = figure(s[s["suite"] == suite], str(suite))
        title = f"{suite}: what each switch costs, and where it is needed"
        plots.append(
            Plot(
                "attribution",
                str(suite),
                title,
                *save_figure(fig, directory, f"{suite}-attribution"),
            )
        )
    return plots
