"""Workloads for ``run --cudnn-log`` on a CPU, where cuDNN never loads and writes no log.

``sees_the_log_variables`` fails unless its worker was started with cuDNN's log variables set
(level 3, a file under the run's logs/): the runner's part. ``replays_a_recorded_log`` appends to
that file an excerpt of a real cuDNN 9.19 log recorded on an H100 (tests/data/cudnn/: replicate 0
the excerpt of process r0, every other replicate that of r3), as cuDNN would while the workload
runs: the worker's part, from the log's bytes to the record. Neither says anything about cuDNN
itself; the recorded excerpts do.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

import detbench

SAMPLES = Path(__file__).resolve().parent.parent / "data" / "cudnn"


def _log() -> Path:
    level, dest = os.environ.get("CUDNN_LOGLEVEL_DBG"), os.environ.get("CUDNN_LOGDEST_DBG")
    if level != "3" or not dest or Path(dest).parent.name != "logs":
        raise RuntimeError(f"cuDNN's log variables are not set: level {level!r}, file {dest!r}")
    return Path(dest)


@detbench.workload(suite="cudnnlog", items_per_step=1)
def sees_the_log_variables(ctx: detbench.Context) -> Any:
    _log()
    x = torch.arange(8.0, device=ctx.device)
    return lambda: [x * 2]


@detbench.workload(suite="cudnnlog", items_per_step=1)
def replays_a_recorded_log(ctx: detbench.Context) -> Any:
    log = _log()
    process = "r0" if log.name.startswith("r0-") else "r3"
    sample = SAMPLES / f"conv3d_r3d18_stage1-bench-log-{process}.log"
    with log.open("ab") as f:  # while the workload builds, as cuDNN appends while it runs
        f.write(sample.read_bytes())
    x = torch.arange(8.0, device=ctx.device)
    return lambda: [x + 1]
