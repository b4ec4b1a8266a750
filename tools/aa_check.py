"""Whether a run's costs can be cited: the A/A check of its paired costs, and where the variance
of a cost sits.

    python tools/aa_check.py DIR                      # any run
    python tools/aa_check.py --run OUT [--drift]      # make one: the CPU core matrix, quick
    python tools/aa_check.py DRIFT --against QUIET    # how far each design's costs moved

A mode against itself must show no cost. The paired design has an A/A comparison in every run:
a second worker of the baseline's settings, timed in the same rounds. On a CPU, the modes that
differ from the baseline only in cuDNN switches, which act on nothing there, are the same
computation: A/A comparisons too (the "cuDNN twins"). How many workloads show a cost that is not
there (a 95% interval that excludes 1), and how wide the intervals are (their median
half-width); then the variance of the paired log ratios split between rounds, processes and
time.

``--run OUT`` first runs ``detbench run --device cpu`` on the core suites (conv,
rnn, batchnorm, bmm, training; quick profile, 10 modes, 3 replicates) into OUT. ``--drift`` adds a
real drift: a second process that keeps one core busy starts halfway through each design's
timings (when half of the verdict records are in, and again when half of the paired groups are)
and stops when that design's timings end. The figures are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from detbench.analysis import aa, paired_costs, pairs, stats, variance  # noqa: E402
from detbench.analysis.cost_intervals import replicate_samples  # noqa: E402
from detbench.analysis.labels import baseline_mode  # noqa: E402
from detbench.store.paired import load_paired  # noqa: E402
from detbench.store.results import load_results  # noqa: E402

CORE = ("conv", "rnn", "batchnorm", "bmm", "training")
#: What a round and a process cost (seconds), for Kalibera and Jones's choice of repetitions: a
#: round is a block of every worker of a group (11 x about 9 ms at quick), a process a group's
#: start-up on the 2-core VM (about 12 s for 11 workers) spread over its 33 workloads, plus its
#: preparation of one workload.
ROUND_SECONDS = 0.1
PROCESS_SECONDS = 0.5
#: A process that keeps one core busy: a real load, not a mock of one.
BUSY = "import time\nwhile True:\n    pass\n"


def _lines(path: Path) -> int:
    return sum(1 for _ in path.open()) if path.exists() else 0


class Drift:
    """A busy process that starts halfway through each design's timings and stops at their end:
    the records' half of the verdicts (the separate design times inside them), then the paired
    groups' half. Polled from the run's files."""

    def __init__(self, out: Path, records: int, groups: int, workers: int) -> None:
        self.out, self.records, self.groups, self.workers = out, records, groups, workers
        self.busy: subprocess.Popen[bytes] | None = None
        self.log: list[tuple[float, str]] = []

    def _set(self, on: bool, why: str) -> None:
        if on and self.busy is None:
            self.busy = subprocess.Popen([sys.executable, "-c", BUSY])
            self.log.append((time.time(), f"load on: {why}"))
        elif not on and self.busy is not None:
            self.busy.kill()
            self.busy.wait()
            self.busy = None
            self.log.append((time.time(), f"load off: {why}"))

    def poll(self) -> None:
        records = _lines(self.out / "results.jsonl")
        groups = _lines(self.out / "paired.jsonl") // self.workers
        if groups:
            self._set(groups >= self.groups // 2, f"{groups} of {self.groups} paired groups")
        elif records < self.records:
            self._set(records >= self.records // 2, f"{records} of {self.records} records")
        else:
            self._set(False, "the verdict phase's timings are over")

    def stop(self) -> None:
        self._set(False, "the run ended")


def run(out: Path, drift: bool) -> None:
    """``detbench run`` of the CPU core matrix into ``out``, as a user runs it."""
    cmd = [sys.executable, "-m", "detbench", "run", "--device", "cpu"]
    for s in CORE:
        cmd += ["--suite", s]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    watch = None
    if drift:  # the plan first: the records and groups whose halves start the load
        dry = [*cmd, "--out", f"{out}.plan", "--dry-run", "--json"]
        got = subprocess.run(dry, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
        plan = json.loads(got.stdout)
        paired = plan["paired"]
        watch = Drift(out, int(plan["records"]), paired["groups"], paired["workers_per_group"])
    proc = subprocess.Popen([*cmd, "--out", str(out), "--no-report"], cwd=ROOT, env=env)
    try:
        while proc.poll() is None:
            if watch is not None:
                watch.poll()
            time.sleep(0.2)
    finally:
        if watch is not None:
            watch.stop()
            (out / "drift.json").write_text(json.dumps(watch.log, indent=1) + "\n")
    if proc.returncode:
        raise SystemExit(f"aa_check: the run failed (exit {proc.returncode})")


def _row(name: str, t: pd.DataFrame) -> str:
    """One design's A/A figures: comparisons, false costs, workloads with one, half-widths."""
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


