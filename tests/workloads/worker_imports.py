"""A workload that looks at what its worker process has imported: it fails, naming them, where
any module of the parent side (the run's orchestration, analysis, report, locate's stages, the
CLI) is loaded, or where it finds itself outside a worker (no ``detbench.worker.measure``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

import detbench

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: tomli, which pytest itself needs there
    import tomli as tomllib

#: What a worker must not load: the parent's modules, as the child-side import contract in
#: pyproject.toml names them (tests/test_layers.py checks that it names every module).
_CONTRACTS = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
PARENT = tuple(
    next(
        c["forbidden_modules"]
        for c in _CONTRACTS["tool"]["importlinter"]["contracts"]
        if c["name"].startswith("the child side")
    )
)


def parent_modules() -> list[str]:
    """The modules of the parent side this process has loaded."""
    return sorted(m for m in sys.modules if m.startswith(PARENT))


@detbench.workload(suite="imports", items_per_step=1)
def what_a_worker_loaded(ctx: detbench.Context) -> Any:
    if "detbench.worker.measure" not in sys.modules:
        raise RuntimeError("not in a worker: detbench.worker.measure is not loaded")
    loaded = parent_modules()
    if loaded:
        raise RuntimeError(f"the worker loaded the parent's modules: {', '.join(loaded)}")
    x = torch.ones(4, device=ctx.device)

    def step() -> list[torch.Tensor]:
        return [x * 2]

    return step
