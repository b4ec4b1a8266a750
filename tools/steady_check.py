"""Whether a paired sample is the steady state: each mode's paired median against a reference
timer's, timed alternately in the same workers (issue 39).

    python -m detbench run ... --reference-check 0.1 --out DIR
    python tools/steady_check.py DIR [--limit 0.10] [--json]

A run made with ``--reference-check SECONDS`` has, after each round, every worker of a group time
its step again with ``torch.utils.benchmark.Timer.blocked_autorange`` (CUDA events on a GPU), in
the same process state between two of its turns: so the machine's drift is shared by both. For
each (workload, mode) this prints the median of its paired samples (seconds per step, every
replicate's blocks) over the median of its reference figures, and how many are within
``--limit`` of 1. The figures are printed; nothing is asserted. Exit 2 where the run has no
reference figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from detbench.store.paired import iter_paired  # noqa: E402


def ratios(directory: Path) -> list[dict[str, object]]:
    """Per (workload, mode, copy): the paired median, the reference median, their ratio."""
    got: dict[tuple[str, str, int], tuple[list[float], list[float], str]] = {}
    for line in iter_paired(directory):
        if line.get("status") != "ok" or not line.get("reference"):
            continue
        key = (f"{line['suite']}/{line['workload']}", line["mode"], int(line.get("copy", 0)))
        samples, refs, _ = got.setdefault(key, ([], [], str(line.get("reference_timer"))))
        samples.extend(float(x) for x in line["samples"])
        refs.extend(float(x) for x in line["reference"])
    out = []
    for (key, mode, copy), (samples, refs, timer) in sorted(got.items()):
        paired, ref = statistics.median(samples), statistics.median(refs)
        out.append(
            {
                "workload": key,
                "mode": mode + (" (A/A copy)" if copy else ""),
                "paired_ms": 1e3 * paired,
                "reference_ms": 1e3 * ref,
                "ratio": paired / ref,
                "blocks": len(samples),
                "references": len(refs),
                "timer": timer,
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--limit", type=float, default=0.10, help="the tolerance (default 0.10)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = ratios(args.dir)
    if not rows:
        print(f"steady_check: {args.dir} has no reference figures (run with --reference-check)")
        return 2
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    width = max(len(str(r["workload"])) for r in rows)
    mw = max(len(str(r["mode"])) for r in rows)
    print(f"{'workload':<{width}}  {'mode':<{mw}}  paired ms  reference ms  ratio")
    for r in rows:
        print(
            f"{r['workload']:<{width}}  {r['mode']:<{mw}}  {r['paired_ms']:9.3f}  "
            f"{r['reference_ms']:12.3f}  {r['ratio']:5.2f}"
        )
    within = sum(1 for r in rows if abs(float(r["ratio"]) - 1) <= args.limit)  # type: ignore[arg-type]
    worst = max(rows, key=lambda r: abs(float(r["ratio"]) - 1))  # type: ignore[arg-type]
    print(
        f"{within} of {len(rows)} paired medians within +-{100 * args.limit:g}% of the reference "
        f"({rows[0]['timer']}); furthest: {worst['workload']} {worst['mode']} "
        f"{float(worst['ratio']):.2f}"  # type: ignore[arg-type]
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
