"""``detbench locate``: where two fresh runs of a workload first part, as a command."""

from __future__ import annotations

import sys
from typing import Any

from detbench.locate.report import to_json, to_text
from detbench.locate.stages import DETERMINISTIC_MODE


def add_parser(sub: Any) -> None:
    """``detbench locate``."""
    q = sub.add_parser(
        "locate",
        help="find the op, the module and the line where two fresh runs of a workload first "
        "part (exit 0: reproducible, 1: it differs)",
        description="Records every op of the workload's build and fingerprint steps (forward, "
        "backward, optimizer) in fresh processes, with a digest of its inputs and outputs, and "
        "names each culprit: an op whose inputs were bitwise equal in both runs and whose "
        "outputs were not. It measures the size of each difference and checks whether "
        f"{DETERMINISTIC_MODE} fixes it. Not seen: work outside PyTorch's dispatcher, and the "
        "compiled kernels of torch.compile (under the recorder compiled code runs eagerly).",
    )
    q.add_argument(
        "target", metavar="FILE.py[:WORKLOAD]", help="a workload file, or one of its workloads"
    )
    q.add_argument(
        "--mode",
        default="default",
        metavar="NAME",
        help="the mode to locate in (default: default; settings as in "
        "det-algos[fill_uninitialized_memory=off])",
    )
    q.add_argument(
        "--replicates",
        type=int,
        default=2,
        metavar="N",
        help="fresh processes to compare (default 2)",
    )
    q.add_argument(
        "--until",
        type=int,
        default=4,
        metavar="M",
        help="while the first N agree, more processes up to M in all (default 4)",
    )
    q.add_argument(
        "--steps",
        type=int,
        metavar="K",
        help="at most K steps (default: the workload's fingerprint steps)",
    )
    q.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when present")
    q.add_argument(
        "--profile",
        choices=("quick", "full"),
        help="workload sizes (default: quick, on cuda as on cpu)",
    )
    q.add_argument(
        "--no-check",
        action="store_true",
        help=f"do not run the culprits again in {DETERMINISTIC_MODE}",
    )
    q.add_argument("--json", action="store_true", help="the answer as JSON")
    q.set_defaults(func=command)


def command(args: Any) -> int:
    from detbench.locate.stages import locate

    found = locate(
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
    print(to_json(docs) if args.json else to_text(docs), end="\n" if args.json else "")
    return 0 if all(d["reproducible"] for d in docs) else 1
