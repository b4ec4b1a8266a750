"""The ``Attribution`` section and chart of a run made by ``detbench attribute``."""

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

from detbench import analysis
from detbench.analysis import attribution as at
from detbench.analysis import stats
from detbench.analysis.cost_intervals import ratio
from detbench.core import settings as st
from detbench.core.modes import get_mode
from detbench.report.plots import Plot, save_figure, subplots
from detbench.report.render import Block, Bullets, Details, Figure, Heading, Para, Table, num


def study_of(env: dict[str, Any]) -> dict[str, Any] | None:
    study = (env or {}).get("study")
    return study if at.is_study(study) else None


def _words(switch: str, level: str) -> str:
    if switch in at.FLAG_WORDS:
        return f"{at.FLAG_WORDS[switch]} {level}"
    return f"{switch}={level}"


def _end_level(switch: str, end: str, end_mode: str) -> str:
    """The level the switch has in the mode the variant is compared with."""
    if switch in at.FLAG_WORDS:
        return "off" if end == "default" else "on"
    if switch == "execution":
        return "eager"
    return get_mode(end_mode).overrides.get(switch, st.get(switch).torch_default)


def change_words(r: Any) -> str:
    return ("+ " if r["direction"] == "added" else "- ") + _words(r["switch"], r["level"])


def near_noise(r: Any) -> str | None:
    """Why a significant cost is no finding (noisy, and within ``NOISY_IQR`` of 1), or None."""
    rel, low, high = (float(r[k]) for k in ("relative_throughput", "ci_low", "ci_high"))
    if not all(math.isfinite(x) and x > 0 for x in (rel, low, high)):
        return None
    near = 1 / (1 + analysis.NOISY_IQR) < (low if rel > 1 else high) < 1 + analysis.NOISY_IQR
    if r.get("noisy") and near:
        return (
            f"timing noisy: a replicate's samples spread (IQR) over more than "
            f"{analysis.NOISY_IQR:.0%} of their median"
        )
    return None


def uncertain(r: Any) -> bool:
    """Whether a cost's interval (log scale) is wider than its distance from 1."""
    rel, low, high = (float(r[k]) for k in ("relative_throughput", "ci_low", "ci_high"))
    if not all(math.isfinite(x) and x > 0 for x in (rel, low, high)):
        return False
    return math.log(high / low) > abs(math.log(rel))


def _speed(r: Any, than: str) -> str:
    rel, low, high = (float(r[k]) for k in ("relative_throughput", "ci_low", "ci_high"))
    if not math.isfinite(rel):
        return "no throughput to compare"
    interval = f"{rel:.2f}x, 95% interval {low:.2f}x to {high:.2f}x"
    if stats.says_nothing(low, high):
        return (
            f"throughput not measured ({interval}: the interval holds both half and twice the "
            f"throughput {than}; more replicates, or a quieter machine, narrow it)"
        )
    if stats.within_noise(low, high):
        return f"throughput {stats.NOISE} ({interval})"
    if not r["significant"]:
        return f"throughput not significantly different ({interval})"
    if (noise := near_noise(r)) is not None:
        return (
            f"throughput not a finding ({interval}: the interval excludes 1 but reaches within "
            f"{analysis.NOISY_IQR:.0%} of it; {noise})"
        )
    word = "faster" if rel > 1 else "slower"
    if uncertain(r):
        return (
            f"{word} than {than} by an uncertain amount ({interval}: the interval is wider "
            f"than the difference)"
        )
    return f"{100 * abs(rel - 1):.0f}% {word} than {than} ({interval})"


