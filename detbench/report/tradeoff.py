"""The report's headline picture: speed versus reproducibility, one panel per suite.

Each panel places every mode at its throughput relative to the baseline (x: geometric mean over
the suite's workloads, with its 95% interval as an error bar) and the fraction of the suite's
workloads it made bitwise reproducible (y). The axes are fitted to the points. Modes are named
beside their points, not in a legend: modes whose points fall together (on a CPU, the modes that
differ only in cuDNN flags) share one label. The frontier (``analysis.tradeoff``: it agrees with
the recommendation) is the green line, the recommended mode the star; a mode the recommendation
cannot pick on this device (cuDNN flags on a CPU) is grey, and a mode that ran no workload of the
suite is listed under the panel as not run, with why.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from detbench.report.plots import Plot, _save, subplots

KIND = "tradeoff"
FRONTIER = "tab:green"


def _clusters(pts: pd.DataFrame, span: float) -> list[list[int]]:
    """Indices of modes whose points fall together: the same y, and x within 20% of the axis's
    span of the cluster's first point (on a CPU, the modes that differ only in cuDNN flags)."""
    out: list[list[int]] = []
    for _, g in pts.sort_values(["reproducible", "relative_throughput"]).groupby(
        "reproducible", sort=False
    ):
        current: list[int] = []
        start = None
        for i, x in zip(g.index, g["relative_throughput"].astype(float), strict=True):
            if start is not None and x - start > 0.2 * span:
                out.append(current)
                current, start = [], None
            current.append(int(i))
            start = x if start is None else start
        if current:
            out.append(current)
    return out


def _limits(values: Sequence[float], floor: float | None = None) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    pad = 0.08 * (hi - lo) if hi > lo else 0.05 * max(abs(hi), 0.1)
    lo, hi = lo - pad, hi + pad
    return (max(lo, floor) if floor is not None else lo), hi


def draw_panel(ax: Axes, pts: pd.DataFrame, title: str, y_label: str,
               baseline: str = "default") -> list[str]:  # fmt: skip
    """One suite's plane on ``ax``; returns the names of the modes that could not be placed
    (ran no workload), with why. ``pts``: ``analysis.tradeoff.points`` of one suite (or a frame
    with ``mode``, ``relative_throughput``, ``reproducible``, ``frontier``, and optionally
    ``ci_low``, ``ci_high``, ``inert``, ``recommended``, ``failed``, ``workloads``)."""
    pts = pts.copy()
    for col, default in (("ci_low", None), ("ci_high", None), ("inert", False),
                         ("recommended", False), ("failed", 0)):  # fmt: skip
        if col not in pts.columns:
            pts[col] = default
    placed = pts[pts["relative_throughput"].notna()]
    missing = [f"{m} (ran no workload)" for m in pts.loc[pts["relative_throughput"].isna(), "mode"]]
    if placed.empty:
        ax.text(0.5, 0.5, "no mode ran", ha="center", transform=ax.transAxes)
        ax.set_title(title, fontsize=10)
        return missing
    x = placed["relative_throughput"].astype(float)
    low = pd.Series(
        [
            float(v) if v is not None and not pd.isna(v) else float(p)
            for v, p in zip(placed["ci_low"], x, strict=True)
        ],
        index=placed.index,
    )
    high = pd.Series(
        [
            float(v) if v is not None and not pd.isna(v) else float(p)
            for v, p in zip(placed["ci_high"], x, strict=True)
        ],
        index=placed.index,
    )
    x_lo, x_hi = _limits([*low, *high, 1.0])
    positive = [v for v in [*low, *high, 1.0] if v > 0]
    log = max(positive) / min(positive) > 3  # ratios over a wide range: a log axis
    if log:
        ax.set_xscale("log")
        x_lo, x_hi = min(positive) / 1.2, max(positive) * 1.2
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    y_lo, y_hi = _limits(list(placed["reproducible"].astype(float)), floor=-0.02)
    room = 0.45 * (y_hi - y_lo)  # for the labels above the highest and below the lowest points
    y_lo, y_hi = y_lo - room, y_hi + room
    ax.axvline(1.0, color="0.7", lw=1, zorder=0)
    front = placed[placed["frontier"]].sort_values("relative_throughput")
    if len(front) > 1:
        ax.plot(front["relative_throughput"], front["reproducible"], color=FRONTIER, lw=2,
                alpha=0.6, zorder=1, drawstyle="steps-post")  # fmt: skip
    for i in placed.index:
        r = placed.loc[i]
        grey = bool(r["inert"])
        colour = "0.6" if grey else "tab:blue"
        ax.errorbar(
            x.loc[i], r["reproducible"],
            xerr=[[max(0.0, x.loc[i] - low[i])], [max(0.0, high[i] - x.loc[i])]],
            fmt="o", ms=5, color=colour, mfc="white" if grey else colour, capsize=1.5, lw=0.8,
            zorder=3,
        )  # fmt: skip
        if r["frontier"]:
            ax.scatter(x.loc[i], r["reproducible"], s=220, color=FRONTIER, alpha=0.3, lw=0,
                       zorder=2)  # fmt: skip
        if r["recommended"]:
            ax.scatter(x.loc[i], r["reproducible"], marker="*", s=260, color="gold",
                       edgecolor="black", zorder=4)  # fmt: skip
    y_mid = (y_lo + y_hi) / 2
    flip: dict[float, bool] = {}
    span = float(np.log(x_hi / x_lo)) if log else x_hi - x_lo
    where = placed.assign(relative_throughput=np.log(x)) if log else placed
    for group in _clusters(where, span):
        rows = placed.loc[group].sort_values("relative_throughput")
        names = []
        for rr in rows.to_dict("records"):
            name = str(rr["mode"]) + (" ★" if rr["recommended"] else "")
            if rr.get("failed"):
                name += f" ({int(rr['failed'])} not run)"
            names.append(name)
        xm = float(rows["relative_throughput"].mean())
        frac = (np.log(xm / x_lo) / np.log(x_hi / x_lo)) if log else (xm - x_lo) / (x_hi - x_lo)
        y = float(rows["reproducible"].iloc[0])
        # Inside the axes; neighbouring clusters at one height alternate above and below.
        below = flip.setdefault(y, y >= y_mid)
        flip[y] = not below
        label = ax.annotate(
            _wrap(names), (xm, y), xytext=(0, -9 if below else 9), textcoords="offset points",
            fontsize=7, ha="left" if frac < 0.2 else "right" if frac > 0.8 else "center",
            va="top" if below else "bottom",
            color="0.45" if bool(rows["inert"].all()) else "black",
        )  # fmt: skip
        label.set_in_layout(False)  # a long label must not squeeze the axes to nothing
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, y_hi)
    ticks = [t for t in ax.get_yticks() if -1e-9 <= t <= 1 + 1e-9 and y_lo <= t <= y_hi]
    ax.set_yticks(ticks, [f"{t:.3g}" for t in ticks])  # a fraction: nothing above 1
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(f"throughput vs {baseline} (95% interval)", fontsize=8)
    ax.set_ylabel(y_label, fontsize=8)
    ax.tick_params(labelsize=8)
    ax.grid(alpha=0.2)
    return missing


