"""The headline picture: per suite, each mode's throughput against the baseline (x, with its 95%
interval) and the share of workloads it made reproducible (y), named beside its point."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from detbench.report import labels, planeaxis
from detbench.report.plots import Plot, save_figure, subplots

KIND = "tradeoff"
FRONTIER = "tab:green"
#: Marker radii, in points: a mode's point, and the recommended mode's star.
DOT = 2.5
STAR = 8.0


def _bounds(placed: pd.DataFrame, col: str) -> pd.Series:
    """An interval's end per mode, the point itself where the mode has no interval."""
    point = placed["relative_throughput"].astype(float)
    return pd.to_numeric(placed[col], errors="coerce").astype(float).fillna(point)


def times(x: float) -> str:
    """A ratio as a label gives it: ``0.94x``, ``0.065x``."""
    return f"{x:.2f}x" if x >= 0.1 else f"{x:.2g}x"


def draw_panel(
    ax: Axes, pts: pd.DataFrame, title: str, y_label: str, baseline: str = "default"
) -> list[str]:
    """One suite's plane on ``ax``; returns the modes that ran no workload, with why."""
    defaults = {"ci_low": None, "ci_high": None, "inert": False, "recommended": False, "failed": 0}
    pts = pts.assign(**{c: d for c, d in defaults.items() if c not in pts.columns})
    placed = pts[pts["relative_throughput"].notna()]
    missing = [f"{m} (ran no workload)" for m in pts.loc[pts["relative_throughput"].isna(), "mode"]]
    ax.set_title(title, fontsize=10)
    if placed.empty:
        ax.text(0.5, 0.5, "no mode ran", ha="center", transform=ax.transAxes)
        return missing
    x = placed["relative_throughput"].astype(float)
    low, high = _bounds(placed, "ci_low"), _bounds(placed, "ci_high")
    # Every point and both ends of its interval: a point is never left inside the axis's cut.
    planeaxis.apply(ax, planeaxis.fit([*x, *low, *high, 1.0]))
    ax.axvline(1.0, color="0.7", lw=1, zorder=0)
    front = placed[placed["frontier"]].sort_values("relative_throughput")
    if len(front) > 1:
        xy = (front["relative_throughput"], front["reproducible"])
        ax.plot(
            *xy, color=FRONTIER, lw=2, alpha=0.6, zorder=1, drawstyle="steps-post", gid="frontier"
        )
    _draw_points(ax, placed, x, low, high)
    _name_points(ax, placed, baseline)
    _y_axis(ax, placed, y_label)
    ax.set_xlabel(f"throughput vs {baseline} (95% interval)", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.grid(alpha=0.2)
    return missing


def _draw_points(
    ax: Axes, placed: pd.DataFrame, x: pd.Series, low: pd.Series, high: pd.Series
) -> None:
    for i in placed.index:
        r = placed.loc[i]
        xy = (x.loc[i], r["reproducible"])
        grey = bool(r["inert"])
        colour = "0.6" if grey else "tab:blue"
        bar = ax.errorbar(
            *xy,
            xerr=[[max(0.0, xy[0] - low[i])], [max(0.0, high[i] - xy[0])]],
            fmt="o",
            ms=2 * DOT,
            color=colour,
            mfc="white" if grey else colour,
            capsize=1.5,
            lw=0.8,
            zorder=3,
        )
        bar.lines[0].set_gid("inert" if grey else "mode")
        if r["frontier"] and not r["recommended"]:  # the star would hide the green under it
            ax.scatter(*xy, s=220, color=FRONTIER, alpha=0.3, lw=0, zorder=2, gid="frontier")
        if r["recommended"]:
            ax.scatter(
                *xy, marker="*", s=260, color="gold", edgecolor="black", zorder=4, gid="recommended"
            )


def _name_points(ax: Axes, placed: pd.DataFrame, baseline: str) -> None:
    """Each mode's name and ratio beside its point, in the order they take their places."""
    order = placed.assign(
        _first=~placed["recommended"].astype(bool),
        _front=~placed["frontier"].astype(bool),
        _y=-placed["reproducible"].astype(float),
        _x=-placed["relative_throughput"].astype(float),
    ).sort_values(["_first", "_front", "_y", "_x"])
    for r in order.to_dict("records"):
        x = float(r["relative_throughput"])
        value = "(baseline)" if r["mode"] == baseline else times(x)
        name = f"{r['mode']} {value}" + (" ★" if r["recommended"] else "")
        if r.get("failed"):
            name += f" ({int(r['failed'])} not run)"
        xy, colour = (x, float(r["reproducible"])), "0.45" if bool(r["inert"]) else "black"
        labels.add(
            ax, xy, _wrap([name]), STAR if r["recommended"] else DOT, fontsize=7, color=colour
        )


def _y_axis(ax: Axes, placed: pd.DataFrame, y_label: str) -> None:
    """The share of the suite's workloads, as "k/n"; one strip where every mode has the same."""
    n = int(placed["workloads"].iloc[0]) if "workloads" in placed.columns else 0
    levels = sorted({float(v) for v in placed["reproducible"]}, reverse=True)

    def share(v: float) -> str:
        return f"{round(v * n)}/{n}" if n > 0 else f"{v:.2g}"

    if len(levels) == 1:
        ax.set_ylim(levels[0] - 1, levels[0] + 1)
        ax.set_yticks(levels, [share(levels[0])])
    else:
        ax.set_ylim(-0.1, 1.12)
        fig = ax.get_figure()
        assert isinstance(fig, Figure)
        height = 0.8 * ax.get_position().height * fig.get_figheight() * 72  # points
        room = 10 / height * 1.22  # a tick label's height, in shares
        ticks: list[float] = []
        for v in [1.0, *levels, 0.0]:
            if all(abs(v - t) >= room for t in ticks):
                ticks.append(v)
        ax.set_yticks(sorted(ticks), [share(t) for t in sorted(ticks)])
    ax.set_ylabel(y_label, fontsize=8)


def _wrap(names: list[str], width: int = 40) -> str:
    """Mode names joined with commas, wrapped between settings before ``width`` characters."""
    text = ", ".join(n.replace(",", ", ") for n in names)
    return textwrap.fill(text, width=width, break_long_words=False, break_on_hyphens=False)


def figure(p: pd.DataFrame, baseline: str, y_label: str = "workloads reproducible") -> Figure:
    """Small multiples: one panel per suite of ``p`` (``analysis.tradeoff.points``)."""
    suites = list(dict.fromkeys(p["suite"]))
    n = len(suites)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    width = 4.3 * cols if cols > 1 else 7.5  # one panel: room for its labels
    fig, axes = subplots(rows, cols, figsize=(width, 3.8 * rows + 0.5), squeeze=False)
    notes: list[str] = []
    for ax, suite in zip(axes.flat, suites, strict=False):
        g = p[p["suite"] == suite]
        k = int(g["workloads"].iloc[0]) if "workloads" in g.columns and len(g) else 0
        notes += [
            f"{suite}: {m}"
            for m in draw_panel(ax, g, f"{suite} ({k} workloads)", y_label, baseline)
        ]
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    parts = ["Speed versus reproducibility per suite", *key_parts(drawn(fig))]
    sep = "; " if cols == 3 else "\n"
    title = parts[0] + (": " + sep.join(parts[1:]) if len(parts) > 1 else "")
    fig.suptitle(title, fontsize=10 if cols == 3 else 8)
    if notes:  # under the panels, in the layout, wrapped to the figure's width (8 pt)
        line = int(fig.get_figwidth() * 13)  # characters of 8 pt in a line, with room to spare
        text = textwrap.fill("Not placed: " + "; ".join(notes), width=line, break_on_hyphens=False)
        fig.supxlabel(text, fontsize=8)
    finish(fig)
    return fig


#: The key's entry for each thing a panel can draw (by the gid ``draw_panel`` gives it).
KEY = {
    "recommended": "★ recommended",
    "frontier": "green: the frontier (no mode as reproducible is faster beyond the noise)",
    "inert": "grey: cuDNN flags, inert on this device",
}


def drawn(fig: Figure) -> set[str]:
    """The gids of what ``fig``'s visible panels draw: the key's entries come from these."""
    return {
        str(a.get_gid())
        for ax in fig.axes
        if ax.get_visible()
        for a in ax.get_children()
        if a.get_gid() is not None and a.get_visible()
    }


def key_parts(shown: set[str]) -> list[str]:
    """The key's entries for what is ``shown`` (``drawn``), in ``KEY``'s order."""
    return [words for gid, words in KEY.items() if gid in shown]


def finish(fig: Figure) -> None:
    """Once every panel of ``fig`` is drawn: fit the ticks, then place the names."""
    planeaxis.fit_ticks(fig)
    labels.place(fig)


def write_plots(p: pd.DataFrame, baseline: str, directory: Path) -> list[Plot]:
    """The headline figure, when any suite has a point to place."""
    if p.empty or p["relative_throughput"].isna().all():
        return []
    directory.mkdir(parents=True, exist_ok=True)
    fig = figure(p, baseline)
    title = "Speed versus reproducibility, one panel per suite"
    return [Plot(KIND, "*", title, *save_figure(fig, directory, "tradeoff"))]
