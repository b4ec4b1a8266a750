"""Whether a run's costs can be cited: the A/A check of both timing designs, side by side, and
where the variance of a cost sits (issue 34).

    python tools/aa_check.py DIR                      # a run made with --timing both (or one)
    python tools/aa_check.py --run OUT [--drift]      # make one: the CPU core matrix, quick

A mode against itself must show no cost. The paired design has an A/A comparison in every run:
a second worker of the baseline's settings, timed in the same rounds. On a CPU, today's design
(each record timed in its own worker, ``--timing separate``) has A/A comparisons too: the modes
that differ from the baseline only in cuDNN switches, which act on nothing on a CPU, are the same
computation. For each design: how many workloads show a cost that is not there (a 95% interval
that excludes 1), and how wide the intervals are (their median half-width); then the variance
of the paired log ratios split between rounds, processes and time.

``--run OUT`` first runs ``detbench run --device cpu --timing both`` on the core suites (conv,
rnn, batchnorm, bmm, training; quick profile, 10 modes, 3 replicates) into OUT. ``--drift`` adds a
real drift: a second process that keeps one core busy starts halfway through each design's
timings (when half of the verdict records are in, and again when half of the paired groups are)
and stops when that design's timings end. The figures are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CORE = ("conv", "rnn", "batchnorm", "bmm", "training")
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
    """``detbench run`` of the CPU core matrix with both designs into ``out``."""
    cmd = [sys.executable, "-m", "detbench", "run", "--device", "cpu", "--timing", "both"]
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


def report(directory: Path) -> str:
    """Both designs' A/A figures and the paired variance split, as lines."""
    from detbench.analysis.aa import aa_lines

    return aa_lines(directory)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", type=Path, nargs="?", help="a results directory")
    p.add_argument("--run", type=Path, metavar="OUT", help="make the run first, into OUT")
    p.add_argument("--drift", action="store_true", help="with --run: a load halfway through")
    args = p.parse_args(argv)
    directory = args.run or args.dir
    if directory is None:
        p.error("give DIR, or --run OUT")
    if args.run is not None:
        run(args.run, args.drift)
    print(report(directory))
    return 0


if __name__ == "__main__":
    sys.exit(main())
