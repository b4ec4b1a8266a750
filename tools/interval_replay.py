"""Do the costs' 95% intervals keep their promise on stored lines? The A/A comparisons and the
true-null mode pairs of runs, replayed through the current interval and the stated one.

    python tools/interval_replay.py RUN_DIR [RUN_DIR...]

For each run, and for all together, per rule: the comparisons, how many show a cost that is not
there (a 95% interval excluding 1: a false cost) and the median relative half-width; first the
A/A comparisons (copy 1 of the baseline against copy 0 in the paired design, one per workload
over its replicates), then the true-null mode pairs.

**The stated rule ("a process floor"), fixed before it was replayed** (docs/measured.md,
"Intervals that hold on the GPU's own rounds"):

1. The point estimate is unchanged: the geometric mean over processes of each process's median
   per-round ratio.
2. Two or more processes: unchanged, the Kalibera-Jones t-interval on the process medians with
   P - 1 degrees of freedom; the process level is measured there.
3. One process: the process level is not measured, so it is taken as one round. With the n log
   ratios l of its rounds (n >= 6) and their robust spread s = 1.4826 * median(|l - median(l)|),
   the estimate's variance is s^2 * (k^2 + pi / (2n)), k = 1; the interval is
   exp(median(l) +- t(n - 1) * s * sqrt(1 + pi / (2n))) (t(n - 1): Student's 97.5% quantile),
   joined with today's distribution-free interval of the median, so never narrower than it.
   The draws use that standard error and n - 1 degrees of freedom. s = 0: today's interval.
4. k = 1 is fixed: a round figure at the top of the 0.4-1.4 rounds' spreads that the 108
   two-replicate costs of the H200 core run put the process level at; not fitted to the A/A
   comparisons, which are the test.
5. The interval says what it rests on: one process, "1 replicate, n rounds: the process level
   assumed at one round's spread (k = 1), not measured"; P, "P replicates, N rounds: the
   process level measured (t, P - 1 degrees of freedom)".
6. Read on the separate design (replay only; ``stats.ratio`` is not changed): one replicate,
   l = the log of the ratio of the two records' medians, s_B and s_M the MAD spreads of their
   log samples (n_B, n_M samples), variance s_B^2 (k^2 + pi/(2 n_B)) + s_M^2 (k^2 + pi/(2 n_M)),
   t with n_B + n_M - 2 degrees of freedom, joined with ``stats.ratio``'s interval; two or more
   replicates, ``stats.ratio`` as it is.

**True-null mode pairs** (the same computation on the GPU where the bits say so): on a workload
where disabling cuDNN leaves the bits unchanged (the cuDNN-off mode's fingerprint equals its
anchor's in every replicate that has both), each mode that differs from the anchor (``default``,
or ``det-algos`` for the deterministic family) only in cuDNN switches and has the anchor's
fingerprint in the same replicate. ``det-algos`` against ``default`` is never one (its cuBLAS
workspace can change the kernels). The bmm suite has no op with a cuDNN path at all; elsewhere
identical bits are evidence, not proof, and the pairs are counted apart.

After its replay (1 of 33 A/A comparisons false on the H200 core run, against 5) the rule was
adopted in ``paired_costs.kalibera_jones``: "stated" is that estimator, "current" the same with
``floor=None`` (the estimator before it). Item 6 stays a replay: ``stats.ratio`` is unchanged.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy import stats as sps  # noqa: E402

from detbench.analysis import paired_costs, pairs, stats  # noqa: E402
from detbench.analysis.aa import CUDNN_SWITCHES  # noqa: E402
from detbench.analysis.cost_intervals import replicate_samples  # noqa: E402
from detbench.analysis.labels import counted, mode_of  # noqa: E402
from detbench.core.modes import Mode  # noqa: E402
from detbench.store.paired import load_paired  # noqa: E402
from detbench.store.results import load_results  # noqa: E402
from detbench.store.schema import Status  # noqa: E402

#: The process level a one-process interval assumes, in rounds' robust spreads (rule, item 4):
#: adopted in ``paired_costs``, whose constant this is.
K = paired_costs.PROCESS_FLOOR
#: The anchors of the true-null pairs: the baseline, and the deterministic family's own.
ANCHORS = ("default", "det-algos")
#: Suites whose ops have no cuDNN path at all: their true-null pairs need no evidence but the
#: switches; elsewhere identical bits are the evidence.
NO_CUDNN_SUITES = frozenset({"bmm"})
RULES = ("current", "stated")
#: (point, low, high) of a ratio.
Interval = tuple[float, float, float]


def _hull(center: float, var: float, dof: int, base: Interval) -> Interval:
    """``base`` (point, low, high) joined with exp(center +- t(dof) * sqrt(var)): the smallest
    interval holding both; ``base``'s point."""
    q = float(sps.t.ppf((1 + paired_costs.CONFIDENCE) / 2, max(dof, 1)))
    half = q * math.sqrt(var)
    point, low, high = base
    return point, min(low, math.exp(center - half)), max(high, math.exp(center + half))