def conclusions(df: pd.DataFrame, study: dict[str, Any]) -> dict[str, list[str]]:
    """Per suite, one sentence per switch: what its variant did to reproducibility and speed."""
    s = suite_effects(df, study)
    out: dict[str, list[str]] = {}
    for r in s.to_dict("records"):
        n = r["workloads"]
        base = _words(r["switch"], _end_level(r["switch"], r["end"], r["end_mode"]))
        start = "the default mode" if r["end_mode"] == study["default_end"] else r["end_mode"]
        head = f"{start} with {_words(r['switch'], r['level'])}: "
        if r["failed"] == n:
            text = f"did not run ({', '.join(r['failures'])}; see Failures)"
        else:
            if r["reproducible"] == n:
                parts = ["bitwise reproducible" + ("" if n == 1 else f" on all {n} workloads")]
            else:
                parts = [f"bitwise reproducible on {r['reproducible']} of {n} workloads"]
            if r["end"] == "deterministic" and r["needed"]:
                parts.append(f"{base} is needed for reproducibility on {r['needed']} of {n}")
            if r["end"] == "default" and r["sufficient"]:
                parts.append(
                    f"alone makes {r['sufficient']} of {n} reproducible that the default "
                    "mode does not"
                )
            if r["bits_changed"]:
                parts.append(f"other bits than {base} on {r['bits_changed']} of {n}")
            parts.append(_speed(r, "with " + base))
            text = ", ".join(parts)
            if r["failed"]:
                text += f"; did not run on {r['failed']} of {n} ({', '.join(r['failures'])})"
        out.setdefault(str(r["suite"]), []).append(head + text)
    return out


def suite_effects(
    df: pd.DataFrame, study: dict[str, Any], n_boot: int = stats.N_BOOT, seed: int = stats.SEED
) -> pd.DataFrame:
    """Per (suite, variant): the geometric mean over the workloads of the variant's throughput
    relative to its end, with its 95% interval (of the ratios ``analysis.costs`` states), and
    the counts of workloads by what the switch did."""
    e = at.effects(df, study)
    if e.empty:
        return pd.DataFrame()
    df = analysis.counted(df)
    rows: list[dict[str, Any]] = []
    keys = ["suite", "mode", "end", "switch", "level", "direction"]
    for values, g in e.groupby(keys, sort=False):
        suite, mode = values[:2]
        end_mode = g["end_mode"].iloc[0]
        ratios = []
        for w in g["workload"]:
            sel = (df["suite"] == suite) & (df["workload"] == w)
            a, b = df[sel & (df["mode"] == mode)], df[sel & (df["mode"] == end_mode)]
            if analysis.replicate_samples(a) and analysis.replicate_samples(b):
                name = stats.comparison_key(suite, w, mode, end_mode)
                ratios.append(ratio(a, b, name, seed, n_boot))  # paired where timed so
        point = low = high = np.nan
        if ratios:
            both = stats.geometric_mean(ratios)
            point, low, high = both.point, both.low, both.high
        rows.append(
            {
                **dict(zip(keys, values, strict=True)),
                "end_mode": end_mode,
                "relative_throughput": point,
                "ci_low": low,
                "ci_high": high,
                "significant": bool(ratios) and not stats.within_noise(low, high),
                "noisy": bool((g["noisy"] == True).any()),  # noqa: E712
                "workloads": len(g),
                "timed": len(ratios),
                "needed": int((g["needed"] == True).sum()),  # noqa: E712
                "sufficient": int((g["sufficient"] == True).sum()),  # noqa: E712
                "reproducible": int((g["verdict"] == "reproducible").sum()),
                "end_reproducible": int((g["end_verdict"] == "reproducible").sum()),
                "bits_changed": int((g["bits_changed"] == True).sum()),  # noqa: E712
                "failed": int((~g["verdict"].isin(analysis.RAN)).sum()),
                "failures": sorted({str(x) for x in g["verdict"] if x not in analysis.RAN}),
            }
        )
    return pd.DataFrame(rows)


# -- the section -----------------------------------------------------------------------------


def _bits_cell(x: Any) -> str:
    if x == "varies":
        return "varies (nondeterministic)"
    return {True: "yes", False: "no"}.get(x, "–") if isinstance(x, bool) else "–"


