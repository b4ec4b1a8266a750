"""The public run API: a ``RunConfig`` in, a results directory out. Every command that runs
starts here, with plain arguments: nothing below the command line sees its options.

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
    """Check ``config`` against this machine and plan it, writing nothing; every input error
    is raised here as a ``DetbenchError``. ``cuda``: whether a GPU is usable (None: ask torch).
    ``dry_run``: a CUDA plan is made on a host without a GPU too (a paper estimate)."""
    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    validate(config, cuda, paper=dry_run and not cuda)
    return prepare(config, stream)


def run_benchmark(
    config: RunConfig, stream: TextIO = sys.stderr, estimate: Estimate | float | None = None
) -> Path:
    """Check, plan and run ``config``; the run's directory (``detbench.load_results``)."""
    run_planned(plan_run(config, stream), estimate)
    return config.out


def run_planned(runner: Runner, estimate: Estimate | float | None = None) -> RunStats:
    """Run what ``plan_run`` planned (``estimate``: the plan's, or its seconds); the statistics."""
    return runner.run(estimate)
