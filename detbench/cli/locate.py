"""``detbench locate``: where two fresh runs of a workload first part, as a command."""

from __future__ import annotations

import sys
from typing import Any


def command(args: Any) -> int:
    # torch and the report's modules (3 s to load): only when the command runs.
    from detbench.locate import report, script, stages

    if args.command_line:
        if args.target:
            raise stages.LocateError("give a workload file or a command after --, not both")
        loc = script.locate_command(
            args.command_line,
            mode=args.mode,
            replicates=args.replicates,
            until=args.until,
            stream=sys.stderr,
        )
        doc = loc.to_json()
        print(report.to_json([doc]) if args.json else report.to_text([doc]), end="")
        return 0 if doc["reproducible"] else 1
    if not args.target:
        raise stages.LocateError(
            "name a workload file (detbench locate FILE.py) or a command after -- "
            "(detbench locate -- python train.py)"
        )
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