def _needed_cell(r: Any) -> str:
    if r["end"] == "deterministic":
        if r["needed"] is True:
            return "needed"
        if r["needed"] is False:
            return "not needed"
        if r["end_verdict"] != "reproducible":
            return f"– (the end: {r['end_verdict']})"
        return f"– ({r['verdict']})"
    if r["sufficient"] is True:
        return "alone sufficient"
    if r["sufficient"] is False:
        return "not sufficient alone"
    return "– (default reproducible)" if r["end_verdict"] == "reproducible" else "–"


def _method(study: dict[str, Any], dropped: int) -> Para:
    variants = study["variants"]
    added = list(dict.fromkeys(v["switch"] for v in variants if v["end"] == "default"))
    removed = list(dict.fromkeys(v["switch"] for v in variants if v["end"] == "deterministic"))
    text = (
        f"How this study was made, on {study['device']}: two ends, the default mode "
        f"({study['default_end']}) and the fully deterministic mode ({study['deterministic_end']}: "
        "deterministic algorithms and cudnn.deterministic on, every setting that acts here at "
        "its strict level). From the default mode each switch was added alone ("
        + (", ".join(added) or "none")
        + "); from the deterministic mode each was removed alone, to each of its looser levels ("
        + (", ".join(removed) or "none")
        + "). Each variant is compared with its own end, per workload: throughput relative to "
        "the end's, with a 95% interval: where the two were timed side by side, the paired "
        "estimate and its t-interval over replicates (see Method); else the ratio of the medians "
        "over replicates of each replicate's median, with a bootstrap over replicates and "
        "samples; a difference is stated as a finding only "
        "where the interval excludes 1 and, where a replicate's timing is noisy, lies wholly "
        f"more than {analysis.NOISY_IQR:.0%} from 1 (otherwise it is not a finding; "
        f"{stats.NOISE} is said only of an interval that contains 1); where "
        "the interval is wider than the difference, only its direction is stated (the amount "
        "is uncertain); 'bits changed' compares the fingerprints where "
        "both are reproducible; 'needed' means the deterministic end was bitwise reproducible "
        "and the variant without the switch was not; 'alone sufficient' means the default was "
        "not reproducible and the switch alone made it so. The chart's bars are geometric means "
        "over the suite's workloads, their intervals from the same draws."
    )
    if skipped := at.skipped(study):
        text += " Skipped: " + "; ".join(skipped) + "."
    if dropped:
        text += (
            f" {dropped} records whose workload changed a setting itself are not counted "
            "(see the warnings)."
        )
    return Para(text)


def blocks(df: pd.DataFrame, env: dict[str, Any], plots: list[Plot]) -> list[Block]:
    """The ``Attribution`` section: [] when ``env`` holds no attribution study."""
    study = study_of(env)
    if study is None:
        return []
    dropped = len(df) - len(analysis.counted(df))
    out: list[Block] = [Heading(2, "Attribution"), _method(study, dropped)]
    e = at.effects(df, study)
    if e.empty:
        return [*out, Para("No record of this study counts yet.")]
    said = conclusions(df, study)
    for suite in dict.fromkeys(e["suite"]):
        rows: list[list[Any]] = []
        for r in e[e["suite"] == suite].to_dict("records"):
            rel = num(r["relative_throughput"], ".3f")
            if rel != "–":
                rel += f"x [{num(r['ci_low'], '.3f')}, {num(r['ci_high'], '.3f')}]"
                rel += "" if r["significant"] else " n.s."
                rel += " noisy" if r["noisy"] else ""
            rows.append(
                [
                    str(r["workload"]),
                    str(r["switch"]),
                    change_words(r),
                    str(r["end"]),
                    rel,
                    _bits_cell(r["bits_changed"]),
                    str(r["verdict"]),
                    _needed_cell(r),
                ]
            )
        header = ["workload", "switch", "change", "end", "throughput vs end [95% interval]"]
        header += ["bits changed", "verdict", "needed for reproducibility"]
        table = Table(
            header,
            rows,
            caption=f"{suite}: each switch against its end, per workload "
            "(n.s.: the interval contains 1; noisy: a replicate's timing samples had an "
            f"IQR above {analysis.NOISY_IQR:.0%} of their median)",
        )
        out.append(Heading(3, f"{suite}: attribution"))
        out += [Figure(p) for p in plots if p.kind == "attribution" and p.suite == suite]
        if said.get(str(suite)):
            out.append(Bullets(said[str(suite)]))
        out.append(Details(f"{suite}: each switch against its end, per workload", [table]))
    return out


