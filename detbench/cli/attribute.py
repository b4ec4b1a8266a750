"""``detbench attribute``: the attribution study (``analysis.attribution``) as a command."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from detbench.cli.execute import execute
from detbench.cli.options import UserError, cuda_here, run_config
from detbench.run.config import RunConfig, resolve_sources
from detbench.run.probe import probe_ops
from detbench.store.results import load_env

if TYPE_CHECKING:
    from detbench.report.sections import ReportRun


def study_config(args: argparse.Namespace, cuda: bool | None = None) -> RunConfig:
    """The run of the study the options ask for (``--resume``: the run in DIR, as it was)."""
    config = run_config(args, cuda)
    # The study's analysis loads pandas and scipy: only once the options are checked.
    from detbench.analysis.attribution import build_study, is_study, only_for, study_modes

    if args.resume is not None:
        study = config.study or load_env(Path(args.resume)).get("study")
        if not is_study(study):
            raise UserError(f"{args.resume} holds no attribution study; resume it with run")
        assert study is not None
        return replace(config, study=study, only_for=config.only_for or only_for(study))
    sources, workloads = resolve_sources(config)  # a bad --suite/--only: one line, first
    called = _seen_calls(config, sources, workloads)
    study = build_study(config.device, workloads, compile=args.compile, called=called)
    return replace(config, modes=study_modes(study), only_for=only_for(study) or None, study=study)


def _seen_calls(
    config: RunConfig, sources: list[str], workloads: list[Any]
) -> dict[str, list[str]]:
    """The ops the workloads that do not declare attention call, from one step of each
    (``run.probe``): a declaration is never the only evidence."""
    todo = [w for w in workloads if not w.attention and not w.distributed]
    if not todo:
        return {}
    print(
        f"detbench attribute: one step of each of {len(todo)} workloads, to see which call "
        "scaled_dot_product_attention",
        file=sys.stderr,
    )
    probed = probe_ops(todo, sources, config.device, config.profile, config.seed)
    seen = probed.calling("scaled_dot_product_attention")
    if seen:
        print(
            f"  seen calling it without declaring attention=True: {', '.join(seen)}",
            file=sys.stderr,
        )
    for key, why in probed.failed.items():
        print(f"  {key}: not probed ({why}); its declarations stand", file=sys.stderr)
    return probed.calls


def run_command(args: argparse.Namespace) -> int:
    if args.json and not args.dry_run:
        raise UserError("--json goes with --dry-run (a run's records are in its results.jsonl)")
    config = study_config(args)
    study = config.study
    assert study is not None
    # The study's words load pandas and scipy: only once the options are checked.
    from detbench.analysis.attribution import describe
    from detbench.report.attribution import conclusions

    def summary(run: ReportRun) -> str:
        return "\n".join(
            f"{suite}:\n" + "\n".join(f"  {line}" for line in lines)
            for suite, lines in conclusions(run.df, study).items()
        )

    return execute(
        config, args, cuda_here(), summary=summary, command="attribute", preface=describe(study)
    )
