"""The public run API: a ``RunConfig`` in, a results directory out. ``detbench run`` and
``detbench attribute`` (through ``cli.execute``, which prints the plan and the summary around
it), ``detbench gpu-check`` and ``detbench audit`` all start their runs here, with plain
arguments: nothing below the command line sees its options.

    from pathlib import Path
    from detbench import RunConfig, get_mode, run_benchmark
    out = run_benchmark(RunConfig(out=Path("/tmp/bmm"), suites=["bmm"], device="cpu",
                                  modes=[get_mode("default"), get_mode("det-algos")]))
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from detbench.run.config import RunConfig, validate
from detbench.run.runner import Runner, prepare
from detbench.run.runstats import RunStats

if TYPE_CHECKING:
    from detbench.run.estimate import Estimate


def plan_run(
    config: RunConfig, stream: TextIO = sys.stderr, cuda: bool | None = None, dry_run: bool = False
) -> Runner:
    """Check ``config`` against this machine and plan it, writing nothing: the runner to run
    (``runner.plan``, ``runner.missing`` for a resumed run). Every input error is raised here as
    a ``DetbenchError`` with one clear line. ``cuda``: whether a GPU is usable (default: ask
    torch). ``dry_run``: only the plan is wanted, so a CUDA plan is made on a host without a
    GPU too (its estimate is then a paper one); a real run still refuses it."""
    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    validate(config, cuda, paper=dry_run and not cuda)
    return prepare(config, stream)


def run_benchmark(
    config: RunConfig, stream: TextIO = sys.stderr, estimate: Estimate | float | None = None
) -> Path:
    """Check, plan and run ``config`` (progress to ``stream``); the run's directory, holding
    ``results.jsonl`` and ``env.json``. Read it with ``detbench.load_results``."""
    run_planned(plan_run(config, stream), estimate)
    return config.out


def run_planned(runner: Runner, estimate: Estimate | float | None = None) -> RunStats:
    """Run what ``plan_run`` planned; where the time went. ``estimate``: the plan's (or its
    seconds alone), which the progress line follows and the run's statistics keep."""
    return runner.run(estimate)
