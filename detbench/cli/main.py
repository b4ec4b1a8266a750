"""``detbench``: a thin front over the library. A user error is one line and exit status 2."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from detbench.cli.options import (
    CUDNN_LOG_HELP,
    UserError,
    existing_dir,
    mode_options,
    run_config,
    run_options,
    selection,
)
from detbench.core.errors import DetbenchError
from detbench.core.modes import MODES

if TYPE_CHECKING:
    import pandas as pd


def _cmd_modes(args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps([m.to_json() for m in MODES], indent=2))
        return 0
    flags = ("benchmark", "cudnn_deterministic", "deterministic_algorithms", "cudnn_enabled")
    header = ("name", "cudnn.benchmark", "cudnn.deterministic", "det. algorithms", "cudnn.enabled")
    rows = [header] + [(m.name, *("on" if getattr(m, f) else "off" for f in flags)) for m in MODES]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    print("\n'detbench modes --json' gives each mode's Python snippet.")
    return 0


def _cmd_settings(args: argparse.Namespace) -> int:
    from detbench.core.settings import SETTINGS

    if args.json:
        print(json.dumps([s.to_json() for s in SETTINGS], indent=2))
        return 0
    rows = [("name", "levels", "default here", "acts on")]
    for s in SETTINGS:
        reason = s.unavailable()
        default = s.default() if reason is None else "unavailable in this torch"
        rows.append((s.name, " | ".join(s.levels), default, ", ".join(s.devices)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    print(
        "\nApply one to every mode of a run with 'detbench run --set NAME=LEVEL' (repeatable);"
        "\n'detbench settings --json' gives what each does."
    )
    return 0


def _load(args: argparse.Namespace) -> list:
    from detbench.run.config import RunConfig, resolve_sources

    config = RunConfig(
        out=Path("."),
        suites=args.suite or [],
        workload_files=[Path(f) for f in args.workload or []],
    )
    return resolve_sources(config)[1]


def _cmd_list(args: argparse.Namespace) -> int:
    workloads = _load(args)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "suite": w.suite,
                        "workload": w.name,
                        "params": w.params_for(args.profile),
                        "source": w.source,
                        # what the settings act on: autocast=... runs it, sdpa_backend matters
                        "autocast": getattr(w, "autocast", False),
                        "attention": getattr(w, "attention", False),
                    }
                    for w in workloads
                ],
                indent=2,
                default=str,
            )
        )
        return 0
    width = max(len(w.key) for w in workloads)
    for w in workloads:
        params = ", ".join(f"{k}={v}" for k, v in w.params_for(args.profile).items())
        print(f"{w.key:<{width}}  {params}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    import torch

    from detbench.analysis import recommendation_text, summary_table
    from detbench.analysis.busy import host_load
    from detbench.cli.execute import execute

    cuda = torch.cuda.is_available()
    if args.json and not args.dry_run:
        raise UserError("--json goes with --dry-run (a run's records are in its results.jsonl)")
    config = run_config(args, cuda)

    def summary(df: pd.DataFrame) -> str:
        from detbench.analysis import cause, samebits
        from detbench.analysis.runstate import run_state
        from detbench.store.results import load_env

        same = samebits.text(df)
        why = cause.text(df)
        load = host_load(df)
        busy = f"\n\nWARNING: {load.sentence()}" if load is not None and load.is_busy else ""
        return (
            summary_table(df)[1]
            + "\n\n"
            + recommendation_text(df)
            + (f"\n\n{why}" if why else "")
            + (f"\n\n{same}" if same else "")
            + busy
            + f"\n\n{run_state(df, load_env(config.out)).line()}"
        )

    return execute(config, args, cuda, summary=summary)


def _cmd_report(args: argparse.Namespace) -> int:
    from detbench.report.write import write_report

    md, page = write_report(existing_dir(args.dir))
    print(f"report: {page}\n        {md}")
    return 0


def _cmd_index(args: argparse.Namespace) -> int:
    from detbench.report.publish import write_index

    print(f"index: {write_index(existing_dir(args.dir))}")
    return 0


def _cmd_audit(args: argparse.Namespace) -> int:
    import torch

    from detbench.locate.audit import audit, to_text

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    out = Path(args.out) if args.out else None
    audits = audit(args.target, device, replicates=args.replicates, out=out)
    if args.json:
        print(json.dumps([a.to_json() for a in audits], indent=2, default=str))
    else:
        print(to_text(audits), end="")
    return 0


def _cmd_gpu_check(args: argparse.Namespace) -> int:
    import torch

    from detbench.run.gpucheck import run_check
    from detbench.store.results import stamped_dir

    if args.device == "cuda" and not torch.cuda.is_available():
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


# Declarative: it only declares the arguments, the one kind of function allowed over 80 lines.
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="detbench",
        description="Measure what determinism costs in PyTorch: throughput and bitwise "
        "run-to-run equality of workloads under every reproducibility mode.",
    )
    sub = p.add_subparsers(dest="command", required=True)

    m = sub.add_parser("modes", help="print the determinism modes")
    m.add_argument("--json", action="store_true", help="a JSON list, with Python snippets")
    m.set_defaults(func=_cmd_modes)

    st = sub.add_parser("settings", help="print the settings beside the modes (--set NAME=LEVEL)")
    st.add_argument("--json", action="store_true", help="a JSON list: name, levels, default, doc")
    st.set_defaults(func=_cmd_settings)

    ls = sub.add_parser("list", help="print the workloads")
    selection(ls)
    ls.add_argument(
        "--profile",
        choices=("quick", "full"),
        default="full",
        help="whose parameters to show (default: full)",
    )
    ls.add_argument("--json", action="store_true", help="a JSON list")
    ls.set_defaults(func=_cmd_list)

    r = sub.add_parser("run", help="run workloads under the determinism modes")
    run_options(r)
    mode_options(r)
    r.add_argument(
        "--locate",
        action="store_true",
        help="after the run, locate the op, module and line where each nondeterministic "
        "(workload, mode) parts from run to run (detbench locate; the report shows them)",
    )
    r.add_argument("--cudnn-log", action="store_true", default=None, help=CUDNN_LOG_HELP)
    r.set_defaults(func=_cmd_run)

    rep = sub.add_parser(
        "report", help="write DIR/report.md and a self-contained DIR/report.html for a run"
    )
    rep.add_argument("dir", metavar="DIR", help="a results directory written by 'detbench run'")
    rep.set_defaults(func=_cmd_report)

    aud = sub.add_parser(
        "audit",
        help="which ops of a workload have no deterministic implementation here, and is it "
        "reproducible by default and fully deterministic",
    )
    aud.add_argument(
        "target", metavar="FILE.py[:WORKLOAD]", help="a workload file, or one of its workloads"
    )
    aud.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when present")
    aud.add_argument(
        "--replicates",
        type=int,
        default=3,
        metavar="N",
        help="fresh processes per mode (default 3)",
    )
    aud.add_argument("--out", metavar="DIR", help="keep the verdict runs' records in DIR")
    aud.add_argument("--json", action="store_true", help="the same answer as JSON")
    aud.set_defaults(func=_cmd_audit)

    gc = sub.add_parser(
        "gpu-check",
        help="the smoke test for a new GPU host: one small workload per suite, 2 modes x 2 "
        "fresh processes, and what worked in plain words",
    )
    gc.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cuda (default); cpu rehearses the check without a GPU",
    )
    gc.add_argument("--out", metavar="DIR", help="results directory (default: results/STAMP-...)")
    gc.add_argument("--cudnn-log", action="store_true", help=CUDNN_LOG_HELP)
    gc.set_defaults(func=_cmd_gpu_check)

    idx = sub.add_parser(
        "index", help="regenerate DIR/README.md, the index of published runs (default: results)"
    )
    idx.add_argument("dir", metavar="DIR", nargs="?", default="results")
    idx.set_defaults(func=_cmd_index)

    from detbench.cli import across, attribute, locate  # they import this module's run_options

    across.add_parsers(sub)
    attribute.add_parser(sub)
    locate.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except DetbenchError as exc:
        print(f"detbench: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
