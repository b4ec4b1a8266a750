"""The commands that run something or read a run, and the table of every such command
(``COMMANDS``). Each checks its options before it imports what does the work (torch, pandas,
scipy, matplotlib: seconds of start-up), so that a mistake is one line at once.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from detbench.cli import across, attribute, script
from detbench.cli.execute import execute
from detbench.cli.options import UserError, cuda_here, existing_dir, run_config
from detbench.locate.audit import audit, to_text
from detbench.run.gpucheck import run_check
from detbench.store.results import load_results, stamped_dir


def run_command(args: argparse.Namespace) -> int:
    if args.json and not args.dry_run:
        raise UserError("--json goes with --dry-run (a run's records are in its results.jsonl)")
    config = run_config(args)
    return execute(config, args, cuda_here())


def report_command(args: argparse.Namespace) -> int:
    d = existing_dir(args.dir)
    df = load_results(d)  # a missing or malformed results file: one line, before the report loads
    from detbench.report.write import load_run, write_report  # scipy, matplotlib: only now

    md, page = write_report(d, load_run(d, df))
    print(f"report: {page}\n        {md}")
    return 0


def index_command(args: argparse.Namespace) -> int:
    d = existing_dir(args.dir)
    from detbench.report.publish import write_index  # pandas, scipy, matplotlib: once d is there

    print(f"index: {write_index(d)}")
    return 0


def audit_command(args: argparse.Namespace) -> int:
    device = args.device or ("cuda" if cuda_here() else "cpu")
    out = Path(args.out) if args.out else None
    audits = audit(args.target, device, replicates=args.replicates, out=out)
    if args.json:
        print(json.dumps([a.to_json() for a in audits], indent=2, default=str))
    else:
        print(to_text(audits), end="")
    return 0


def gpu_check_command(args: argparse.Namespace) -> int:
    if args.device == "cuda" and not cuda_here():
        raise UserError(
            "no CUDA GPU is visible to torch here: nothing to check (on a CPU host, "
            "'make bench' runs the CPU matrix; 'detbench gpu-check --device cpu' rehearses "
            "the check)"
        )
    out = Path(args.out) if args.out else stamped_dir(f"{args.device}-gpu-check")
    print(f"detbench gpu-check: {args.device}, results in {out}", file=sys.stderr)
    found, out = run_check(args.device, out, cudnn_log=args.cudnn_log)
    for c in found:
        print(c.line())
    failed = sum(not c.ok for c in found)
    print(
        f"\n{len(found) - failed} of {len(found)} checks passed"
        + (f"; {failed} failed (see {out})" if failed else f"; the run is in {out}")
    )
    return 1 if failed else 0


def locate_command(args: argparse.Namespace) -> int:
    # torch and the report's modules: only when the command runs.
    from detbench.locate import report, stages
    from detbench.locate.script import locate_command as locate_script

    if args.command_line:
        if args.target:
            raise stages.LocateError("give a workload file or a command after --, not both")
        found = [
            locate_script(
                args.command_line,
                mode=args.mode,
                replicates=args.replicates,
                until=args.until,
                stream=sys.stderr,
            )
        ]
    elif not args.target:
        raise stages.LocateError(
            "name a workload file (detbench locate FILE.py) or a command after -- "
            "(detbench locate -- python train.py)"
        )
    else:
        found = stages.locate(
            args.target,
            device=args.device,
            mode=args.mode,
            replicates=args.replicates,
            until=args.until,
            steps=args.steps,
            profile=args.profile,
            check=not args.no_check,
            stream=sys.stderr,
        )
    docs = [loc.to_json() for loc in found]
    print(
        report.to_json(docs) if args.json else report.to_text(docs), end="\n" if args.json else ""
    )
    return 0 if all(d["reproducible"] for d in docs) else 1


#: Each command of this module and of ``across``, ``attribute`` and ``script``, by name.
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": run_command,
    "report": report_command,
    "index": index_command,
    "audit": audit_command,
    "gpu-check": gpu_check_command,
    "compare": across.compare_command,
    "merge": across.merge_command,
    "submit": across.submit_command,
    "attribute": attribute.run_command,
    "locate": locate_command,
    "exec": script.exec_command,
}
