"""The report's per-suite figures, as PNG and SVG: the ``heatmap`` of workloads x modes and, for
training workloads, the ``divergence`` of the replicates' losses step by step."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps, rc_context
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.text import Text
from PIL import Image

from detbench import analysis
from detbench.core.modes import DEFAULT_MODE

#: The heatmap's colour scale: log2 of relative throughput, clipped to 0.25x..4x.
LOG2_CLIP = 2.0


def subplots(nrows: int = 1, ncols: int = 1, **kw: Any) -> tuple[Figure, Any]:
    """A figure and its axes, made without pyplot, so detbench never switches a user's
    matplotlib backend (``Figure.savefig`` picks the writer from the file's extension)."""
    fig = Figure(figsize=kw.pop("figsize", None), layout="constrained")
    return fig, fig.subplots(nrows, ncols, **kw)


def _undrawn_tick_labels(fig: Figure) -> set[int]:
    """The ids of ``fig``'s tick labels outside their axis's span: visible, but never drawn."""
    out: set[int] = set()
    for ax in fig.axes:
        box = ax.bbox
        for i, axis, lo, hi in ((0, ax.xaxis, box.x0, box.x1), (1, ax.yaxis, box.y0, box.y1)):
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                loc = tick.get_loc()
                point = (loc, 1.0) if i == 0 else (1.0, loc)
                where = ax.transData.transform(point)[i] if loc is not None else float("nan")
                if not lo - 1 <= where <= hi + 1:  # NaN too: a tick at 0 on a log axis
                    out.update((id(tick.label1), id(tick.label2)))
    return out


def drawn_texts(fig: Figure) -> tuple[Any, list[tuple[Text, Any]]]:
    """(the figure's box, each text a reader sees with its extent as drawn)."""
    canvas = FigureCanvasAgg(fig)  # a canvas of its own: no backend chosen, no global state
    canvas.draw()
    renderer = canvas.get_renderer()
    undrawn = _undrawn_tick_labels(fig)
    texts = [
        (t, t.get_window_extent(renderer))
        for t in fig.findobj(Text)
        if t.get_visible() and t.get_text().strip() and id(t) not in undrawn
    ]
    return fig.bbox, texts


def grow_to_fit(fig: Figure, tries: int = 6) -> None:
    """Make ``fig`` larger until every text a reader sees (``drawn_texts``) fits inside it."""
    for _ in range(tries):
        box, texts = drawn_texts(fig)
        over_x = max((max(box.x0 - e.x0, e.x1 - box.x1) for _t, e in texts), default=0.0)
        over_y = max((max(box.y0 - e.y0, e.y1 - box.y1) for _t, e in texts), default=0.0)
        if over_x <= 1 and over_y <= 1:
            return
        w, h = fig.get_size_inches()
        grow = 2 / fig.dpi
        fig.set_size_inches(w + max(over_x, 0) * grow + 0.1, h + max(over_y, 0) * grow + 0.1)


@dataclass(frozen=True)
class Plot:
    kind: str
    suite: str
    title: str
    png: Path
    svg: Path


def mode_tick(label: str) -> str:
    """A mode's name for an axis: a mode with settings on several lines, one setting a line."""
    base, _, rest = label.partition("[")
    if not rest:
        return label
    return base + "\n" + "\n".join(rest.rstrip("]").split(","))


def _tick_room(labels: list[str]) -> float:
    """Inches under an axis for these labels at 35 degrees, 9 pt (about 0.075 in a character)."""
    ticks = [mode_tick(m).splitlines() for m in labels] or [[""]]
    longest = max(len(line) for lines in ticks for line in lines)
    return 0.045 * longest + 0.16 * max(len(lines) for lines in ticks)


def heatmap_figure(
    v: pd.DataFrame,
    suite: str,
    baseline: str = DEFAULT_MODE.name,
    costs: pd.DataFrame | None = None,
) -> Figure:
    """Workloads x modes: colour = significant relative throughput, text = ratio and mark."""
    modes = analysis.ordered_modes(v["mode"])
    workloads = list(dict.fromkeys(v["workload"]))
    cell = v.set_index(["workload", "mode"])
    c = None if costs is None or costs.empty else costs.set_index(["workload", "mode"])
    rel, shown = _heat_values(cell, c, workloads, modes, baseline)
    logs = np.clip(np.log2(shown), -LOG2_CLIP, LOG2_CLIP)
    width = max(7.0, 0.95 * len(modes) + 0.08 * max(len(w) for w in workloads) + 2.2)
    height = 1.6 + 0.4 * len(workloads) + _tick_room(modes)
    fig, ax = subplots(figsize=(width, height))
    # Uncoloured (white): the baseline's cells and those within the noise; grey is kept for the
    # cells that did not run, so the two never read as one.
    cmap = colormaps["RdBu"].with_extremes(bad="white")
    norm = TwoSlopeNorm(vmin=-LOG2_CLIP, vcenter=0.0, vmax=LOG2_CLIP)
    im = ax.imshow(np.ma.masked_invalid(logs), cmap=cmap, norm=norm, aspect="auto")
    drawn = _heat_cells(ax, cell, c, workloads, modes, baseline, rel, shown, logs)
    names = [mode_tick(m) for m in modes]
    ax.set_xticks(
        range(len(modes)), names, rotation=35, ha="right", fontsize=9, rotation_mode="anchor"
    )
    ax.set_yticks(range(len(workloads)), workloads, fontsize=9)
    ticks = np.arange(-LOG2_CLIP, LOG2_CLIP + 1)
    bar = fig.colorbar(im, ax=ax, ticks=ticks, shrink=min(1.0, 6 / max(len(workloads), 1)) + 0.2)
    bar.ax.set_yticklabels([f"{2.0**t:g}x" for t in ticks])
    bar.set_label(f"throughput relative\nto the {baseline} mode")
    # A 9 pt character is about 0.075 in wide.
    key = textwrap.fill(heat_key(drawn), width=max(40, int(width / 0.075)))
    ax.set_title(
        f"{suite}: relative throughput per workload and mode (coloured where significant)"
        + (f"\n{key}" if key else ""),
        fontsize=9,
    )
    grow_to_fit(fig)
    return fig


def _heat_values(
    cell: pd.DataFrame,
    c: pd.DataFrame | None,
    workloads: list[Any],
    modes: list[str],
    baseline: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Each cell's relative throughput where it ran, and where it is coloured; NaN elsewhere."""
    rel = np.full((len(workloads), len(modes)), np.nan)
    shown = np.full((len(workloads), len(modes)), np.nan)  # coloured: significant only
    for i, w in enumerate(workloads):
        for j, m in enumerate(modes):
            if (w, m) in cell.index and cell.loc[(w, m), "verdict"] in analysis.RAN:
                rel[i, j] = cell.loc[(w, m), "rel"]
                sig = c is None or ((w, m) in c.index and bool(c.loc[(w, m), "significant"]))
                if m != baseline and sig:
                    shown[i, j] = rel[i, j]
    return rel, shown


#: What a heatmap cell can show, and the key's words for it (``heat_key``), in the key's order.
HEAT_KEY = {
    "reproducible": "= bitwise identical in every replicate",
    "nondeterministic": "≠ (outlined) not",
    "single": "? one replicate only",
    "ns": "n.s.: within the noise (95% interval contains 1)",
    "noisy": "hatched: noisy timing",
    "not_run": "grey: did not run (the status that stopped it)",
    "no_record": "grey –: no record",
    "settings_changed": "chg (grey): every replicate changed a setting of its mode, not counted",
}
#: The grey of a cell with no result.
NOT_RUN_GREY = "0.82"


def heat_key(drawn: set[str]) -> str:
    """The heatmap's key: an entry for each thing ``drawn`` (``_heat_cells``), and no other."""
    parts = [HEAT_KEY[k] for k in HEAT_KEY if k in drawn]
    if "nondeterministic" in drawn and "reproducible" not in drawn:
        parts[0] = "≠ (outlined): not bitwise identical in every replicate"
    if {"reproducible", "nondeterministic"} <= drawn:  # "= ..., ≠ not" as one entry
        parts[:2] = [", ".join(parts[:2])]
    return "; ".join(parts)


def _box(ax: Axes, i: int, j: int, **kw: Any) -> None:
    ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, **kw))


