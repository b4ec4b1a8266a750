"""``detbench``: a thin front over the library. A user error is one line and exit status 2."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

from detbench.errors import DetbenchError
from detbench.modes import MODES, get_mode


class UserError(DetbenchError):
    """Bad input: printed as one line, exit status 2."""


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


def _load(args: argparse.Namespace) -> list:
    from detbench.runner import RunConfig, resolve_sources

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


def _default_out(device: str, profile: str) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"{stamp}-{device}-{profile}"


def _cmd_run(args: argparse.Namespace) -> int:
    import torch

    from detbench.analysis import recommendation_text, summary_table
    from detbench.results import RESULTS_FILE, load_results
    from detbench.runner import RunConfig, prepare, resume_config, validate

    cuda = torch.cuda.is_available()
    if args.resume is not None:
        given = [
            f"--{name.replace('_', '-')}" for name in RUN_OPTIONS if getattr(args, name) is not None
        ]
        if given:
            raise UserError(
                f"--resume continues a run with its own options; give no {given[0]} with it"
            )
        config = resume_config(Path(args.resume))
    else:
        device = args.device or ("cuda" if cuda else "cpu")
        profile = args.profile or ("full" if device == "cuda" else "quick")
        modes = [get_mode(n) for n in args.mode] if args.mode else list(MODES)
        if len({m.name for m in modes}) != len(modes):
            raise UserError("a --mode is given twice")
        config = RunConfig(
            out=Path(args.out) if args.out else _default_out(device, profile),
            suites=args.suite or [],
            workload_files=[Path(f) for f in args.workload or []],
            modes=modes,
            replicates=3 if args.replicates is None else args.replicates,
            profile=profile,
            device=device,
            seed=args.seed if args.seed is not None else 0,
            min_run_time=args.min_run_time,
            timeout=args.timeout,
            only=args.only,
        )
    out = config.out
    validate(config, cuda)
    runner = prepare(config)
    if config.resume:
        missing = runner.missing
        if not missing:
            print(f"detbench: nothing to resume: every record of {out} is there", file=sys.stderr)
            return 0
        print(
            f"detbench: resuming {out}: {len(runner.done)} records kept, {missing} to measure",
            file=sys.stderr,
        )
    if config.device == "cpu":
        print(
            "detbench: running on CPU: the cuDNN flags have no effect there, so modes that "
            "differ only in them measure the same thing.",
            file=sys.stderr,
        )
    try:
        stats = runner.run()
    except KeyboardInterrupt:
        path = out / RESULTS_FILE
        kept = sum(1 for _ in path.open()) if path.exists() else 0
        print(
            f"\ndetbench: interrupted; {kept} records kept in {out}; "
            f"resume with: detbench run --resume {out}",
            file=sys.stderr,
        )
        return 130
    df = load_results(out)
    _, text = summary_table(df)
    print(text)
    print("\n" + recommendation_text(df))
    if not args.no_report:
        from detbench.report import write_report

        _, page = write_report(out)
        print(f"\nreport: {page}")
    print(
        f"\n{stats.records} records in {out / 'results.jsonl'} ({stats.wall:.0f} s: start-up "
        f"{stats.startup:.0f} s, fingerprint {stats.fingerprint:.0f} s, timing "
        f"{stats.timing:.0f} s, build {stats.build:.0f} s, FLOP count {stats.count:.0f} s, "
        f"clean-up {stats.cleanup:.0f} s, "
        f"worker exit {stats.shutdown:.0f} s, "
        f"other {stats.other:.0f} s)"
    )
    return 0


#: ``run`` options that choose what a run measures: a resumed run takes them from its env.json.
RUN_OPTIONS = ("suite", "workload", "only", "mode", "replicates", "profile", "device", "out",
               "seed", "min_run_time", "timeout")  # fmt: skip


def _cmd_report(args: argparse.Namespace) -> int:
    from detbench.report import write_report

    md, page = write_report(_existing_dir(args.dir))
    print(f"report: {page}\n        {md}")
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from detbench.compare import compare, to_markdown, to_text

    out = Path(args.markdown) if args.markdown else None
    if out is not None and out.exists():
        raise UserError(f"{out} exists: give a new file for --markdown (nothing was overwritten)")
    c = compare(_existing_dir(args.dir_a), _existing_dir(args.dir_b))
    print(to_text(c), end="")
    if out is not None:
        out.write_text(to_markdown(c), encoding="utf-8")
        print(f"\nMarkdown: {out}")
    return 0


def _cmd_index(args: argparse.Namespace) -> int:
    from detbench.publish import write_index

    print(f"index: {write_index(_existing_dir(args.dir))}")
    return 0


def _cmd_audit(args: argparse.Namespace) -> int:
    import torch

    from detbench.audit import audit, to_text

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    out = Path(args.out) if args.out else None
    audits = audit(args.target, device, replicates=args.replicates, out=out)
    if args.json:
        print(json.dumps([a.to_json() for a in audits], indent=2, default=str))
    else:
        print(to_text(audits), end="")
    return 0


def _existing_dir(path: str) -> Path:
    d = Path(path)
    if not d.is_dir():
        raise UserError(f"no such results directory: {path}")
    return d


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

    def selection(q: argparse.ArgumentParser) -> None:
        q.add_argument(
            "--suite",
            action="append",
            metavar="NAME",
            help="a built-in suite (repeatable; default: all)",
        )
        q.add_argument(
            "--workload",
            action="append",
            metavar="FILE.py",
            help="a file of @detbench.workload functions (repeatable); alone, it "
            "replaces the built-in suites, with --suite it runs beside them",
        )

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
    selection(r)
    r.add_argument(
        "--mode",
        action="append",
        metavar="NAME",
        help="a mode from 'detbench modes' (repeatable; default: all 10)",
    )
    r.add_argument(
        "--replicates",
        type=int,
        metavar="N",
        help="fresh processes per mode (default: 3, at least 2)",
    )
    r.add_argument(
        "--profile",
        choices=("quick", "full"),
        help="workload sizes (default: full on cuda, quick on cpu)",
    )
    r.add_argument(
        "--device", choices=("cpu", "cuda"), help="default: cuda when a GPU is present, else cpu"
    )
    r.add_argument("--out", metavar="DIR", help="results directory (default: results/STAMP-...)")
    r.add_argument("--seed", type=int, help="the seed of every generator (default 0)")
    r.add_argument(
        "--min-run-time",
        type=float,
        metavar="SECONDS",
        help="seconds of timing samples per workload (default: 0.1 quick, 1 full)",
    )
    r.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="kill a workload's worker after this long (default: no limit)",
    )
    r.add_argument(
        "--only",
        action="append",
        metavar="SUITE/NAME",
        help="run only this workload of the selection (repeatable; see 'detbench list')",
    )
    r.add_argument(
        "--resume",
        metavar="DIR",
        help="continue the interrupted run in DIR with its own options, measuring only what "
        "has no record yet; refused if the GPU, driver, CUDA, cuDNN or torch changed",
    )
    r.add_argument(
        "--no-report", action="store_true", help="do not write report.md and report.html at the end"
    )
    r.set_defaults(func=_cmd_run)

    rep = sub.add_parser(
        "report", help="write DIR/report.md and a self-contained DIR/report.html for a run"
    )
    rep.add_argument("dir", metavar="DIR", help="a results directory written by 'detbench run'")
    rep.set_defaults(func=_cmd_report)

    cmp = sub.add_parser(
        "compare", help="compare two runs: throughput changes with significance, verdict changes"
    )
    cmp.add_argument("dir_a", metavar="DIR_A", help="the first run (the reference)")
    cmp.add_argument("dir_b", metavar="DIR_B", help="the second run")
    cmp.add_argument("--markdown", metavar="FILE", help="also write the comparison as Markdown")
    cmp.set_defaults(func=_cmd_compare)

    aud = sub.add_parser(
        "audit",
        help="which ops of a workload have no deterministic implementation here, and is it "
        "reproducible by default and fully deterministic",
    )
    aud.add_argument("target", metavar="FILE.py[:WORKLOAD]", help="a workload file, or one of "
                     "its workloads")  # fmt: skip
    aud.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when present")
    aud.add_argument("--replicates", type=int, default=3, metavar="N",
                     help="fresh processes per mode (default 3)")  # fmt: skip
    aud.add_argument("--out", metavar="DIR", help="keep the verdict runs' records in DIR")
    aud.add_argument("--json", action="store_true", help="the same answer as JSON")
    aud.set_defaults(func=_cmd_audit)

    idx = sub.add_parser(
        "index", help="regenerate DIR/README.md, the index of published runs (default: results)"
    )
    idx.add_argument("dir", metavar="DIR", nargs="?", default="results")
    idx.set_defaults(func=_cmd_index)
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
