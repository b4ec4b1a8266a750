"""Which mode to use, per workload and per suite, and why (``RULE``). Whether a mode is
significantly faster than the simplest is ``cost_intervals.ratio`` of the one against the other (per
suite, ``stats.geometric_mean`` over its workloads): a direct comparison, not two intervals against
the baseline, each holding the baseline's own noise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from detbench.analysis import cause, stats
from detbench.analysis.cost_intervals import paired, ratio, replicate_samples
from detbench.analysis.labels import baseline_mode, mode_key, mode_of, run_device, simplicity_key
from detbench.analysis.matrix import (
    ONE_REPLICATE,
    RAN,
    ran_somewhere,
    relative_throughput,
    unjudged,
    verdicts,
)
from detbench.core import acts
from detbench.core import settings as st
from detbench.core.modes import get_mode

#: The flags of the 10 modes that only cuDNN reads: inert on a CPU (``acts.FLAG_DEVICES``).
CUDNN_FLAGS = tuple(f for f in st.MODE_FLAGS if not acts.acts_on(f, "cpu"))

#: The rule, in one sentence (the report and ``detbench run`` print it). Ties among the fewest
#: changes go by ``simplicity_key``; of the significantly faster modes, the fastest point wins.
RULE = (
    "the mode bitwise identical in every replicate that changes the fewest settings from "
    "torch's default, unless another such mode is significantly faster (the 95% interval of its "
    "throughput over the first's lies entirely above 1), so a difference within the noise never "
    "moves the choice; on a CPU, where the cuDNN flags act on nothing, a mode that changes one "
    "is the same computation as its twin without it and is never recommended; on a GPU, a mode "
    "with cudnn.benchmark is never recommended where cudnn.benchmark made another mode of the "
    "same workload nondeterministic, since its own agreement was the autotuner's luck"
)


def inert_changes(label: str, device: str | None) -> list[str]:
    """The changes of mode ``label`` that cannot act on ``device``: the cuDNN flags on a CPU (not
    an inert ``--set`` setting: every mode of the run has it)."""
    mode = mode_of(label)
    if mode is None or device != "cpu":
        return []
    return [name for name in mode.changes() if name in CUDNN_FLAGS]


def _changes(label: str) -> list[str] | None:
    mode = mode_of(label)
    return None if mode is None else mode.changes()


@dataclass(frozen=True)
class ThroughputRatio:
    """Throughput relative to the baseline: point estimate and 95% interval (None: none)."""

    point: float
    low: float | None = None
    high: float | None = None

    def text(self) -> str:
        if self.low is None or self.high is None:
            return f"{self.point:.2f}"
        return f"{self.point:.2f} [{self.low:.2f}, {self.high:.2f}]"


class _Throughput:
    """Point estimates and ratios of each (suite, workload, mode)'s throughput, computed once."""

    def __init__(self, df: pd.DataFrame, baseline: str, n_boot: int, seed: int) -> None:
        self.groups = {
            tuple(map(str, k)): g for k, g in df.groupby(["suite", "workload", "mode"], sort=False)
        }
        self.baseline, self.n_boot, self.seed = baseline, n_boot, seed
        self._reps: dict[tuple[str, ...], list[np.ndarray]] = {}
        self._ratio: dict[tuple[str, ...], stats.Ratio | None] = {}

    def reps(self, key: tuple[str, ...]) -> list[np.ndarray]:
        if key not in self._reps:
            g = self.groups.get(key)
            self._reps[key] = [] if g is None else replicate_samples(g)
        return self._reps[key]

    def base(self, suite: str, workload: str) -> float | None:
        reps = self.reps((suite, workload, self.baseline))
        return stats.median_throughput(reps) if reps else None

    def point(self, suite: str, workload: str, mode: str, fallback: Any) -> float:
        """From the timing samples; ``fallback`` (ratio of median items/s) without them."""
        reps, base = self.reps((suite, workload, mode)), self.base(suite, workload)
        if reps and base:
            a = self.groups.get((suite, workload, mode))
            b = self.groups.get((suite, workload, self.baseline))
            if a is not None and b is not None and paired(a, b):  # the pairs' own estimate
                r = self.ratio(suite, workload, mode)
                if r is not None:
                    return r.point
            return stats.median_throughput(reps) / base
        x = pd.to_numeric(pd.Series([fallback]), errors="coerce").iloc[0]
        return float(x) if pd.notna(x) else float("nan")

    def ratio(
        self, suite: str, workload: str, mode: str, against: str | None = None
    ) -> stats.Ratio | None:
        """``mode``'s throughput over ``against``'s (the baseline when None), ``stats.ratio``."""
        against = self.baseline if against is None else against
        key = (suite, workload, mode, against)
        if key not in self._ratio:
            reps, base_reps = self.reps(key[:3]), self.reps((suite, workload, against))
            if not reps or not base_reps or not stats.median_throughput(base_reps):
                self._ratio[key] = None
            else:
                name = stats.comparison_key(suite, workload, mode, against)
                a, b = self.groups[key[:3]], self.groups[(suite, workload, against)]
                self._ratio[key] = ratio(a, b, name, self.seed, self.n_boot)
        return self._ratio[key]


