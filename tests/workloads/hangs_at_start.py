"""A workload file whose import hangs in the worker (as a wedged GPU hangs CUDA initialisation),
but not in the runner, which loads it too to list its workloads."""

from __future__ import annotations

import sys
import time
from typing import Any

import torch

import detbench

_main = sys.modules["__main__"]
if getattr(getattr(_main, "__spec__", None), "name", None) == "detbench.worker.child":
    time.sleep(600)


@detbench.workload(suite="hangs", items_per_step=1)
def never_measured(ctx: detbench.Context) -> Any:
    x = torch.ones(4, device=ctx.device)
    return lambda: [x]
