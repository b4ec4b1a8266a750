"""A run from the command line, for ``detbench run`` and ``detbench attribute`` alike: the plan,
the notes before it starts, the run and its interrupt message; ``cli.finish`` does the rest."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from detbench.core.modes import CUBLAS_ENV
from detbench.core.settings import visible_gpus
from detbench.run.api import plan_run, run_planned
from detbench.run.estimate import estimate, planned_unsupported
from detbench.run.figures import GPU_HOST_CORES, PAPER_STARTUP_SECONDS
from detbench.run.hostspeed import host_speed
from detbench.run.planprobe import own_seconds, probe, to_probe
from detbench.run.plantext import describe_plan, left_out_line, probe_line
from detbench.run.schedule import clock
from detbench.store.outdir import measured_nothing
from detbench.store.results import RESULTS_FILE

if TYPE_CHECKING:
    from detbench.report.sections import ReportRun
    from detbench.run.config import RunConfig
    from detbench.run.estimate import Estimate
    from detbench.run.runner import Runner


def plan(runner: Runner, dry_run: bool, as_json: bool) -> Estimate:
    """The run's plan and estimate, in full for --dry-run, else in one line. A dry run probes
    this host's start-up; both probe a user's own workloads (``run.planprobe``) and scale a
    CPU plan by this host's speed (``run.hostspeed``)."""
    c = runner.config
    gpus = visible_gpus() if c.device == "cuda" else 0
    # A CUDA plan on a host without a GPU (a dry run only): an estimate on paper, for one GPU.
    paper = c.device == "cuda" and gpus == 0
    distributed = frozenset(w.key for w in runner.workloads if w.distributed)
    sizes = {w.key: len(w.batch_sizes) for w in runner.workloads if w.batch_sizes}
    skipped = planned_unsupported(runner.workloads, c.device, max(gpus, 1) if paper else gpus)

    own = own_seconds(runner)  # a resumed run's records estimate the records it has left
    host = None if paper else host_speed(c.device)

    def estimated(startup: float, measured: bool, probed: Any = None) -> Estimate:
        return estimate(
            runner.plan,
            c.device,
            c.profile,
            c.setting("budget"),
            startup,
            measured,
            distributed,
            sizes,
            skipped,
            "paper" if paper else None,
            probed,
            runner.paired.plan(c.setting("block_seconds")),
            GPU_HOST_CORES if paper else None,
            own,
            host,
        )

    paper_startup = PAPER_STARTUP_SECONDS.get(c.device, 2.0) * (host.factor if host else 1.0)
    est = estimated(paper_startup, False)
    keys = (
        [k for k in to_probe(runner) if k not in own] if runner.plan.workers and not paper else []
    )
    found = None
    if (dry_run and runner.plan.workers and not paper) or keys:
        found = probe(runner, keys)
        est = estimated(found.startup, True, found.records)
        if keys:  # a real run probes as this one did: its time is the call's
            est = replace(est, probe_seconds=found.seconds)
    doc, lines = describe_plan(runner, est)
    if found is not None and keys:
        doc["probe"] = {"seconds": round(found.seconds, 1), "failed": found.failed}
        lines.insert(3, probe_line(found, keys))
    if as_json:
        print(json.dumps(doc, indent=2))
    elif dry_run:
        print("\n".join(lines))
    else:
        print(lines[0] + f"; estimated {clock(est.seconds)}", file=sys.stderr)
        if found is not None and keys:
            print(lines[3].lstrip(), file=sys.stderr)
        if doc["left_out"]:
            print(left_out_line(c.device, doc["left_out"]).lstrip(), file=sys.stderr)
    return est


