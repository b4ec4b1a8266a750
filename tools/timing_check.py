"""Whether a run's timings can be cited (checks (i)-(iii)): one PASS or FAIL line each.

    python tools/timing_check.py DIR [--target 0.01]

(i) no timing shared with detbench's own workers, (ii) no worker's first workload drifts more
than 1%, (iii) at least 90% of the lines with 5-100 ms steps reach +-1%
(``detbench.analysis.timingcheck`` says how each is read from the run's ``paired.jsonl``). Exit
status 0 when all pass, 1 when one fails, 2 when DIR holds no records or no paired timing (a run
of detbench's earlier design, each record timed in its own worker: nothing here reads it). Run
it by hand on a run's directory before citing its timings (the GPU visit's proof step,
``tools/gpu_session.sh proof``, runs ``tools/aa_check.py`` instead).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from detbench.analysis.timingcheck import check_timing
from detbench.store.paired import iter_paired
from detbench.store.results import ResultsError, iter_records


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", type=Path, help="a results directory (its results.jsonl)")
    p.add_argument("--target", type=float, default=0.01, help="check (iii)'s interval (0.01)")
    args = p.parse_args(argv)
    try:
        records = list(iter_records(args.dir))
        paired = list(iter_paired(args.dir))
    except ResultsError as exc:
        print(f"timing_check: {exc}", file=sys.stderr)
        return 2
    if not records:
        print(f"timing_check: {args.dir} holds no records", file=sys.stderr)
        return 2
    if not paired:
        print(
            f"timing_check: {args.dir} has no paired timing (paired.jsonl): its records were "
            "timed each in its own worker (detbench's earlier design), which this does not check",
            file=sys.stderr,
        )
        return 2
    print(
        f"{args.dir}: {len(records)} records, their costs timed in {len(paired)} paired lines "
        "(the checks read those)"
    )
    checks = check_timing(paired, args.target)
    for c in checks:
        print(c.line())
    return 0 if all(c.passed for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