def _estimate(point: float, r: stats.Ratio | None) -> ThroughputRatio:
    if r is None or not np.isfinite(point):
        return ThroughputRatio(point)
    return ThroughputRatio(point, r.low, r.high)


Versus = Callable[[str, str], "stats.Ratio | None"]


def _choose(
    cands: list[tuple[str, float]],
    estimate: Callable[[str, float], ThroughputRatio],
    versus: Versus,
    baseline: str,
) -> tuple[str, ThroughputRatio, str, str]:
    """(pick, its estimate, why, the simplest mode) of ``cands`` ((label, point) in
    ``simplicity_key`` order) by ``RULE``; ``versus(label, simplest)`` is drawn only for modes
    whose point is above the simplest's, the only ones that can be significantly faster."""
    simplest, first = cands[0][0], estimate(*cands[0])
    faster: list[tuple[str, ThroughputRatio, stats.Ratio]] = []
    for label, point in cands[1:]:
        if not point > first.point:
            continue
        d = versus(label, simplest)
        if d is not None and d.low > 1.0:
            faster.append((label, estimate(label, point), d))
    if faster:
        label, e, d = min(faster, key=lambda x: -x[1].point)  # ties: the simplest of them
        why = (
            f"{label} is significantly faster than {simplest}: {e.text()} vs {first.text()} "
            f"(throughput relative to {baseline}"
            + (
                "; the 95% interval lies above 1)"
                if simplest == baseline
                else f"; {label} over {simplest} {d.point:.2f}, 95% interval {d.low:.2f} to "
                f"{d.high:.2f}, above 1)"
            )
        )
        return label, e, why, simplest
    changes = _changes(simplest) or []
    why = f"fewest changes from default ({len(changes)}" + (
        f": {', '.join(changes)})" if changes else ")"
    )
    if len(cands) > 1:
        others = len(cands) - 1
        why += (
            "; the other reproducible mode is not significantly faster"
            if others == 1
            else f"; none of the {others} other reproducible modes is significantly faster"
        )
    return simplest, first, why, simplest


def _row(
    suite: str,
    workload: str,
    cands: list[tuple[str, float]],
    estimate: Callable[[str, float], ThroughputRatio],
    versus: Versus,
    points: dict[str, float],
    baseline: str,
    none_why: str,
) -> dict[str, Any]:
    fast = {m: p for m, p in points.items() if np.isfinite(p)}
    fastest = min(fast, key=lambda m: (-fast[m], mode_key(m))) if fast else None
    row: dict[str, Any] = dict.fromkeys(_COLUMNS[:-1])  # every column but the snippet
    row.update(suite=suite, workload=workload, fastest_mode=fastest, reason=none_why)
    if not cands:
        return row
    mode, est, why, simplest = _choose(cands, estimate, versus, baseline)
    rel = est.point if np.isfinite(est.point) else None
    fastest_rel = fast.get(fastest) if fastest is not None else None
    row.update(
        mode=mode,
        relative_throughput=rel,
        ci_low=est.low,
        ci_high=est.high,
        reason=why,
        changes=_changes(mode),
        simplest=simplest,
        cost_vs_fastest=None if rel is None or not fastest_rel else 1.0 - rel / fastest_rel,
    )
    return row


def _none_why(excluded: list[str], scope: str) -> str:
    why = "no mode was bitwise reproducible" + (f" {scope}" if scope else "")
    if excluded:
        why += (
            f" but {', '.join(excluded)}, which "
            + ("changes" if len(excluded) == 1 else "change")
            + " cuDNN flags: on a CPU the same computation as a mode without them, never "
            "recommended"
        )
    return why


#: The columns of ``recommendations``, in order.
_COLUMNS = [
    "suite",
    "workload",
    "mode",
    "relative_throughput",
    "ci_low",
    "ci_high",
    "fastest_mode",
    "cost_vs_fastest",
    "changes",
    "reason",
    "simplest",
    "snippet",
]


