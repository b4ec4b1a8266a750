"""Names beside points that never cover each other: once the layout is settled (``place``), each
label takes the cheapest place near its point, with a leader line where it is away from it."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.text import Annotation, Text

#: A box: x0, y0, x1, y1 in pixels.
Box = tuple[float, float, float, float]
#: A leader line: from its point to its label's centre, in pixels.
Segment = tuple[tuple[float, float], tuple[float, float]]
#: What a leader line that crosses another, or a label, costs, in pixels of distance.
CROSSING = 60.0
#: What a label over another's leader line costs: it would hide whose label is whose.
HIDING = 250.0
#: What a label next to another point costs.
CROWD = 25.0
#: Orders of the labels tried; the cheapest layout is kept.
TRIES = 16
#: Points between a label and its point, or between two labels.
GAP = 1.5
#: Lanes above and below a point that a label may take.
LANES = 14


@dataclass
class _Label:
    text: Annotation
    xy: tuple[float, float]
    radius: float  # the point's marker, in points


#: The labels each axes still has to place.
_PENDING: WeakKeyDictionary[Axes, list[_Label]] = WeakKeyDictionary()


def add(ax: Axes, xy: tuple[float, float], text: str, radius: float, **kw: object) -> Annotation:
    """A label for the point ``xy`` of ``ax`` (``radius``: its marker's, in points)."""
    arrow = {"arrowstyle": "-", "lw": 0.5, "color": "0.5", "shrinkA": 0, "shrinkB": radius + 1}
    a = ax.annotate(
        text,
        xy,
        xytext=(0, 0),
        textcoords="offset points",
        ha="center",
        va="center",
        bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.85},
        arrowprops=arrow,
        zorder=6,
        **kw,  # type: ignore[arg-type]
    )
    a.set_in_layout(False)  # a label must not squeeze the axes
    _PENDING.setdefault(ax, []).append(_Label(a, xy, radius))
    return a


def place(fig: Figure) -> None:
    """Place the pending labels of every axes of ``fig`` (after settling its layout)."""
    fig.draw_without_rendering()
    for ax in fig.axes:
        if labels := _PENDING.pop(ax, []):
            _place_axes(ax, labels, fig.dpi / 72)


@dataclass(frozen=True)
class _Item:
    x: float
    y: float
    marker: Box
    w: float
    h: float
    r: float  # the marker's radius


def _place_axes(ax: Axes, labels: list[_Label], px: float) -> None:
    """The labels of one axes, in the cheapest of several orders (shuffled with a fixed seed)."""
    frame = ax.get_window_extent()
    inside: Box = (frame.x0 + 2, frame.y0 + 2, frame.x1 - 2, frame.y1 - 2)
    items = []
    for lab in labels:
        x, y = (float(v) for v in ax.transData.transform(lab.xy))
        r = (lab.radius + 1) * px
        ext = Text.get_window_extent(lab.text)  # the words (an annotation's adds its line)
        box = (x - r, y - r, x + r, y + r)
        items.append(_Item(x, y, box, ext.width + 2 * px, ext.height + 2 * px, lab.radius * px))
    rng = random.Random(0)
    orders = [list(range(len(items)))]
    for _ in range(TRIES - 1):  # the first label (the recommended mode's) keeps its place
        orders.append(orders[0][:1] + rng.sample(orders[0][1:], len(items) - 1))
    best = min((_layout(items, order, inside, px) for order in orders), key=lambda x: x[0])
    for i, (lab, it) in enumerate(zip(labels, items, strict=True)):
        box = best[1][i]
        cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
        lab.text.xyann = ((cx - it.x) / px, (cy - it.y) / px)
        if lab.text.arrow_patch is not None:  # a leader line where the label is away
            lab.text.arrow_patch.set_visible(_distance(box, it.x, it.y) > _near(it, px))


def _near(it: _Item, px: float) -> float:
    """How far a label may be from its point without a leader line, in pixels."""
    return it.r + 3 * GAP * px