# -- the chart -------------------------------------------------------------------------------

#: Bar colours: switches added to the default mode, switches removed from the deterministic one.
COLOURS = {"default": "tab:orange", "deterministic": "tab:blue"}


#: Ticks of the chart's log axis, those within its range shown.
TICKS = (
    [2.0**k for k in range(-10, -2)]
    + [0.25, 0.33, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0]
    + [2.0**k for k in range(2, 11)]
)


def _ticks(lo: float, hi: float) -> list[float]:
    """Ticks between 2**lo and 2**hi: ``TICKS`` over a narrow range, powers of two over a wide."""
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
    """One bar per switch (``suite_effects``), hatched where it is needed or alone sufficient."""
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
        for r in records
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
    shown = np.where(np.isfinite(rel), rel, 1.0)
    for k, r in enumerate(records):
        marked = r["needed"] if r["end"] == "deterministic" else r["sufficient"]
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
            err = [[rel[k] - low[k]], [high[k] - rel[k]]]
            ax.errorbar(rel[k], y[k], xerr=err, fmt="none", ecolor="black", capsize=3, lw=1)


def _log_axis(ax: Axes, low: np.ndarray, high: np.ndarray) -> None:
    finite = np.concatenate([low[np.isfinite(low)], high[np.isfinite(high)], [1.0]])
    lo, hi = float(np.log2(finite.min())), float(np.log2(finite.max()))
    pad = 0.08 * (hi - lo) + 0.05
    ax.set_xscale("log", base=2)
    ax.set_xlim(2 ** (lo - pad), 2 ** (hi + pad))
    ax.xaxis.set_major_locator(FixedLocator(_ticks(lo - pad, hi + pad)))
    ax.xaxis.set_minor_locator(FixedLocator([]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _tick_label(x)))


def _notes(ax: Axes, y: np.ndarray, rel: np.ndarray, records: Sequence[Mapping[Any, Any]]) -> None:
    """Right of the axes, each bar's number and what qualifies it."""
    for i, r in enumerate(records):
        failed = ", ".join(r.get("failures") or []) or "no timing"
        note = num(rel[i], ".2f") + "x" if np.isfinite(rel[i]) else f"did not run: {failed}"
        if np.isfinite(rel[i]) and not r["significant"]:
            note += " (n.s.)"
        elif np.isfinite(rel[i]) and near_noise(r) is not None:
            note += " (no finding: noisy timing)"
        elif np.isfinite(rel[i]) and uncertain(r):
            note += " (amount uncertain)"
        what = "needed" if r["end"] == "deterministic" else "sufficient"
        if r[what]:
            note += f"  {what} on {r[what]} of {r['workloads']}"
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
    needed = "needed for (or alone sufficient for) reproducibility"
    handles = [
        Patch(color=COLOURS["default"], alpha=0.75, label="added to the default mode"),
        Patch(
            color=COLOURS["deterministic"], alpha=0.75, label="removed from the deterministic mode"
        ),
        Patch(facecolor="white", edgecolor="black", hatch="///", label=needed),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=8, frameon=False)


def write_plots(df: pd.DataFrame, env: dict[str, Any], directory: Path) -> list[Plot]:
    """The attribution chart of each suite, PNG and SVG, under ``directory``."""
    study = study_of(env)
    if study is None or df.empty:
        return []
    s = suite_effects(df, study)
    if s.empty:
        return []
    directory.mkdir(parents=True, exist_ok=True)
    plots = []
    for suite in map(str, dict.fromkeys(s["suite"])):
        fig = figure(s[s["suite"] == suite], suite)
        title = f"{suite}: what each switch costs, and where it is needed"
        files = save_figure(fig, directory, f"{suite}-attribution")
        plots.append(Plot("attribution", suite, title, *files))
    return plots