def _heat_cells(
    ax: Axes,
    cell: pd.DataFrame,
    c: pd.DataFrame | None,
    workloads: list[Any],
    modes: list[str],
    baseline: str,
    rel: np.ndarray,
    shown: np.ndarray,
    logs: np.ndarray,
) -> set[str]:
    """Each cell's text and marks; returns what was drawn, by ``HEAT_KEY``'s names."""
    drawn: set[str] = set()
    for i, w in enumerate(workloads):
        for j, m in enumerate(modes):
            if (w, m) not in cell.index:  # no record of this mode for this workload
                verdict, mark = "no_record", "–"
            else:
                verdict = str(cell.loc[(w, m), "verdict"])
                mark = analysis.MARKS.get(verdict, verdict)
            if verdict in analysis.RAN:
                drawn.add(verdict)
                r = rel[i, j]
                if m == baseline:
                    text = f"base {mark}"
                elif not np.isfinite(shown[i, j]):
                    text = f"n.s. {mark}" if np.isfinite(r) else mark
                    drawn.update(["ns"] if np.isfinite(r) else [])
                else:
                    text = f"{r:.2f} {mark}"
                noisy = c is not None and (w, m) in c.index and bool(c.loc[(w, m), "noisy"])
                if m != baseline and np.isfinite(r) and noisy:
                    _box(ax, i, j, fill=False, lw=0, hatch="///", ec="0.35", alpha=0.6, gid="noisy")
                    drawn.add("noisy")
            else:
                text = mark
                _box(ax, i, j, color=NOT_RUN_GREY, lw=0)
                drawn.add(verdict if verdict in ("settings_changed", "no_record") else "not_run")
            dark = np.isfinite(logs[i, j]) and abs(logs[i, j]) > 0.6 * LOG2_CLIP
            colour = "white" if dark else "black"
            ax.text(j, i, text, ha="center", va="center", fontsize=9, color=colour)
            if verdict == "nondeterministic":
                _box(ax, i, j, fill=False, lw=2, ec="black")
    return drawn