def recommendations(
    df: pd.DataFrame,
    baseline: str | None = None,
    n_boot: int = stats.N_BOOT,
    seed: int = stats.SEED,
) -> pd.DataFrame:
    """Per workload, and per suite (workload ``*``): the recommended mode by ``RULE`` (None when
    none qualifies), its throughput against ``baseline``, the fastest mode, why, and the
    ``snippet`` that sets it. Per suite, a mode qualifies when it was reproducible for every
    workload that ran in some mode; its throughput is the geometric mean over them."""
    v = verdicts(df)
    if v.empty:
        return pd.DataFrame(columns=_COLUMNS, dtype=object)
    baseline = str(baseline if baseline is not None else baseline_mode(v["mode"]))
    device = run_device(df)
    v = v.assign(rel=relative_throughput(v, baseline))
    inert = {m: bool(inert_changes(m, device)) for m in dict.fromkeys(v["mode"])}
    v = v.assign(inert=v["mode"].map(inert).astype(bool))
    tp = _Throughput(df, baseline, n_boot, seed)
    drawn = cause.lottery(df, v)
    rows = _workload_rows(v, tp, drawn, baseline) + _suite_rows(v, tp, drawn, inert, baseline)
    out = pd.DataFrame(rows, dtype=object)  # keep None (no mode) as None, not NaN
    out["snippet"] = pd.Series(
        [None if m is None else get_mode(m).snippet() for m in out["mode"]],
        index=out.index,
        dtype=object,
    )
    return out[_COLUMNS]


def _workload_rows(
    v: pd.DataFrame, tp: _Throughput, drawn: set[tuple[str, str]], baseline: str
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for (suite, workload), g in v.groupby(["suite", "workload"], sort=False):
        s, w = str(suite), str(workload)
        ran = g[g["verdict"].isin(RAN) & ~g["inert"]]
        points = {str(r.mode): tp.point(s, w, str(r.mode), r.rel) for r in ran.itertuples()}
        repro = sorted(ran.loc[ran["verdict"] == "reproducible", "mode"], key=simplicity_key)
        repro = [m for m in repro if not cause.by_luck(drawn, s, str(m), [w])]

        def one(m: str, point: float, s: str = s, w: str = w) -> ThroughputRatio:
            return _estimate(point, tp.ratio(s, w, m))

        def versus(m: str, than: str, s: str = s, w: str = w) -> stats.Ratio | None:
            return tp.ratio(s, w, m, than)

        excluded = list(g.loc[(g["verdict"] == "reproducible") & g["inert"], "mode"])
        cands = [(m, points[m]) for m in repro]
        why = f"no verdict yet: {ONE_REPLICATE}" if unjudged(g) else _none_why(excluded, "")
        rows.append(_row(s, w, cands, one, versus, points, baseline, why))
    return rows


def _suite_rows(
    v: pd.DataFrame,
    tp: _Throughput,
    drawn: set[tuple[str, str]],
    inert: dict[str, bool],
    baseline: str,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for suite, g in v.groupby("suite", sort=False):
        s = str(suite)
        g = g[g["workload"].isin(ran_somewhere(g))]
        workloads = [str(w) for w in dict.fromkeys(g["workload"])]
        n = len(workloads)
        ran = g[g["verdict"].isin(RAN) & ~g["inert"]]
        everywhere = [m for m, k in ran.groupby("mode", sort=False).size().items() if k == n]
        points = {}
        for m in everywhere:
            rel = ran[ran["mode"] == m].set_index("workload")["rel"]
            each = [tp.point(s, w, str(m), rel.get(w)) for w in workloads]
            points[str(m)] = stats.geometric_mean_of(each) if n else float("nan")
        repro_counts = g[g["verdict"] == "reproducible"].groupby("mode", sort=False).size()
        repro = [str(m) for m, k in repro_counts.items() if k == n and n]

        def geo_versus(
            m: str, than: str, s: str = s, workloads: list[str] = workloads
        ) -> stats.Ratio | None:
            ratios = [r for r in (tp.ratio(s, w, m, than) for w in workloads) if r is not None]
            if not ratios or len(ratios) < len(workloads):
                return None
            return stats.geometric_mean(ratios)

        def geo(m: str, point: float, versus: Versus = geo_versus) -> ThroughputRatio:
            return _estimate(point, versus(m, tp.baseline))

        qualify = sorted(
            (m for m in repro if not inert[m] and not cause.by_luck(drawn, s, m, workloads)),
            key=simplicity_key,
        )
        cands = [(m, points.get(m, float("nan"))) for m in qualify]
        excluded = [m for m in repro if inert[m]]
        none_why = _none_why(excluded, "for every workload")
        open_ = unjudged(g)  # one replicate only: nothing known run to run
        if open_ and len(open_) == n:
            none_why = f"no verdict yet: every workload has {ONE_REPLICATE}"
        elif open_:
            none_why += f" ({len(open_)} of the {n} workloads have one replicate only)"
        if not n:  # a library the suite needs is missing, say: nothing to recommend from
            none_why = "no workload of the suite ran in any mode (unsupported or failed here)"
        rows.append(_row(s, "*", cands, geo, geo_versus, points, baseline, none_why))
    return rows
