"""Options for running detbench's suites as pytest-benchmark tests under one mode.

A mode is process state, so it is applied once, here, before any test touches CUDA: one pytest
process measures one mode. Compare modes with pytest-benchmark's own tools, for example
``--benchmark-save=default`` in one process and ``--benchmark-compare`` in the next.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

#: The mode this pytest process applied (the test reads it to check what it measured).
APPLIED_MODE = pytest.StashKey[Any]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("detbench")
    group.addoption("--detbench-mode", default="default", help="mode from 'detbench modes'")
    group.addoption(
        "--detbench-profile",
        choices=("quick", "full"),
        default=None,
        help="workload sizes (default: full on cuda, quick on cpu)",
    )
    group.addoption(
        "--detbench-device",
        choices=("cpu", "cuda"),
        default=None,
        help="default: cuda when a GPU is present",
    )
    group.addoption(
        "--detbench-suite",
        action="append",
        default=None,
        help="built-in suite (repeatable; default: all)",
    )


def pytest_configure(config: pytest.Config) -> None:
    from detbench.core.modes import get_mode
    from detbench.worker.applied import apply

    name = config.getoption("--detbench-mode", default=None)
    if name is None:  # this conftest's options are not in play (another test directory)
        return
    mode = get_mode(name)
    # As in a detbench worker: the mode's environment first (cuBLAS reads it when its handle is
    # created, after this), then the flags, before any CUDA work.
    for key, value in mode.environment(os.environ).items():
        os.environ.setdefault(key, value)
    apply(mode)
    config.stash[APPLIED_MODE] = mode


@pytest.fixture
def detbench_mode(request: pytest.FixtureRequest) -> Any:
    """The mode of ``--detbench-mode``, as applied to this process before any test ran."""
    return request.config.stash[APPLIED_MODE]
