"""``detbench exec -- COMMAND``: a user's command, unchanged, under each mode."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from detbench.cli.options import UserError, cuda_here, modes_of
from detbench.core.modes import DETERMINISTIC_MODE
from detbench.run.execdoc import ExecRecords, finish, partings, text_partings
from detbench.run.execplan import ExecConfig, ExecError, RunSlot, load_config, name_of, plan
from detbench.run.execrun import ExecRunner
from detbench.store.outdir import refuse_used
from detbench.store.results import stamped_dir, utc_now


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def config_of(args: argparse.Namespace) -> ExecConfig:
    """The exec run the options ask for (``--resume``: the run's own)."""
    if args.resume:
        if args.mode or args.set or args.replicates or args.command_line:
            raise UserError("--resume continues an exec run with its own command and options")
        return load_config(Path(args.resume))
    if not args.command_line:
        raise UserError("give the command after --: detbench exec [options] -- python train.py")
    names = args.mode or ["default", "det-algos" if not cuda_here() else DETERMINISTIC_MODE]
    modes, _ = modes_of(names, args.set)
    out = Path(args.out) if args.out else stamped_dir("exec-" + name_of(args.command_line))
    refuse_used(out)
    return ExecConfig(
        command=list(args.command_line),
        modes=modes,
        out=out,
        replicates=3 if args.replicates is None else args.replicates,
        timeout=args.timeout,
        seed=args.seed or 0,
        census=not args.no_census,
        cwd=Path.cwd(),
    )


def exec_command(args: argparse.Namespace) -> int:
    c = config_of(args)
    runner = ExecRunner(c, sys.stderr)
    runner.check()
    slots = plan(c)
    shown = " ".join(c.command)
    lines = [
        f"exec: {shown!r} in {c.cwd}",
        "plan: first one untimed run of the baseline ("
        + ("it counts the ops that can race" if c.census else "a warm-up")
        + f"), then {len(c.modes)} mode{'s' if len(c.modes) > 1 else ''} "
        f"({', '.join(m.name for m in c.modes)}) x {c.replicates} rounds, and the baseline's "
        f"A/A copy each round: {len(slots)} timed runs, in an order balanced over the rounds",
    ]
    if args.dry_run:
        print("\n".join(lines))
        for s in slots:
            print(f"  round {s.round + 1}: {s.mode.name}" + (" (A/A copy)" if s.copy else ""))
        return 0
    print("\n".join(lines), file=sys.stderr)
    records = ExecRecords(c)
    if not c.resume:
        records.write_env(utc_now())

    def on_run(slot: RunSlot, facts: dict[str, Any]) -> None:
        records.add(slot, facts)
        if facts["status"] == "ok" and not facts.get("comparable"):
            raise ExecError(
                "the command printed nothing and wrote no file that detbench exec can compare "
                f"(stdout, stderr and the files under {c.cwd} are empty or set aside as clock "
                "readings): add a detbench.fingerprint(name, tensor) call, or save a checkpoint"
            )

    # A SIGTERM (timeout, a scheduler, a CI's kill) ends exec as Ctrl-C does: the command's
    # process group, in a session of its own, would otherwise live on after exec.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        runner.run(on_run=on_run)
    except ExecError as exc:
        raise UserError(f"{exc}; nothing else was run, and what was is in {c.out}") from None
    except KeyboardInterrupt:
        print(
            f"\ndetbench: interrupted: {len(runner.facts)} runs kept in {c.out}; "
            f"'detbench exec --resume {c.out}' runs the rest",
            file=sys.stderr,
        )
        return 130
    read: dict[str, Any] = {}  # each run's outputs read once for both
    finish(c.out, partings(c.out, runner.facts, read), text_partings(c.out, runner.facts, read))
    # the analyses and the report load pandas, scipy and matplotlib: only once the runs are done
    from detbench.report.execsection import summary_text
    from detbench.report.write import write_report

    md, page = write_report(c.out)
    print(summary_text(c.out))
    print(f"report: {page}\n        {md}")
    return 0