def _layout(
    items: list[_Item], order: list[int], inside: Box, px: float
) -> tuple[float, dict[int, Box]]:
    """Each label in ``order`` at its cheapest place given those before it: (cost, boxes)."""
    markers = [it.marker for it in items]
    placed: list[Box] = []
    leaders: list[Segment] = []
    boxes: dict[int, Box] = {}
    total = 0.0
    for k in order:
        it = items[k]
        others = markers[:k] + markers[k + 1 :]
        best: tuple[float, Box] | None = None
        near = []  # each place moved inside the axes, with its distance, nearest first
        for cx, cy in _candidates(it.x, it.y, it.w, it.h, it.r, GAP * px):
            box = _inside((cx - it.w / 2, cy - it.h / 2, cx + it.w / 2, cy + it.h / 2), inside)
            centre = ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)
            near.append((abs(centre[0] - it.x) + abs(centre[1] - it.y), box, centre))
        for distance, box, centre in sorted(near, key=lambda c: c[0]):
            if best is not None and distance >= best[0]:
                break  # no place further away can cost less
            cost = sum(_overlap(box, b) for b in placed + markers) * 1e6
            # Hugging another point takes the place its own label wants.
            cost += CROWD * sum(_overlap(_grown(box, 6 * px), m) > 0 for m in others)
            cost += HIDING * sum(_through(other, box) for other in leaders)
            if _distance(box, it.x, it.y) > _near(it, px):  # a leader line: crossing nothing
                line = ((it.x, it.y), centre)
                cost += CROSSING * sum(_crosses(line, other) for other in leaders)
                cost += HIDING * sum(_through(line, b) for b in placed)
            score = cost + distance
            if best is None or score < best[0]:
                best = (score, box)
        assert best is not None
        score, box = best
        total += score
        placed.append(box)
        boxes[k] = box
        if _distance(box, it.x, it.y) > _near(it, px):
            leaders.append(((it.x, it.y), ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)))
    return total, boxes


def _candidates(
    x: float, y: float, w: float, h: float, r: float, gap: float
) -> Iterator[tuple[float, float]]:
    """Places for a label's centre, nearest first."""
    side = r + gap + w / 2
    up = r + gap + h / 2
    yield from ((x + side, y), (x - side, y), (x, y + up), (x, y - up))
    for k in range(LANES):
        for sign in (1, -1):
            cy = y + sign * (up + k * (h + gap))
            for dx in (0.0, w / 2 + r, -w / 2 - r, w, -w):
                yield x + dx, cy


def _inside(box: Box, frame: Box) -> Box:
    """``box`` moved inside ``frame`` (as far as it fits)."""
    x0, y0, x1, y1 = box
    dx = max(frame[0] - x0, 0.0) - max(x1 - frame[2], 0.0)
    dy = max(frame[1] - y0, 0.0) - max(y1 - frame[3], 0.0)
    return x0 + dx, y0 + dy, x1 + dx, y1 + dy


def _grown(box: Box, by: float) -> Box:
    return box[0] - by, box[1] - by, box[2] + by, box[3] + by


def _overlap(a: Box, b: Box) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else 0.0


def _distance(box: Box, x: float, y: float) -> float:
    dx = max(box[0] - x, 0.0, x - box[2])
    dy = max(box[1] - y, 0.0, y - box[3])
    return float((dx * dx + dy * dy) ** 0.5)


def _crosses(a: Segment, b: Segment) -> bool:
    """Whether two segments cross (touching ends do not count)."""

    def side(p: tuple[float, float], q: tuple[float, float], r: tuple[float, float]) -> float:
        return (q[0] - p[0]) * (r[1] - p[1]) - (q[1] - p[1]) * (r[0] - p[0])

    d1, d2 = side(b[0], b[1], a[0]), side(b[0], b[1], a[1])
    d3, d4 = side(a[0], a[1], b[0]), side(a[0], a[1], b[1])
    return d1 * d2 < 0 and d3 * d4 < 0


def _through(line: Segment, box: Box) -> bool:
    """Whether a leader line passes through ``box`` (sampled along its length)."""
    (x0, y0), (x1, y1) = line
    return any(
        box[0] < x0 + (x1 - x0) * t < box[2] and box[1] < y0 + (y1 - y0) * t < box[3]
        for t in (0.1, 0.25, 0.4, 0.55, 0.7, 0.85)
    )
