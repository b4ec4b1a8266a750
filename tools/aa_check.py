"""Whether a run's costs can be cited: the A/A check of its paired costs, and where the variance
of a cost sits.

    python tools/aa_check.py DIR

A mode against itself must show no cost. The paired design has an A/A comparison in every run:
a second worker of the baseline's settings, timed in the same rounds. On a CPU, the modes that
differ from the baseline only in cuDNN switches, which act on nothing there, are the same
computation: A/A comparisons too (the "cuDNN twins"). How many workloads show a cost that is not
there (a 95% interval that excludes 1), and how wide the intervals are (their median
half-width); then the variance of the paired log ratios split between rounds, processes and
time. The figures are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from detbench.analysis import aa, paired_costs, pairs, stats, variance  # noqa: E402
from detbench.analysis.labels import baseline_mode  # noqa: E402
from detbench.store.paired import load_paired  # noqa: E402
from detbench.store.results import load_results  # noqa: E402

#: What a round and a process cost (seconds), for Kalibera and Jones's choice of repetitions: a
#: round is a block of every worker of a group (11 x about 9 ms at quick), a process a group's
#: start-up on the 2-core VM (about 12 s for 11 workers) spread over its 33 workloads, plus its
#: preparation of one workload.
ROUND_SECONDS = 0.1
PROCESS_SECONDS = 0.5


def _row(name: str, t: pd.DataFrame) -> str:
    """One kind of A/A comparison's figures: comparisons, false costs, workloads with one,
    half-widths."""
    if t.empty:
        return f"  {name:<34} no comparisons"
    s = aa.summary(t)
    return (
        f"  {name:<34} {s['false_costs']:>3} of {s['comparisons']:>3} comparisons false "
        f"({100 * s['false_share']:4.1f}%), in {s['false_workloads']} of {s['workloads']} "
        f"workloads; median half-width {100 * s['median_half_width']:5.1f}%"
    )


def _twins_paired(lines: pd.DataFrame, df: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """The paired design's cuDNN twins (the same computation on a CPU), as A/A comparisons."""
    rows = []
    for (suite, workload), g in lines.groupby(["suite", "workload"], sort=False):
        base = pairs.side_from_lines(g[(g["mode"] == baseline) & (g["copy"] == 0)])
        for mode in aa.twins(df, baseline):
            p = pairs.pair(base, pairs.side_from_lines(g[(g["mode"] == mode) & (g["copy"] == 0)]))
            if not p.rounds:
                continue
            r = paired_costs.ratio(p, stats.comparison_key(suite, workload, mode, baseline))
            row = paired_costs.row(suite, workload, mode, p, r)
            rows.append({**row, "design": "paired", "false_cost": r.significant})
    return pd.DataFrame(rows, columns=list(aa.COLUMNS))


def _all_paired(lines: pd.DataFrame, baseline: str) -> list[tuple[str, float]]:
    """(mode, half-width) of every paired cost of the run, copy 0 against the baseline's."""
    out = []
    for (suite, workload), g in lines.groupby(["suite", "workload"], sort=False):
        base = pairs.side_from_lines(g[(g["mode"] == baseline) & (g["copy"] == 0)])
        for mode, m in g[g["copy"] == 0].groupby("mode", sort=False):
            if mode == baseline:
                continue
            p = pairs.pair(base, pairs.side_from_lines(m))
            if p.rounds:
                r = paired_costs.ratio(p, stats.comparison_key(suite, workload, mode, baseline))
                if np.isfinite(r.low):
                    out.append((str(mode), paired_costs.half_width(r.point, r.low, r.high)))
    return out


def report(directory: Path) -> str:
    """The paired A/A figures, the paired costs' widths and the variance split, as lines."""
    df, lines = load_results(directory), load_paired(directory)
    baseline = str(baseline_mode(df["mode"]))
    out = [f"{directory}: {len(df)} records, {len(lines)} paired lines; baseline {baseline}"]
    out.append("A/A: a cost that is not there (a 95% interval excluding 1)")
    copy = aa.paired(lines) if len(lines) else pd.DataFrame(columns=list(aa.COLUMNS))
    twin_p = _twins_paired(lines, df, baseline) if len(lines) else copy.iloc[0:0]
    out.append(_row("paired, A/A worker (copy 1)", copy))
    out.append(_row("paired, cuDNN twins (CPU)", twin_p))
    out.append(_row("paired, both", pd.concat([copy, twin_p])))
    widths = _all_paired(lines, baseline) if len(lines) else []
    if widths:
        hw = np.array([w for _, w in widths])
        out.append(
            f"paired costs: {len(hw)} (workload, mode); 95% interval within +-1%: "
            f"{100 * np.mean(hw <= 0.01):.0f}%, within +-5%: {100 * np.mean(hw <= 0.05):.0f}%; "
            f"median half-width {100 * np.median(hw):.1f}%"
        )
    out += _variance_lines(lines)
    return "\n".join(out)


def _variance_lines(lines: pd.DataFrame) -> list[str]:
    """Where the variance sits: the paired A/A log ratios split between rounds, processes and
    time (medians over workloads, as relative spreads), what limits the intervals, and Kalibera
    and Jones's repetitions."""
    out = []
    splits = [variance.split(p) for _, _, p in paired_costs.aa_pairs(lines)] if len(lines) else []
    if splits:

        def rel(values: list[float]) -> str:
            v = [x for x in values if np.isfinite(x)]
            return (
                f"{100 * math.expm1(math.sqrt(max(float(np.median(v)), 0.0))):.2f}%" if v else "n/a"
            )

        limits = pd.Series([s.limited_by for s in splits]).value_counts().to_dict()
        out.append(
            "paired A/A variance (median over workloads, as a relative spread): rounds "
            f"{rel([s.rounds for s in splits])}, processes {rel([s.processes for s in splits])}, "
            f"time {rel([s.time for s in splits])}; intervals limited by {limits}"
        )
        per = [
            variance.repetitions(s, c_round=ROUND_SECONDS, c_process=PROCESS_SECONDS)
            for s in splits
        ]
        got = [r for r in per if r is not None]
        if got:
            out.append(
                "Kalibera-Jones, a round costing ~"
                f"{ROUND_SECONDS:g} s and a process ~{PROCESS_SECONDS:g} s: rounds per process "
                f"{int(np.median([r.rounds for r in got]))} (median), processes for +-1% "
                f"{int(np.median([r.processes for r in got]))} (median)"
            )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", type=Path, help="a results directory")
    args = p.parse_args(argv)
    print(report(args.dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