def _wrap(names: list[str], width: int = 36) -> str:
    """Mode names joined with commas, wrapped before ``width`` characters; a long name breaks
    between its settings."""
    text = ", ".join(n.replace(",", ", ") for n in names)
    return textwrap.fill(text, width=width, break_long_words=False, break_on_hyphens=False)


def figure(p: pd.DataFrame, baseline: str, y_label: str = "fraction reproducible") -> Figure:
    """Small multiples: one panel per suite of ``p`` (``analysis.tradeoff.points``)."""
    suites = list(dict.fromkeys(p["suite"]))
    n = len(suites)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    width = 4.3 * cols if cols > 1 else 7.5  # one panel: room for its labels
    fig, axes = subplots(rows, cols, figsize=(width, 3.3 * rows + 0.5), squeeze=False)
    notes: list[str] = []
    for ax, suite in zip(axes.flat, suites, strict=False):
        g = p[p["suite"] == suite]
        k = int(g["workloads"].iloc[0]) if "workloads" in g.columns and len(g) else 0
        notes += [f"{suite}: {m}" for m in
                  draw_panel(ax, g, f"{suite} ({k} workloads)", y_label, baseline)]  # fmt: skip
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    parts = [
        "Speed versus reproducibility per suite",
        "★ recommended",
        "green: the frontier (no mode as reproducible is faster beyond the noise)",
    ]
    if bool(p["inert"].any()):
        parts.append("grey: cuDNN flags, inert on this device")
    sep = "; " if cols == 3 else "\n"
    fig.suptitle(parts[0] + ": " + sep.join(parts[1:]), fontsize=10 if cols == 3 else 8)
    if notes:
        fig.text(0.01, 0.0, "Not placed: " + "; ".join(notes), fontsize=8, va="bottom")
    return fig


def write_plots(p: pd.DataFrame, baseline: str, directory: Path) -> list[Plot]:
    """The headline figure, when any suite has a point to place."""
    if p.empty or p["relative_throughput"].isna().all():
        return []
    directory.mkdir(parents=True, exist_ok=True)
    fig = figure(p, baseline)
    title = "Speed versus reproducibility, one panel per suite"
    return [Plot(KIND, "*", title, *_save(fig, directory, "tradeoff"))]