def divergence_figure(d: pd.DataFrame, suite: str) -> Figure:
    """One panel per workload: the largest loss difference between replicates at each step."""
    workloads = list(dict.fromkeys(d["workload"]))
    fig, axes = subplots(len(workloads), 1, figsize=(8, 2.8 * len(workloads) + 0.6), squeeze=False)
    for ax, w in zip(axes[:, 0], workloads, strict=True):
        g = d[d["workload"] == w]
        nonzero = g.loc[g["max_abs_loss_diff"] > 0, "max_abs_loss_diff"]
        # Equal loss, differing parameters: a hollow marker below the lowest difference, or at 0.
        floor = float(nonzero.min()) / 10 if len(nonzero) else 0.0
        for mode, m in g.groupby("mode", sort=False):
            m = m.sort_values("step")
            y = m["max_abs_loss_diff"].to_numpy(dtype=float)
            shown = np.where(y > 0, y, np.nan)
            (line,) = ax.plot(m["step"], shown, marker="o", ms=4, label=str(mode))
            hidden = (y == 0) & m["step_fingerprint_differs"].to_numpy()
            if hidden.any():
                xs, ys = m["step"][hidden], np.full(hidden.sum(), floor)
                ax.scatter(xs, ys, marker="o", facecolor="none", edgecolor=line.get_color(), s=30)
            if len(first := m.loc[m["step_fingerprint_differs"], "step"]):
                ax.axvline(int(first.min()), color=line.get_color(), ls=":", lw=1)
        if len(nonzero):
            ax.set_yscale("log")
        else:
            note = "the loss is identical at every step; the parameters are not"
            ax.text(0.5, 0.6, note, transform=ax.transAxes, ha="center", fontsize=9)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_title(f"{w}", fontsize=10)
        ax.set(xlabel="training step", ylabel="max |loss difference|")
        ax.grid(alpha=0.2)
        ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(
        f"{suite}: how far replicates drift apart (dotted: first step whose parameters differ;"
        " hollow: loss equal, parameters not)",
        fontsize=9,
    )
    grow_to_fit(fig)
    return fig


#: The files a figure is written as (``plots/`` holds nothing else of the report's).
PLOTS_SUFFIXES = (".png", ".svg")
#: The PNG's resolution; the HTML embeds the PNG, the Markdown links both. Heatmaps, whose cells
#: are large, use ``HEATMAP_DPI`` (the HTML of a 7-suite run stays well under 1 MB).
DPI = 100
HEATMAP_DPI = 80


def save_figure(fig: Figure, directory: Path, stem: str, dpi: int = DPI) -> tuple[Path, Path]:
    """The figure as SVG and as a PNG of 256 colours (3-4 times smaller, nothing visible lost)."""
    png, svg = directory / f"{stem}.png", directory / f"{stem}.svg"
    fig.savefig(png, dpi=dpi)
    # No date, and ids salted by the file's name, not at random: a report rewritten from the
    # same records is the same file (rc_context restores the setting).
    with rc_context({"svg.hashsalt": stem}):
        fig.savefig(svg, metadata={"Date": None})
    with Image.open(png) as im:
        small = im.convert("RGB").quantize(colors=256, dither=Image.Dither.NONE)
    small.save(png, optimize=True)
    return png, svg


def write_plots(df: pd.DataFrame, directory: Path, costs: pd.DataFrame | None = None) -> list[Plot]:
    """The per-suite figures of a result set, under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    v = analysis.verdicts(df)
    if v.empty:
        return []
    baseline = str(analysis.baseline_mode(v["mode"]))
    costs = analysis.costs(df, baseline) if costs is None else costs
    v = v.assign(rel=analysis.cost_points(v, baseline, costs))  # the answer's numbers
    div = analysis.divergence(df)
    plots: list[Plot] = []
    for s in map(str, dict.fromkeys(v["suite"])):
        here = costs[costs["suite"] == s] if len(costs) else costs
        fig = heatmap_figure(v[v["suite"] == s], s, baseline, here)
        title = f"{s}: relative throughput and reproducibility per workload"
        plots.append(
            Plot("heatmap", s, title, *save_figure(fig, directory, f"{s}-heatmap", HEATMAP_DPI))
        )
        if not div.empty and (div["suite"] == s).any():
            fig = divergence_figure(div[div["suite"] == s], s)
            title = f"{s}: divergence between replicates, step by step"
            plots.append(
                Plot("divergence", s, title, *save_figure(fig, directory, f"{s}-divergence"))
            )
    return plots