def paired_interval(p: pairs.Paired, rule: str) -> Interval:
    """A paired comparison's (point, low, high) under ``rule``: "current" is
    ``paired_costs.kalibera_jones`` without its process floor (the estimator before the floor was
    adopted), "stated" with it (module docstring, item 3; adopted in ``paired_costs``)."""
    floor = None if rule == "current" else K
    point, low, high, _, _ = paired_costs.kalibera_jones(p, floor=floor)
    return point, low, high


def separate_interval(
    mode: Sequence[np.ndarray], base: Sequence[np.ndarray], name: str, rule: str
) -> Interval:
    """A separate-design comparison's (point, low, high): ``stats.ratio`` of the records' own
    samples ("current"); "stated" joins it, with one replicate, with the floor read on two
    unpaired records (module docstring, item 6)."""
    r = stats.ratio(mode, base, name)
    if rule == "current" or len(mode) != 1 or len(base) != 1 or not np.isfinite(r.low):
        return r.point, r.low, r.high
    lm, lb = np.log(np.asarray(mode[0], dtype=float)), np.log(np.asarray(base[0], dtype=float))
    var = sum(
        paired_costs.robust_spread(x) ** 2 * (K * K + math.pi / (2 * len(x))) for x in (lm, lb)
    )
    center = float(np.median(lb) - np.median(lm))  # throughput of mode over base
    return _hull(center, var, len(lm) + len(lb) - 2, (r.point, r.low, r.high))


def rests_on(processes: int, rounds: int) -> str:
    """What an interval of the stated rule rests on (module docstring, item 5)."""
    return paired_costs.rests_on(processes, rounds, K)


# --- the comparisons ----------------------------------------------------------------------------


@dataclass(frozen=True)
class TrueNull:
    """A mode that is the anchor's computation on a workload (module docstring), with the
    replicates whose bits agree."""

    suite: str
    workload: str
    anchor: str
    mode: str
    replicates: tuple[int, ...]

    @property
    def evidence(self) -> str:
        return "no cuDNN path" if self.suite in NO_CUDNN_SUITES else "bits only"


def _cudnn_twin(m: Mode, anchor: Mode) -> bool:
    """``m`` differs from ``anchor`` only in cuDNN switches (and in at least one)."""
    differ = set(m.changes()) ^ set(anchor.changes())
    return bool(differ) and differ <= CUDNN_SWITCHES and m.settings == anchor.settings


def true_nulls(df: pd.DataFrame) -> Iterator[TrueNull]:
    """The true-null mode pairs of the records ``df`` (``load_results``): per workload and
    anchor whose cuDNN-off twin has the anchor's bits in every replicate with both, each cuDNN
    twin of the anchor with the anchor's fingerprint, in the replicates where it has it."""
    ok = counted(df)
    ok = ok[(ok["status"] == Status.OK) & ok["fingerprint"].notna()]
    labels = {str(m): mode_of(str(m)) for m in dict.fromkeys(ok["mode"])}
    for (suite, workload), g in ok.groupby(["suite", "workload"], sort=False):
        bits = {
            (str(m), int(r)): str(f)
            for m, r, f in zip(g["mode"], g["replicate"], g["fingerprint"], strict=True)
        }
        for anchor_label in ANCHORS:
            anchor = labels.get(anchor_label)
            if anchor is None:
                continue
            twins = {
                name: m for name, m in labels.items() if m is not None and _cudnn_twin(m, anchor)
            }
            off = [name for name, m in twins.items() if not m.cudnn_enabled]
            reps = sorted(r for (m, r) in bits if m == anchor_label)
            both = [r for r in reps if off and (off[0], r) in bits]
            if not both or any(bits[(off[0], r)] != bits[(anchor_label, r)] for r in both):
                continue  # the bits do not say cuDNN is unused here
            for label in twins:
                same = tuple(r for r in reps if bits.get((label, r)) == bits[(anchor_label, r)])
                if same:
                    yield TrueNull(str(suite), str(workload), anchor_label, label, same)


def _row(
    run: str,
    kind: str,
    suite: Any,
    workload: Any,
    mode: str,
    anchor: str,
    evidence: str,
    processes: int,
    rounds: int,
    rule: str,
    got: Interval,
) -> dict[str, Any]:
    point, low, high = got
    return {
        "run": run,
        "kind": kind,
        "suite": suite,
        "workload": workload,
        "mode": mode,
        "anchor": anchor,
        "evidence": evidence,
        "processes": processes,
        "rounds": rounds,
        "rule": rule,
        "point": point,
        "low": low,
        "high": high,
        "false": not stats.within_noise(low, high),
        "half_width": paired_costs.half_width(point, low, high),
        "rests_on": rests_on(processes, rounds),
    }