def _costs(directory: Path, design: str) -> dict[tuple[str, str, str], tuple[float, float, float]]:
    """(suite, workload, mode) -> (point, low, high) of every cost against the baseline, in one
    design: the paired lines (copy 0), or the records' own timings (separate)."""
    out = {}
    if design == "paired":
        lines = load_paired(directory)
        base_mode = str(baseline_mode(lines["mode"]))
        for (s, w), g in lines.groupby(["suite", "workload"], sort=False):
            base = pairs.side_from_lines(g[(g["mode"] == base_mode) & (g["copy"] == 0)])
            for m, gm in g[g["copy"] == 0].groupby("mode", sort=False):
                p = pairs.pair(base, pairs.side_from_lines(gm))
                if m != base_mode and p.rounds:
                    r = paired_costs.ratio(p, stats.comparison_key(s, w, m, base_mode))
                    out[(str(s), str(w), str(m))] = (r.point, r.low, r.high)
        return out
    df = load_results(directory)
    df = df[~df["timing"].map(pairs.is_paired)]
    base_mode = str(baseline_mode(df["mode"]))
    for (s, w), g in df.groupby(["suite", "workload"], sort=False):
        base = replicate_samples(g[g["mode"] == base_mode])
        for m, gm in g.groupby("mode", sort=False):
            reps = replicate_samples(gm)
            if m != base_mode and reps and base:
                r = stats.ratio(reps, base, stats.comparison_key(s, w, m, base_mode))
                out[(str(s), str(w), str(m))] = (r.point, r.low, r.high)
    return out


def against(directory: Path, quiet: Path) -> str:
    """How far each design's costs moved between a quiet run and ``directory`` (a drift run):
    the share of the drift run's points inside the quiet run's intervals, and the median move."""
    out = [f"costs of {directory} against those of {quiet}, per design"]
    for design in ("paired", "separate"):
        a, b = _costs(quiet, design), _costs(directory, design)
        keys = sorted(set(a) & set(b))
        if not keys:
            out.append(f"  {design}: no cost in both runs")
            continue
        inside = sum(a[k][1] <= b[k][0] <= a[k][2] for k in keys)
        moved = float(np.median([abs(math.log(b[k][0] / a[k][0])) for k in keys]))
        out.append(
            f"  {design:<9} {len(keys)} costs; points inside the quiet run's interval: {inside} "
            f"({100 * inside / len(keys):.0f}%); median move {100 * math.expm1(moved):.1f}%"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", type=Path, nargs="?", help="a results directory")
    p.add_argument("--run", type=Path, metavar="OUT", help="make the run first, into OUT")
    p.add_argument("--drift", action="store_true", help="with --run: a load halfway through")
    p.add_argument("--against", type=Path, metavar="QUIET", help="a quiet run to compare with")
    args = p.parse_args(argv)
    directory = args.run or args.dir
    if directory is None:
        p.error("give DIR, or --run OUT")
    if args.run is not None:
        run(args.run, args.drift)
    print(report(directory))
    if args.against is not None:
        print(against(directory, args.against))
    return 0


if __name__ == "__main__":
    sys.exit(main())
