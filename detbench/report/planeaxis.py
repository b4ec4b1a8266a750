"""The x axis of the plane, fitted so its numbers can be read: where the modes fall in two groups
far apart (no-cudnn near 0.1x, the rest near 1x), the stretch between is cut out (``CUT``)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from weakref import WeakKeyDictionary

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

#: Ratios that span more than this go on a log axis.
LOG_ABOVE = 3.0
#: The stretch between two groups is cut out past this share of the log axis and ``CUT_RATIO``.
CUT_SHARE = 0.5
CUT_RATIO = 2.5
#: The share of the width the cut takes.
CUT = 0.05
#: Tick labels, in points.
TICK_FONT = 8.0
#: The least share of the axis's width between a value and the cut, so no marker sits in it.
MARGIN = 0.05
#: The least share of the axis's width for each side of a cut: room for ``MARGIN`` on both ends.
PIECE = 0.2


@dataclass(frozen=True)
class XAxis:
    """A piecewise linear map from the values (logarithms on a log axis) to 0-1: ``knots`` bend
    it, landing at ``at``. One piece, or three where the axis is cut (the middle one)."""

    log: bool
    knots: tuple[float, ...]
    at: tuple[float, ...]

    @property
    def cut(self) -> tuple[float, float] | None:
        """The values at the two edges of the cut, if the axis has one."""
        if len(self.knots) < 4:
            return None
        return self._value(self.knots[1]), self._value(self.knots[2])

    @property
    def limits(self) -> tuple[float, float]:
        return self._value(self.knots[0]), self._value(self.knots[-1])

    def _value(self, t: float) -> float:
        return math.exp(t) if self.log else t

    def forward(self, x: np.ndarray) -> np.ndarray:
        """Values to the axis's 0-1 (beyond its ends, the end pieces go on)."""
        x = np.asarray(x, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.log(np.maximum(x, 1e-300)) if self.log else x
        return _through(t, self.knots, self.at)

    def inverse(self, u: np.ndarray) -> np.ndarray:
        t = _through(np.asarray(u, dtype=float), self.at, self.knots)
        return np.exp(t) if self.log else t

    def ticks(self, width: float) -> list[float]:
        """In each piece, the finest of ``_tick_sets`` whose labels keep apart at ``width`` pt."""
        edges = [u * width for u in self.at[1:-1]]  # the cut's, whose marks want room
        out: list[float] = []
        for i in range(0, len(self.knots) - 1, 2):
            lo, hi = self._value(self.knots[i]), self._value(self.knots[i + 1])
            best: list[tuple[float, float]] = []
            for values in _tick_sets(lo, hi, self.log):
                at = [(float(self.forward(np.array([v]))[0]) * width, v) for v in values]
                at = [(u, v) for u, v in at if all(_clear(u, v, e) for e in edges)]
                if not all(_apart(a, b) for a, b in itertools.pairwise(at)):
                    if not best:  # even the coarsest set is crowded: every k-th of it
                        best = _thinned(at)
                    break
                if len(at) >= len(best):
                    best = at
            out += [v for _, v in best]
        return sorted(out)


def _thinned(at: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Every k-th of the ticks ``at`` (points, value), for the least k whose labels keep apart."""
    for k in range(2, len(at) + 1):
        for start in range(k):
            some = at[start::k]
            if some and all(_apart(a, b) for a, b in itertools.pairwise(some)):
                return some
    return at[:1]


def _clear(u: float, v: float, edge: float) -> bool:
    """Whether the label of tick ``v`` at ``u`` (points) leaves room for a mark at ``edge``."""
    return abs(u - edge) >= len(label(v)) / 2 * 0.56 * TICK_FONT + 6


def _apart(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two ticks' labels (points, value) leave a gap; a character is 0.56 of its size."""
    half = (len(label(a[1])) + len(label(b[1]))) / 2 * 0.56 * TICK_FONT
    return abs(a[0] - b[0]) >= half + 4


#: The plane axes whose ticks wait for the figure's layout.
_AXES: WeakKeyDictionary[Axes, XAxis] = WeakKeyDictionary()


def label(v: float) -> str:
    """A tick's label: ``0.94x``."""
    return f"{round(v, 6):g}x" if abs(v) >= 1e-4 else f"{v:.0e}x"


def _through(t: np.ndarray, xs: Sequence[float], ys: Sequence[float]) -> np.ndarray:
    """Piecewise linear through (xs, ys), the end pieces extended beyond the ends."""
    out = np.interp(t, xs, ys)
    lo_slope = (ys[1] - ys[0]) / (xs[1] - xs[0])
    hi_slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    out = np.where(t < xs[0], ys[0] + (t - xs[0]) * lo_slope, out)
    return np.where(t > xs[-1], ys[-1] + (t - xs[-1]) * hi_slope, out)


def _tick_sets(lo: float, hi: float, log: bool) -> list[list[float]]:
    """Ever finer sorted sets of tick values in [lo, hi]: 1, 2, 5 times the powers of ten."""
    if hi <= 0 or (log and lo <= 0):
        return []
    out = []
    if log and hi / lo > 2:
        decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
        for ms in ((1,), (1, 2, 5), (1, 2, 3, 4, 5, 6, 7, 8, 9)):
            vs = [round(m * 10.0**e, 9) for e in decades for m in ms]
            out.append(sorted(v for v in vs if lo <= v <= hi))
        return out
    top = math.ceil(math.log10(hi))
    for e in range(top, top - 4, -1):
        for m in (5, 2, 1):
            step = m * 10.0**e
            ks = range(math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9) + 1)
            out.append([round(k * step, 9) for k in ks if k * step >= 0])
    return out


def fit(values: Sequence[float]) -> XAxis:
    """The axis for ``values`` (the points, their intervals' ends and 1x)."""
    positive = sorted(v for v in values if v > 0)
    log = bool(positive) and positive[-1] / positive[0] > LOG_ABOVE
    if not log:
        lo, hi = min(values), max(values)
        pad = 0.08 * (hi - lo) if hi > lo else 0.05 * max(abs(hi), 0.1)
        return XAxis(False, (lo - pad, hi + pad), (0.0, 1.0))
    t = np.log(positive)
    span = float(t[-1] - t[0])
    gaps = np.diff(t)
    i = int(np.argmax(gaps))
    if gaps[i] > CUT_SHARE * span and gaps[i] > math.log(CUT_RATIO):
        groups = [t[: i + 1], t[i + 1 :]]
        weights = [len(g) / len(t) + 0.5 * float(g[-1] - g[0]) / span for g in groups]
        first = (1 - CUT) * weights[0] / sum(weights)
        first = min(max(first, PIECE), 1 - CUT - PIECE)  # room for each group's margins
        widths = (first, 1 - CUT - first)
        (a, b), (c, d) = (_padded(g, w) for g, w in zip(groups, widths, strict=True))
        return XAxis(True, (a, b, c, d), (0.0, first, first + CUT, 1.0))
    pad = 0.06 * span
    return XAxis(True, (float(t[0]) - pad, float(t[-1]) + pad), (0.0, 1.0))


def _padded(t: np.ndarray, width: float = 1.0) -> tuple[float, float]:
    """The piece of the axis for the sorted values ``t``, padded to keep ``MARGIN`` if it can."""
    s = float(t[-1] - t[0])
    pad = max(0.1 * s, 0.012)
    if s > 0 and width > 2 * MARGIN:
        pad = max(pad, MARGIN * s / (width - 2 * MARGIN))
    elif s > 0:
        pad = max(pad, s)
    return float(t[0]) - pad, float(t[-1]) + pad


def apply(ax: Axes, axis: XAxis) -> None:
    """Put ``axis`` on ``ax``, the cut shaded; its ticks wait for the layout (``fit_ticks``)."""
    ax.set_xscale("function", functions=(axis.forward, axis.inverse))
    ax.set_xlim(*axis.limits)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: label(v)))
    ax.xaxis.set_minor_locator(NullLocator())
    fig = ax.get_figure()
    assert isinstance(fig, Figure)
    width = 0.8 * ax.get_position().width * fig.get_figwidth() * 72  # for now
    ax.xaxis.set_major_locator(FixedLocator(axis.ticks(width)))
    _AXES[ax] = axis
    if (cut := axis.cut) is not None:
        ax.axvspan(*cut, color="0.93", lw=0, zorder=0)
        for u in axis.at[1:3]:  # a slash across the axis line at each edge of the cut
            xs, ys = [u - 0.008, u + 0.008], [-0.025, 0.025]
            ax.plot(xs, ys, transform=ax.transAxes, color="black", lw=1, clip_on=False, zorder=5)


def fit_ticks(fig: Figure) -> None:
    """The ticks of every plane axis of ``fig``, fitted to its width once laid out."""
    fig.draw_without_rendering()
    for ax in fig.axes:
        if (axis := _AXES.pop(ax, None)) is not None:
            width = ax.get_window_extent().width * 72 / fig.dpi
            ax.xaxis.set_major_locator(FixedLocator(axis.ticks(width)))
