"""The end of a run that has records (``cli.execute``): the console's summary, warnings and
failures, ``--locate``, the report and where the time went. Its imports (pandas, scipy,
matplotlib) load only when a run gets this far."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from detbench.analysis.failures import all_failed, failures_text
from detbench.locate.report import locate_run
from detbench.report.console import summary_text, warnings_text
from detbench.report.sections import ReportRun
from detbench.report.write import load_run, write_report

if TYPE_CHECKING:
    from detbench.run.config import RunConfig
    from detbench.run.runner import Runner
    from detbench.run.runstats import RunStats


def finish(
    config: RunConfig,
    args: argparse.Namespace,
    runner: Runner,
    stats: RunStats,
    estimated: float,
    kept: int,
    summary: Callable[[ReportRun], str] | None = None,
) -> int:
    """Print what the run found, write its report and return the exit status."""
    out = config.out
    run = load_run(out)  # one reading, its analyses computed once for the console and the report
    df = run.df
    print((summary or summary_text)(run))
    warned = warnings_text(run)  # the report's Warnings, word for word
    if warned:
        print("\n" + warned)
    failed = failures_text(df)
    if failed:
        print("\n" + failed)
    if getattr(args, "locate", False):
        located = locate_run(out, sys.stderr)
        print(
            f"\nlocated: {len(located)} nondeterministic (workload, mode) pairs, in "
            f"{out / 'located.json'}"
        )
    if not args.no_report:
        _, page = write_report(out, run)
        print(f"\nreport: {page}")
    print(time_line(stats, estimated, out, kept))
    # Every record of the user's own workloads failed: their file is wrong (not a suite's: exit 0).
    files = {Path(f).resolve() for f in config.workload_files}
    own = [w.key for w in runner.workloads if w.source and Path(w.source).resolve() in files]
    if all_failed(df, own):
        print(
            f"detbench: every record of your own workloads failed ({', '.join(own)}): see the "
            "messages above",
            file=sys.stderr,
        )
        return 1
    return 0


def time_line(stats: RunStats, estimated: float, out: Path, kept: int) -> str:
    """The closing line: the records made (and ``kept`` in all) and where the time went."""
    # With devices side by side the phases add up over them: compare device-seconds.
    paired = stats.paired or {}
    device_seconds = stats.wall * stats.devices
    measured = device_seconds - stats.fingerprint - stats.invariance - paired.get("rounds", 0.0)
    resumed = kept > stats.records  # the file holds records of an earlier call
    costs = (
        f" and the costs of {int(stats.paired['groups'])} (workload, replicate) groups"
        if stats.paired
        else ""
    )
    made = (
        f"{stats.records} new records{costs}, {kept} records in all"
        if resumed
        else f"{stats.records} records{costs}"
    )
    this = "this call: " if resumed else ""
    return (
        f"\n{made} in {out / 'results.jsonl'} ({this}{stats.wall:.0f} s against "
        f"{estimated:.0f} s planned: "
        + (
            f"{'verdicts and ' if paired.get('verdicts') else ''}paired costs "
            f"{paired['wall']:.0f} s (their groups' start-ups {paired['startup']:.0f} s, rounds "
            f"{paired['rounds']:.0f} s), "
            if stats.paired
            else ""
        )
        + (f"the probe worker {stats.probe:.0f} s, " if stats.probe else "")
        + f"fingerprint {stats.fingerprint:.0f} s, the workers' own start-up work "
        f"{stats.startup_cpu:.0f} s of CPU (beside the rest), build {stats.build:.0f} s, "
        f"FLOP count {stats.count:.0f} s, "
        + (f"batch invariance {stats.invariance:.0f} s, " if stats.invariance else "")
        + f"clean-up {stats.cleanup:.0f} s, other {stats.other:.0f} s; harness overhead "
        f"{100 * measured / max(device_seconds, 1e-9):.0f}% of the "
        + ("wall time)" if stats.devices == 1 else f"device time, {stats.devices} devices)")
    )