def cudnn_log_note(config: RunConfig) -> str:
    """What ``--cudnn-log`` does to this run, before it starts."""
    if config.device != "cuda":
        return (
            "detbench: --cudnn-log on a CPU: cuDNN never loads here, so each record will say "
            "why it names no engine."
        )
    return (
        f"detbench: cuDNN's API log is on (--cudnn-log), one file per worker in {config.out}/logs: "
        "each record names the engine every convolution ran, but a short conv step runs up to 3x "
        "slower and cudnn.benchmark may choose differently, so this run's timings are not costs."
    )


def execute(
    config: RunConfig,
    args: argparse.Namespace,
    cuda: bool,
    *,
    summary: Callable[[ReportRun], str] | None = None,
    command: str = "run",
    preface: list[str] | None = None,
) -> int:
    """Print the plan, run it and report on it (``command``: the one a resume line names)."""
    out = config.out
    runner = plan_run(config, cuda=cuda, dry_run=bool(args.dry_run))
    if preface and not args.json:
        print("\n".join(preface), file=sys.stdout if args.dry_run else sys.stderr)
    try:
        est = plan(runner, args.dry_run, args.json)
    except KeyboardInterrupt:  # in the probe worker, before the run's folder exists
        print("\ndetbench: interrupted before the run began; nothing was written", file=sys.stderr)
        return 130
    if args.dry_run or not _notes(config, runner):
        return 0
    try:
        stats = run_planned(runner, est)
    except KeyboardInterrupt:
        kept = _lines(out)
        new = f"{runner.stats.records} new records, {kept} in all" if config.resume else None
        again = "" if kept else " (nothing was measured: the same command again starts afresh)"
        print(
            f"\ndetbench: interrupted; {new or f'{kept} records'} kept in {out}; "
            f"resume with: detbench {command} --resume {out}{again}",
            file=sys.stderr,
        )
        return 130
    # pandas, scipy and matplotlib: only once a run has records.
    from detbench.cli.finish import finish

    return finish(config, args, runner, stats, est.seconds, _lines(out), summary)


def _notes(config: RunConfig, runner: Runner) -> bool:
    """Print the notes before the run starts; False when there is nothing to run."""
    out = config.out
    if config.resume:
        missing = runner.missing
        if not missing and not runner.costs_missing:
            print(f"detbench: nothing to resume: every record of {out} is there", file=sys.stderr)
            return False
        costs = runner.costs_missing
        print(
            f"detbench: resuming {out}: {len(runner.done)} records kept, {missing} to measure"
            + (f"; the costs of {costs} (workload, replicate) groups to time" if costs else ""),
            file=sys.stderr,
        )
    elif out.is_dir() and measured_nothing(out):
        print(
            f"detbench: {out} holds a run stopped before its first record: this run starts "
            "afresh in it (its workers' logs are appended to)",
            file=sys.stderr,
        )
    if config.device == "cpu":
        print(
            "detbench: running on CPU: the cuDNN flags have no effect there, so modes that "
            "differ only in them measure the same thing.",
            file=sys.stderr,
        )
    if config.replicates == 2 and config.timing_design == "paired":
        from scipy.stats import t  # 0.8 s to import: only for this note

        print(
            "detbench: 2 replicates: each cost's 95% interval rests on 2 processes, a t with 1 "
            f"degree of freedom ({t.ppf(0.975, 1):.1f} standard errors each side, against "
            f"{t.ppf(0.975, 2):.1f} with 3 replicates): expect wide intervals, or give "
            "--replicates 3",
            file=sys.stderr,
        )
    if config.cudnn_log:
        print(cudnn_log_note(config), file=sys.stderr)
    inherited = os.environ.get(CUBLAS_ENV)
    if inherited is not None:
        print(
            f"detbench: {CUBLAS_ENV}={inherited} from your shell is used by the modes with "
            "deterministic algorithms only; the others run without it, as torch's default does.",
            file=sys.stderr,
        )
    return True


def _lines(out: Path) -> int:
    """The records in ``out``'s results file (every line one record)."""
    path = out / RESULTS_FILE
    return sum(1 for _ in path.open()) if path.exists() else 0