def comparisons(directory: Path) -> pd.DataFrame:
    """Every A/A comparison and true-null pair of one run, under each rule: one row each, with
    its interval, whether it is false and its half-width. Comparisons with no interval (one
    process of fewer than 6 rounds) are left out."""
    run = directory.name
    df = load_results(directory)
    lines = load_paired(directory)
    rows = []
    for suite, workload, p in paired_costs.aa_pairs(lines) if len(lines) else []:
        for rule in RULES:
            got = paired_interval(p, rule)
            rows.append(
                _row(
                    run,
                    "A/A",
                    suite,
                    workload,
                    "copy 1",
                    "copy 0",
                    "same settings",
                    p.processes,
                    p.rounds,
                    rule,
                    got,
                )
            )
    for t in true_nulls(df):
        if len(lines):
            g = lines[
                (lines["suite"] == t.suite)
                & (lines["workload"] == t.workload)
                & (lines["copy"] == 0)
                & lines["replicate"].isin(t.replicates)
            ]
            p = pairs.pair(
                pairs.side_from_lines(g[g["mode"] == t.anchor]),
                pairs.side_from_lines(g[g["mode"] == t.mode]),
            )
            if not p.rounds:
                continue
            processes, rounds = p.processes, p.rounds
            intervals = {rule: paired_interval(p, rule) for rule in RULES}
        else:
            g = df[
                (df["suite"] == t.suite)
                & (df["workload"] == t.workload)
                & df["replicate"].isin(t.replicates)
            ]
            mode, base = (
                replicate_samples(g[g["mode"] == t.mode]),
                replicate_samples(g[g["mode"] == t.anchor]),
            )
            if not mode or not base:
                continue
            name = stats.comparison_key(t.suite, t.workload, t.mode, t.anchor)
            processes = min(len(mode), len(base))
            rounds = sum(map(len, mode)) + sum(map(len, base))
            intervals = {rule: separate_interval(mode, base, name, rule) for rule in RULES}
        for rule in RULES:
            rows.append(
                _row(
                    run,
                    "true null",
                    t.suite,
                    t.workload,
                    t.mode,
                    t.anchor,
                    t.evidence,
                    processes,
                    rounds,
                    rule,
                    intervals[rule],
                )
            )
    out = pd.DataFrame(rows)
    if len(out):
        out = out[np.isfinite(out["low"].astype(float)) & np.isfinite(out["high"].astype(float))]
    return out


def summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (kind, rule): comparisons, false ones, their share, the median half-width, and the
    comparisons and false ones on one replicate."""
    out = []
    for (kind, rule), g in rows.groupby(["kind", "rule"], sort=False):
        one = g[g["processes"] == 1]
        out.append(
            {
                "kind": kind,
                "rule": rule,
                "comparisons": len(g),
                "false": int(g["false"].sum()),
                "false_share": float(g["false"].mean()),
                "median_half_width": float(np.median(g["half_width"].astype(float))),
                "one_replicate": len(one),
                "one_replicate_false": int(one["false"].sum()),
            }
        )
    return pd.DataFrame(out)


def _line(s: pd.Series, label: str = "") -> str:
    """One rule's figures: false ones of the comparisons, the share, the median half-width."""
    one = (
        f"; one replicate: {s['one_replicate_false']} of {s['one_replicate']}"
        if s["one_replicate"]
        else ""
    )
    return (
        f"    {label + s['rule']:<24} {s['false']:>3} of {s['comparisons']:>3} false "
        f"({100 * s['false_share']:4.1f}%); median half-width "
        f"{100 * s['median_half_width']:5.1f}%{one}"
    )


def report(rows: pd.DataFrame, title: str) -> list[str]:
    """The lines of one run (or of all): per kind of comparison, each rule's figures (for the
    true-null pairs, also by their evidence)."""
    out = [title]
    if rows.empty:
        return [*out, "  no A/A comparison and no true-null pair"]
    for kind, g in rows.groupby("kind", sort=False):
        n = int((g["rule"] == "current").sum())
        what = (
            "A/A comparisons (copy 1 of the baseline against copy 0)"
            if kind == "A/A"
            else "true-null mode pairs (the same computation where the bits say so)"
        )
        out.append(f"  {what}: {n}")
        out += [_line(s) for _, s in summary(g).iterrows()]
        if kind == "true null" and g["evidence"].nunique() > 1:
            for evidence, e in g.groupby("evidence", sort=False):
                out += [_line(s, f"{evidence}, ") for _, s in summary(e).iterrows()]
    one = rows[(rows["rule"] == "stated") & (rows["processes"] == 1)]
    if len(one):
        out.append(
            f"  {len(one)} of {int((rows['rule'] == 'stated').sum())} rest on one replicate: "
            "the stated interval assumes the process level at one round's spread "
            f"(k = {K:g}), not measured"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", type=Path, nargs="+", metavar="RUN_DIR", help="a results directory")
    args = ap.parse_args(argv)
    every = []
    for directory in args.dirs:
        rows = comparisons(directory)
        every.append(rows)
        design = "paired" if (directory / "paired.jsonl").exists() else "separate"
        print("\n".join(report(rows, f"{directory} ({design} design)")))
    if len(args.dirs) > 1:
        print("\n".join(report(pd.concat(every, ignore_index=True), "all runs together")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
